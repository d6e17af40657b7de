"""GRPO advantages of the kept rows, for the options TRL defines on the whole batch.

`GRPOTrainer` normalises rewards per prompt group, except for two options that use the whole generation batch:
`scale_rewards="batch"` divides by the batch's reward std, and `multi_objective_aggregation="normalize_then_sum"`
z-scores the summed per-group scores over the batch. After SNR filtering, "the batch" is the kept rows: these
functions give the advantages `GRPOTrainer` would compute if the generation batch held only those rows. Per-group
options need no recomputation (a group's rows are kept or dropped together). Pure torch; no trainer imports.
"""

from __future__ import annotations

import torch


# TRL's epsilon in (r - mean) / (std + eps).
STD_EPS = 1e-4


def batch_dependent(scale_rewards: str, aggregation: str) -> bool:
    """Whether the advantages depend on rows outside their prompt group."""
    return scale_rewards == "batch" or aggregation == "normalize_then_sum"


def _nanstd(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """Unbiased standard deviation ignoring NaNs, over `dim` (all elements when None)."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    std = (torch.nansum((x - mean) ** 2, dim=dim, keepdim=True) / (count - 1)).sqrt()
    return std if keepdim else std.squeeze(dim)


def kept_row_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    scale_rewards: str,
    aggregation: str,
) -> torch.Tensor:
    """Advantages (N,) of a batch of N rows in group order (N a multiple of `num_generations`), as TRL defines them.

    Args:
        rewards_per_func: (N, F) raw rewards of the F reward functions, NaN where a function gave None.
        reward_weights: (F,) the trainer's `reward_weights`.
        num_generations: G, rows per prompt group.
        scale_rewards: `"group"`, `"batch"` or `"none"`.
        aggregation: `"sum_then_normalize"` or `"normalize_then_sum"`.

    Rows no reward function scored get advantage 0, as in TRL.
    """
    weights = reward_weights.to(rewards_per_func.device, rewards_per_func.dtype).unsqueeze(0)  # (1, F)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)  # (N,)
    if aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights).nansum(dim=1)  # (N,)
        rewards[unscorable] = torch.nan
        group_mean = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
        advantages = rewards - group_mean
        if scale_rewards == "group":
            std = _nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
            advantages = advantages / (std + STD_EPS)
        elif scale_rewards == "batch":
            advantages = advantages / (_nanstd(rewards) + STD_EPS)
        elif scale_rewards != "none":
            raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    elif aggregation == "normalize_then_sum":
        grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.size(1))  # (N / G, G, F)
        mean = torch.nanmean(grouped, dim=1, keepdim=True)
        std = _nanstd(grouped, dim=1, keepdim=True)
        scores = ((grouped - mean) / (std + STD_EPS)).view(-1, rewards_per_func.size(1))  # (N, F)
        summed = (scores * weights).nansum(dim=1)
        summed[unscorable] = torch.nan
        advantages = (summed - torch.nanmean(summed)) / (_nanstd(summed) + STD_EPS)
    else:
        raise ValueError(
            f"multi_objective_aggregation must be 'sum_then_normalize' or 'normalize_then_sum', got {aggregation!r}"
        )
    return torch.nan_to_num(advantages, nan=0.0)


def used_advantages(
    keep_rows: torch.Tensor,
    logged: torch.Tensor,
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    num_generations: int,
    *,
    recompute: bool,
    scale_rewards: str,
    aggregation: str,
) -> torch.Tensor:
    """The advantage the loss uses for each row of the generation batch, `(N_global,)` float32; NaN on dropped rows.

    TRL's group advantages (`logged`, `(N_global,)`, as TRL computed them) stay valid for whole kept groups. With
    `recompute` (options TRL defines over the batch: `scale_rewards="batch"`, `normalize_then_sum`; or groups that
    keep only some rollouts) they are recomputed over the kept rows alone from `rewards_per_func` `(N_global, F)`.
    """
    if not recompute:
        return logged.masked_fill(~keep_rows.cpu(), float("nan"))
    used = torch.full((keep_rows.numel(),), float("nan"))
    if keep_rows.any():
        kept = rewards_per_func[keep_rows.to(rewards_per_func.device)]  # (N_kept, F), in group order
        per_group = keep_rows.view(-1, num_generations).sum(dim=1)  # (P,): G, or k for "within_group"
        used[keep_rows.cpu()] = kept_row_advantages(
            kept.cpu(), reward_weights.cpu(), int(per_group[per_group > 0][0]), scale_rewards, aggregation
        ).float()
    return used
