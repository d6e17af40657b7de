"""RAGEN's ranking metrics: what the filter scores each prompt group by, besides the reward spread.

RAGEN's `rollout_filter_metric` (on `main`, `ragen/trainer/rollout_filter.py`) picks one score per group from
its G rollouts, all in float32:

| Metric here | RAGEN's name | Group score |
|---|---|---|
| `"variance"` | (the paper's Var̂(R\\|X)) | sample variance of the rewards (ddof = 1) |
| `"std"` | `reward_variance` | its square root: RAGEN's default |
| `"reward"` | `reward` | mean reward |
| `"reward_sum"` | `reward_sum` | summed reward |
| `"entropy"` | `entropy` | mean of the rollouts' entropies |
| `"entropy_variance"` | `entropy_variance` | sample std (ddof = 1) of the rollouts' entropies |
| `"length"` | `length` | mean of the rollouts' lengths |

A rollout's entropy is the mean of the policy's per-token entropy over the tokens the loss counts, and its length
is the number of those tokens. NaN rewards (unscored rollouts) are left out of a group's mean and sum; a group with
no finite reward scores 0. Pure torch, no trainer imports.
"""

from __future__ import annotations

import torch

from .selection import SCORE_METRICS, group_reward_scores


REWARD_METRICS = (*SCORE_METRICS, "reward", "reward_sum")  # computed from the rewards alone
ROW_METRICS = ("entropy", "entropy_variance", "length")  # need the rollouts' tokens (and entropies) too
ENTROPY_METRICS = ("entropy", "entropy_variance")  # need a forward pass over the pre-filter batch
RANKING_METRICS = (*REWARD_METRICS, *ROW_METRICS)


def row_mean_entropy(entropies: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Each rollout's mean per-token entropy over its loss tokens, `(B,)` float32 (0 for a row without any).

    Args:
        entropies (`torch.Tensor` of shape `(B, T)`): the policy's per-token entropies.
        loss_mask (`torch.Tensor` of shape `(B, T)`): 1 on the tokens the loss counts.
    """
    mask = loss_mask.float()
    return (entropies.float() * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)


def _grouped(values: torch.Tensor, num_generations: int, name: str) -> torch.Tensor:
    values = torch.as_tensor(values)
    if values.dim() != 1 or values.numel() == 0 or values.numel() % num_generations:
        raise ValueError(
            f"group_scores: {name} must be 1-D with a positive multiple of num_generations={num_generations} "
            f"entries (one per rollout, in group order), got shape {tuple(values.shape)}"
        )
    return values.detach().cpu().float().view(-1, num_generations)  # (P, G) float32


def group_scores(
    metric: str,
    num_generations: int,
    *,
    rewards: torch.Tensor | None = None,
    row_entropies: torch.Tensor | None = None,
    row_lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """The score of each prompt group under `metric`, `(P,)` float32 on the CPU (see the module's table).

    Args:
        metric (`str`): one of `RANKING_METRICS`.
        num_generations (`int`): G.
        rewards (`torch.Tensor` of shape `(P * G,)`): raw rewards in group order (the reward metrics).
        row_entropies (`torch.Tensor` of shape `(P * G,)`): each rollout's mean token entropy (`"entropy"`,
            `"entropy_variance"`), e.g. from [`row_mean_entropy`].
        row_lengths (`torch.Tensor` of shape `(P * G,)`): each rollout's loss-token count (`"length"`).
    """
    if metric not in RANKING_METRICS:
        raise ValueError(f"group_scores: metric must be one of {RANKING_METRICS}, got {metric!r}")
    if not isinstance(num_generations, int) or isinstance(num_generations, bool) or num_generations < 1:
        raise ValueError(f"group_scores: num_generations must be a positive int, got {num_generations!r}")
    source = {"entropy": row_entropies, "entropy_variance": row_entropies, "length": row_lengths}.get(metric, rewards)
    name = {"entropy": "row_entropies", "entropy_variance": "row_entropies", "length": "row_lengths"}.get(
        metric, "rewards"
    )
    if source is None:
        raise ValueError(f"group_scores: metric={metric!r} needs {name}, got None")
    if metric in SCORE_METRICS:
        return group_reward_scores(source, num_generations, metric=metric).cpu()
    grouped = _grouped(source, num_generations, name)  # (P, G) float32
    if metric == "reward":
        return torch.nan_to_num(torch.nanmean(grouped, dim=1), nan=0.0)
    if metric == "reward_sum":
        return torch.nansum(grouped, dim=1)
    if metric == "entropy_variance":
        return grouped.std(dim=1)  # ddof = 1, NaN for G = 1 (as RAGEN's torch.std)
    return grouped.mean(dim=1)  # entropy, length
