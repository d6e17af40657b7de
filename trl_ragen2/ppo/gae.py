"""Per-token PPO advantages for multi-turn LLM agents: reward placement, GAE over model tokens, value loss.

Pure torch, no trainer imports. Every tensor is completion-aligned and right-padded: (B, T) with T the
completion width. `mask` (B, T) is 1 on the tokens the model generated and 0 on everything else: padding after
the end of a completion and, in multi-turn rollouts, the environment's feedback and chat-template tokens between
two assistant turns (TRL's `completion_mask * tool_mask`).

The recursion runs over the sequence of model tokens only: a feedback token is not a step of the agent, so it
neither receives a reward nor passes on a discount, and its value is never read.

```python
rewards = place_rewards(mask, returns)                           # the trajectory return on the last model token
rewards = rewards + kl_reward_penalty(logps, ref_logps, mask, 0.05)  # optional KL-in-reward
advantages, returns = masked_gae(rewards, values, mask, gamma=1.0, lam=1.0)  # RAGEN-2: gamma = lambda = 1
advantages = whiten(advantages, mask, *moments_to_mean_var(masked_moments(advantages, mask)))
loss, clipped = clipped_value_loss(new_values, values, returns, mask, cliprange_value=0.5)
```
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _check_same_shape(fn: str, **tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 2 for s in shapes.values()):
        raise ValueError(f"{fn}: expected tensors of one (B, T) shape, got {shapes}")


# ---------------------------------------------------------------------------------------------------------------
# Token rewards


def last_model_token(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last model token, (B,) long; -1 for a row without model tokens."""
    positions = torch.arange(mask.size(1), device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.full_like(positions, -1)).max(dim=1).values


def turn_end_positions(row_mask: torch.Tensor, turn_spans: Sequence[Sequence[int]]) -> list[int | None]:
    """Last model token of each turn span `(start, end)` (end exclusive) in one row's mask (T,).

    A span with no model token inside the completion (a turn truncated away) gives `None`.
    """
    width = row_mask.size(0)
    model_positions = row_mask.bool().nonzero().squeeze(1).tolist()
    ends = []
    for span in turn_spans:
        if len(span) != 2:
            raise ValueError(f"turn_end_positions: a turn span must be (start, end), got {span!r}")
        start, end = int(span[0]), min(int(span[1]), width)
        inside = [p for p in model_positions if start <= p < end]
        ends.append(inside[-1] if inside else None)
    return ends


def place_rewards(
    mask: torch.Tensor,
    returns: torch.Tensor,
    turn_spans: Sequence[Sequence[Sequence[int]] | None] | None = None,
    turn_rewards: Sequence[Sequence[float] | None] | None = None,
) -> torch.Tensor:
    """Token-level rewards (B, T): per-turn rewards at turn ends and the rest of the return on the last model token.

    Args:
        mask (`torch.Tensor` of shape `(B, T)`):
            1 on model tokens.
        returns (`torch.Tensor` of shape `(B,)`):
            Trajectory return of each row (the weighted sum of the reward functions). Rows whose return is NaN
            (no reward function scored them) get no reward at all.
        turn_spans (list of `B` lists of `(start, end)` or `None`, *optional*):
            Token offsets into the completion of each assistant turn; `None` for a row without turns.
        turn_rewards (list of `B` lists of floats or `None`, *optional*):
            One reward per turn span, paid on that turn's last model token.

    The return paid on the last model token is `returns - sum(paid turn rewards)`, so the undiscounted sum of a
    row's token rewards is always its trajectory return: per-turn rewards change credit assignment, not the
    objective. Without turn rewards the whole return sits on the last model token.
    """
    if mask.dim() != 2 or returns.shape != (mask.size(0),):
        raise ValueError(
            f"place_rewards: mask must be (B, T) and returns (B,), got {tuple(mask.shape)} and {tuple(returns.shape)}"
        )
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    returns = returns.to(device=mask.device, dtype=torch.float32)
    last = last_model_token(mask)  # (B,)
    scored = (last >= 0) & torch.isfinite(returns)  # rows without model tokens or without a return get nothing
    paid = torch.zeros_like(returns)  # (B,) turn rewards already placed
    if turn_spans is not None and turn_rewards is not None:
        for row in scored.nonzero().squeeze(1).tolist():
            spans, values = turn_spans[row], turn_rewards[row]
            if spans is None or values is None:
                continue
            if len(spans) != len(values):
                raise ValueError(
                    f"place_rewards: row {row} has {len(spans)} turn_spans but {len(values)} turn_rewards; the "
                    "rollout must give one reward per assistant turn"
                )
            for position, value in zip(turn_end_positions(mask[row], spans), values, strict=True):
                if position is not None:
                    rewards[row, position] += float(value)
                    paid[row] += float(value)
    rows = scored.nonzero().squeeze(1)
    rewards[rows, last[rows]] += returns[rows] - paid[rows]
    return rewards


def kl_reward_penalty(logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor, coef: float) -> torch.Tensor:
    """Per-token KL penalty to add to the token rewards: `-coef * (logps - ref_logps)` on model tokens, (B, T)."""
    _check_same_shape("kl_reward_penalty", logps=logps, ref_logps=ref_logps, mask=mask)
    return -coef * (logps - ref_logps) * mask


# ---------------------------------------------------------------------------------------------------------------
# GAE


def masked_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the model tokens of each row.

    With the model tokens of a row at positions t_1 < ... < t_K, the recursion is
    `delta_k = r_k + gamma * V_{k+1} - V_k` (V_{K+1} = 0: the episode ends after the last model token) and
    `A_k = delta_k + gamma * lam * A_{k+1}`; the return target is `A_k + V_k`. Positions outside the mask get
    advantage and return 0 and their rewards and values are ignored.

    Args:
        rewards, values, mask (`torch.Tensor` of shape `(B, T)`):
            Token rewards (see [`place_rewards`]), value estimates V(s_t) of the state before each token, and the
            model-token mask.
        gamma, lam (`float`):
            Discount and GAE lambda, in [0, 1]. RAGEN-2 uses 1 and 1.

    Returns:
        `(advantages, returns)`, both (B, T) float32.
    """
    _check_same_shape("masked_gae", rewards=rewards, values=values, mask=mask)
    valid = mask.bool()
    rewards = torch.where(valid, rewards.float(), 0.0)
    values = torch.where(valid, values.float(), 0.0)
    if gamma == 1.0 and lam == 1.0:
        # The deltas telescope: A_t = (sum of rewards from t on) - V_t.
        reward_to_go = torch.where(valid, rewards.flip(1).cumsum(1).flip(1), 0.0)
        return torch.where(valid, reward_to_go - values, 0.0), reward_to_go

    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])  # (B,) value of the next model token
    next_advantage = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        is_model = valid[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = torch.where(is_model, advantage, 0.0)
        # a masked position is skipped: the next model token's value and advantage carry over it unchanged
        next_value = torch.where(is_model, values[:, t], next_value)
        next_advantage = torch.where(is_model, advantage, next_advantage)
    return advantages, torch.where(valid, advantages + values, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# Statistics over masked tokens (reducible across processes: sum the moments, then convert)


def masked_moments(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`[sum, sum of squares, count]` of `x` over the mask, float64 (3,); sum it across processes before use."""
    valid = mask.bool()
    x = torch.where(valid, x.double(), 0.0)
    return torch.stack([x.sum(), (x * x).sum(), valid.sum().double()])


def moments_to_mean_var(moments: torch.Tensor) -> tuple[float, float]:
    """Mean and unbiased variance from [`masked_moments`]; NaN where there are too few tokens."""
    total, squares, count = (float(v) for v in moments)
    if count < 1:
        return float("nan"), float("nan")
    mean = total / count
    if count < 2:
        return mean, float("nan")
    variance = max(squares / count - mean * mean, 0.0) * count / (count - 1)
    return mean, variance


def whiten(x: torch.Tensor, mask: torch.Tensor, mean: float, variance: float, eps: float = 1e-8) -> torch.Tensor:
    """`(x - mean) / sqrt(variance + eps)` on the mask, 0 elsewhere; `x` unchanged if the statistics are NaN."""
    if mean != mean or variance != variance:
        return x
    return torch.where(mask.bool(), (x - mean) * (variance + eps) ** -0.5, 0.0)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """`1 - Var(returns - values) / Var(returns)` over the mask (one process); NaN if the returns are constant."""
    _, residual = moments_to_mean_var(masked_moments(returns - values, mask))
    _, target = moments_to_mean_var(masked_moments(returns, mask))
    return explained_variance_from_vars(residual, target)


# Below this the returns are constant up to float rounding, and explained variance is undefined.
CONSTANT_VARIANCE = 1e-8


def explained_variance_from_vars(residual_variance: float, return_variance: float) -> float:
    """`1 - residual_variance / return_variance`, or NaN when the return variance is NaN or <= `CONSTANT_VARIANCE`."""
    if return_variance != return_variance or return_variance <= CONSTANT_VARIANCE:
        return float("nan")
    return 1.0 - residual_variance / return_variance


# ---------------------------------------------------------------------------------------------------------------
# Value loss


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss per token, `0.5 * max((V - R)^2, (V_clip - R)^2)` with
    `V_clip = V_old + clamp(V - V_old, -c, c)`.

    Returns `(per_token_loss, clipped)`, both (B, T) and zero outside the mask; `clipped` is 1.0 where the clipped
    term is the larger one (the gradient of that token is cut). `cliprange_value=None` disables clipping.
    Aggregation (the token normaliser) is left to the caller.
    """
    _check_same_shape("clipped_value_loss", values=values, old_values=old_values, returns=returns, mask=mask)
    values, old_values, returns = values.float(), old_values.float(), returns.float()
    unclipped = (values - returns) ** 2
    if cliprange_value is None:
        loss, clipped = unclipped, torch.zeros_like(unclipped)
    else:
        values_clipped = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
        clipped_error = (values_clipped - returns) ** 2
        loss = torch.maximum(unclipped, clipped_error)
        clipped = (clipped_error > unclipped).float()
    mask = mask.to(loss.dtype)
    return 0.5 * loss * mask, clipped * mask
