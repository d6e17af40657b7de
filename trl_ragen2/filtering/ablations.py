"""The filters of the paper's ablations (Tables 6 and 7), as RAGEN's `more-experiments` branch defines them.

- **Percentile band** (Table 6, the quartile ablation): rank the candidate groups by score and keep those whose
  rank falls in `[low, high)` of the ranking ([`keep_percentile_range`]; `select_groups(strategy=
  "percentile_range")` applies it after the zero-score exclusion, like every group rule).
- **Within-group trajectories** (Table 7, the trajectory-level control): keep every prompt group, but only
  `max(1, round(ratio * G))` of its G rollouts, the subset with the largest reward variance
  ([`select_within_group`]). The subset of k values with the largest variance is always the j smallest plus the
  k - j largest, for some j, so trying every j finds it.

Pure torch, no trainer imports. Rewards are in group order (rows p*G ... p*G + G - 1 are prompt p's rollouts).
"""

from __future__ import annotations

import math

import torch


def percentile_bounds(num_candidates: int, low: float, high: float) -> tuple[int, int]:
    """The rank slice `[start, stop)` of the band `[low, high)` over `num_candidates` ranked groups.

    RAGEN's arithmetic: `start = round(low * N)`, `stop = round(high * N)` (Python's round, halves to even), then
    `stop` is clamped to N and raised to `start + 1`, so a band keeps at least one group unless `start >= N`.
    """
    start = round(low * num_candidates)
    stop = max(start + 1, min(round(high * num_candidates), num_candidates))
    return start, min(stop, num_candidates)


def keep_percentile_range(scores: torch.Tensor, *, low: float, high: float, largest: bool = True) -> torch.Tensor:
    """Positions of the candidates whose rank falls in `[low, high)` (rank 0 = the highest score, or the lowest with
    `largest=False`); equal scores are ranked in ascending position order (a stable sort).

    Args:
        scores (`torch.Tensor` of shape `(N,)`): the candidates' scores (float32, CPU).
        low, high (`float`): the band, `0 <= low < high <= 1`; `[0.75, 1.0)` is the bottom quartile when ranking
            the largest first.
    """
    order = torch.sort(scores, descending=largest, stable=True).indices  # (N,) positions, rank order
    start, stop = percentile_bounds(scores.numel(), low, high)
    return order[start:stop]


def within_group_count(keep_ratio: float, num_generations: int) -> int:
    """Rollouts kept per group: `max(1, round(keep_ratio * G))` (Python's round, halves to even), at most G."""
    return min(max(1, round(keep_ratio * num_generations)), num_generations)


def max_variance_subset(rewards: torch.Tensor, keep: int) -> torch.Tensor:
    """The `keep` of a group's G rewards with the largest sample variance, as a `(G,)` bool mask.

    The rewards are sorted ascending (stable: equal rewards in index order) and every split "the j lowest plus the
    keep - j highest", j = 0 ... keep, is scored by its float32 sample variance (ddof = 1; 0 when keep = 1); the
    first j with the largest variance wins, so one kept rollout is the highest reward. Ties in the rewards change
    which indices are kept, never the kept values. NaN rewards (unscored rollouts) rank after every finite one,
    so they are kept only when the group has fewer than `keep` finite rewards.
    """
    size = rewards.numel()
    if keep >= size:
        return torch.ones(size, dtype=torch.bool)
    values = rewards.detach().cpu().float()  # (G,) float32, RAGEN's precision
    finite = torch.isfinite(values)
    order = torch.sort(torch.where(finite, values, torch.inf), stable=True).indices  # (G,), NaN rows last
    finite_count = int(finite.sum())
    chosen_from = min(keep, finite_count)  # the rule picks among the finite rewards; NaN rows fill what is left
    ranked = order[:finite_count]
    best_variance, best_low = -1.0, 0
    for low in range(chosen_from + 1):
        high = chosen_from - low
        picked = torch.cat([ranked[:low], ranked[finite_count - high :] if high else ranked[:0]])
        variance = values[picked].var().item() if chosen_from > 1 else 0.0
        if variance > best_variance:
            best_variance, best_low = variance, low
    high = chosen_from - best_low
    mask = torch.zeros(size, dtype=torch.bool)
    mask[ranked[:best_low]] = True
    if high:
        mask[ranked[finite_count - high :]] = True
    mask[order[finite_count : finite_count + keep - chosen_from]] = True  # NaN rows, only when too few are finite
    return mask


def select_within_group(rewards: torch.Tensor, num_generations: int, keep_ratio: float) -> torch.Tensor:
    """Keep every prompt group, and in each the `within_group_count(keep_ratio, G)` rollouts of largest variance.

    Args:
        rewards (`torch.Tensor` of shape `(P * G,)`): one raw reward per rollout, in group order.
        num_generations (`int`): G.
        keep_ratio (`float`): the share of each group's rollouts to keep, in (0, 1].

    Returns:
        `torch.Tensor` of shape `(P * G,)`, bool, on the rewards' device: the kept rollouts, k per group.
    """
    if not (isinstance(keep_ratio, int | float) and not isinstance(keep_ratio, bool) and 0.0 < keep_ratio <= 1.0):
        raise ValueError(f"select_within_group: keep_ratio must be in (0, 1], got {keep_ratio!r}")
    if not isinstance(num_generations, int) or isinstance(num_generations, bool) or num_generations < 1:
        raise ValueError(f"select_within_group: num_generations must be a positive int, got {num_generations!r}")
    rewards = torch.as_tensor(rewards)
    if rewards.dim() != 1 or rewards.numel() == 0 or rewards.numel() % num_generations:
        raise ValueError(
            f"select_within_group: rewards must be 1-D with a positive multiple of num_generations={num_generations} "
            f"entries (every rollout of every group, in group order), got shape {tuple(rewards.shape)}"
        )
    keep = within_group_count(keep_ratio, num_generations)
    grouped = rewards.view(-1, num_generations)  # (P, G)
    mask = torch.stack([max_variance_subset(group, keep) for group in grouped])  # (P, G)
    return mask.reshape(-1).to(rewards.device)


def check_percentile_band(low, high, name: str = "percentile") -> None:
    """Raise a `ValueError` naming `name` unless `0 <= low < high <= 1`."""
    for value in (low, high):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{name} band must be two numbers, got low={low!r}, high={high!r}")
    if not 0.0 <= low < high <= 1.0:
        raise ValueError(
            f"{name} band must satisfy 0 <= low < high <= 1, got low={low!r}, high={high!r}; e.g. low=0.75, "
            "high=1.0 keeps the bottom quartile of the groups ranked by score"
        )
