"""SNR-aware filtering: rank prompt groups by within-prompt reward variance and keep the top of them.

RAGEN-2 (arXiv 2604.06268, §3.3) updates only on the prompt groups whose rewards vary most: a group whose G
rollouts all earn the same reward has zero advantage and carries no task signal, only the noise of the KL and
entropy terms. These functions are pure torch and free of trainer imports, so any RL stack can use them:

```python
scores = group_reward_scores(rewards, num_generations=8)      # (P,) sample variance per prompt group
keep = select_groups(scores, strategy="top_p", top_p=0.9)     # (P,) bool: the groups holding 90% of the mass
stats = filter_stats(rewards, num_generations=8, keep=keep)   # kept fraction, variance share, Table 8 Std/Mean
```

Rewards are always laid out in group order: the G rollouts of prompt p are rows p*G ... p*G + G - 1.
"""

from __future__ import annotations

import math
import numbers

import torch

from .ablations import check_percentile_band, keep_percentile_range


SCORE_METRICS = ("variance", "std")
STRATEGIES = ("top_p", "top_k", "min_p", "percentile_range")
TOP_P_MODES = ("linear", "softmax")
# How the linear top-p margin eps is measured: "relative" (a share of the candidates' score sum, so the rule is the
# same on every reward scale) or "absolute" (RAGEN's, in score units: made for rewards of order 1 to 10).
SELECTION_EPS_MODES = ("relative", "absolute")
# Groups with |score| at or below this are "zero variance" (all rollouts earned the same reward); compared in float32.
ZERO_SCORE_TOL = 1e-10
# RAGEN's min-p rule widens its threshold by this much, in float32.
MIN_P_SLACK = 1e-10


def _check_rewards(rewards: torch.Tensor, num_generations: int, fn: str) -> torch.Tensor:
    if not isinstance(num_generations, int) or isinstance(num_generations, bool) or num_generations < 1:
        raise ValueError(f"{fn}: num_generations must be a positive int, got {num_generations!r}")
    rewards = torch.as_tensor(rewards)
    if rewards.dim() != 1:
        raise ValueError(
            f"{fn}: rewards must be 1-D of shape (num_groups * num_generations,), got shape {tuple(rewards.shape)}; "
            "sum the reward functions (weighted) into one reward per rollout first"
        )
    if rewards.numel() == 0 or rewards.numel() % num_generations != 0:
        raise ValueError(
            f"{fn}: rewards has {rewards.numel()} entries, which is not a positive multiple of "
            f"num_generations={num_generations}; rewards must hold every rollout of every group, in group order"
        )
    return rewards.to(torch.float64)


def group_reward_scores(rewards: torch.Tensor, num_generations: int, metric: str = "variance") -> torch.Tensor:
    """Score each prompt group by the spread of its rollouts' rewards.

    Args:
        rewards (`torch.Tensor` of shape `(P * G,)`):
            One (already weighted and summed) reward per rollout, in group order. NaN rewards (rollouts no reward
            function could score) are ignored within their group.
        num_generations (`int`):
            Rollouts per prompt group, G.
        metric (`str`, defaults to `"variance"`):
            `"variance"`: the unbiased sample variance (ddof=1), as in the paper's Var̂(R|X). `"std"`: its square
            root, as in RAGEN's released code. A group with fewer than 2 finite rewards scores 0.

    Returns:
        `torch.Tensor` of shape `(P,)`, float32 on the rewards' device.
    """
    if metric not in SCORE_METRICS:
        raise ValueError(f"group_reward_scores: metric must be one of {SCORE_METRICS}, got {metric!r}")
    grouped = _check_rewards(rewards, num_generations, "group_reward_scores").view(-1, num_generations)  # (P, G)
    finite = torch.isfinite(grouped)
    count = finite.sum(dim=1)  # (P,)
    values = torch.where(finite, grouped, torch.zeros_like(grouped))
    mean = values.sum(dim=1) / count.clamp(min=1)
    squared_dev = torch.where(finite, (grouped - mean.unsqueeze(1)) ** 2, torch.zeros_like(grouped))
    variance = squared_dev.sum(dim=1) / (count - 1).clamp(min=1)
    variance = torch.where(count >= 2, variance, torch.zeros_like(variance))
    scores = variance if metric == "variance" else variance.sqrt()
    return scores.to(torch.float32)


# ---------------------------------------------------------------------------------------------------------------
# Selection: RAGEN's `RewardRolloutFilter` group selection, rule for rule and in its float32 arithmetic. Each strategy
# receives the candidates' scores (float32, CPU, in ascending group order) and returns the candidate positions kept.


def _ranked(keys: torch.Tensor, descending: bool) -> torch.Tensor:
    """Candidate positions ordered by `keys`; equal keys keep ascending group order (a stable sort)."""
    return torch.sort(keys, descending=descending, stable=True).indices


def linear_threshold(
    total: torch.Tensor, top_p: float, selection_eps: float, selection_eps_mode: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The margin and the threshold `top_p * total - margin` of the linear top-p rule, both 0-dim float32.

    `total` is the candidates' score sum (float32). The margin is `selection_eps * total` in the `"relative"` mode
    (so the rule does not depend on the reward scale) and `selection_eps` itself in the `"absolute"` mode (RAGEN's).
    """
    total = torch.as_tensor(total, dtype=torch.float32)
    if selection_eps_mode == "relative":
        margin = total * selection_eps
        return margin, top_p * total - margin
    return torch.tensor(selection_eps, dtype=torch.float32), top_p * total - selection_eps  # RAGEN's expression


def _keep_top_p(
    scores: torch.Tensor,
    *,
    top_p: float,
    top_p_mode: str,
    selection_eps: float,
    selection_eps_mode: str,
    largest: bool,
    **_,
):
    if top_p >= 1.0:
        return torch.arange(scores.numel())  # RAGEN's "no filtering" value: every candidate, whatever its score
    if top_p_mode == "softmax":
        # Nucleus over softmax(s) (keep largest) or softmax(-s) (keep smallest): the shortest prefix of the
        # probabilities, ranked high to low, whose cumulative sum reaches top_p; at least one group.
        probabilities = torch.softmax(scores if largest else -scores, dim=0)
        order = _ranked(probabilities, descending=True)
        cumulative = torch.cumsum(probabilities[order], dim=0)
        first_reaching = int(torch.searchsorted(cumulative, top_p))  # top_p is compared in float32
        return order[: min(first_reaching + 1, scores.numel())]
    # Linear: walk the ranked candidates (high to low, or low to high for keep-smallest), adding each positive score
    # to the kept mass, until that mass reaches top_p * sum(candidate scores) - margin. The walk stops at the first
    # score <= 0; if the mass never reaches the threshold nothing is kept, and a threshold <= 0 keeps nothing.
    order = _ranked(scores, descending=largest)
    _, threshold = linear_threshold(scores.sum(), top_p, selection_eps, selection_eps_mode)
    kept_mass, count = 0.0, 0  # the mass adds up in double, and each comparison rounds it to float32
    for score in scores[order].tolist():
        if kept_mass >= threshold or score <= 0:
            break
        kept_mass += score
        count += 1
    return order[:count] if kept_mass >= threshold else order[:0]


def _keep_top_k(scores: torch.Tensor, *, top_k: int | float, num_groups: int, largest: bool, **_):
    # An int is a count (RAGEN's top_k_abs), a float in (0, 1] a fraction of all P groups (RAGEN's top_k, which
    # truncates); either way at least one and at most every candidate.
    wanted = top_k if _is_count(top_k) else int(top_k * num_groups)
    return _ranked(scores, descending=largest)[: max(min(wanted, scores.numel()), 1)]


def _keep_min_p(scores: torch.Tensor, *, min_p: float, largest: bool, **_):
    if largest:  # at least min_p times the best score
        passes = scores >= scores.max() * min_p - MIN_P_SLACK
    else:  # at most the smallest score divided by min_p
        passes = scores <= scores.min() / (min_p + MIN_P_SLACK) + MIN_P_SLACK
    return passes.nonzero().squeeze(1)


def _keep_percentile_range(scores: torch.Tensor, *, percentile_range: tuple[float, float], largest: bool, **_):
    low, high = percentile_range
    return keep_percentile_range(scores, low=low, high=high, largest=largest)


_STRATEGY_FUNCTIONS = {
    "top_p": _keep_top_p,
    "top_k": _keep_top_k,
    "min_p": _keep_min_p,
    "percentile_range": _keep_percentile_range,
}


def _is_count(top_k) -> bool:
    return isinstance(top_k, numbers.Integral)


def check_top_k(top_k, name: str = "top_k") -> None:
    """Raise a `ValueError` naming `name` unless `top_k` is a count (an int >= 1) or a fraction (a float in (0, 1])."""
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Real):
        raise ValueError(
            f"{name} must be an int >= 1 (a number of groups) or a float in (0, 1] (a fraction of the groups), "
            f"got {top_k!r}"
        )
    if _is_count(top_k):
        if top_k < 1:
            raise ValueError(f"{name} must be >= 1 when it is an int (a number of groups), got {top_k!r}")
    elif not 0.0 < top_k <= 1.0:
        raise ValueError(
            f"{name}={top_k!r} is a float, so it is a fraction of the groups and must be in (0, 1]; "
            f"for a number of groups pass an int (e.g. {name}=4)"
        )


def _validate_selection(
    strategy, top_p, top_k, min_p, top_p_mode, selection_eps, selection_eps_mode, percentile_range
) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"select_groups: strategy must be one of {STRATEGIES}, got {strategy!r}")
    if top_p_mode not in TOP_P_MODES:
        raise ValueError(f"select_groups: top_p_mode must be one of {TOP_P_MODES}, got {top_p_mode!r}")
    if strategy == "top_p" and not (isinstance(top_p, int | float) and 0.0 < top_p <= 1.0):
        raise ValueError(f"select_groups: top_p must be in (0, 1], got {top_p!r}")
    if strategy == "top_k":
        check_top_k(top_k, "select_groups: top_k")
    if strategy == "min_p" and not (isinstance(min_p, int | float) and 0.0 <= min_p <= 1.0):
        raise ValueError(f"select_groups: min_p must be in [0, 1], got {min_p!r}")
    if strategy == "percentile_range":
        if not (isinstance(percentile_range, tuple | list) and len(percentile_range) == 2):
            raise ValueError(f"select_groups: percentile_range must be a pair (low, high), got {percentile_range!r}")
        check_percentile_band(*percentile_range, name="select_groups: percentile_range")
    if not (isinstance(selection_eps, int | float) and math.isfinite(selection_eps) and selection_eps >= 0.0):
        raise ValueError(f"select_groups: selection_eps must be a finite number >= 0, got {selection_eps!r}")
    if selection_eps_mode not in SELECTION_EPS_MODES:
        raise ValueError(
            f"select_groups: selection_eps_mode must be one of {SELECTION_EPS_MODES}, got {selection_eps_mode!r}"
        )
    if selection_eps_mode == "relative" and selection_eps >= 1.0:
        raise ValueError(
            f"select_groups: selection_eps={selection_eps!r} with selection_eps_mode='relative' is a share of the "
            "score mass and must be below 1 (below top_p for the linear rule to keep anything)"
        )


def select_groups(
    scores: torch.Tensor,
    *,
    strategy: str = "top_p",
    top_p: float = 0.9,
    top_k: float | None = None,
    min_p: float | None = None,
    top_p_mode: str = "linear",
    include_zero: bool = False,
    selection_eps: float = 0.0,
    selection_eps_mode: str = "absolute",
    largest: bool = True,
    percentile_range: tuple[float, float] = (0.0, 1.0),
) -> torch.Tensor:
    """Choose which prompt groups to train on, exactly as RAGEN's `RewardRolloutFilter` selects them.

    The scores are compared in float32 on the CPU, as RAGEN does. The candidates are all groups, minus those with
    `|score| <= 1e-10` unless `include_zero`; when none is left nothing is kept. Groups are ranked by descending
    score (ascending with `largest=False`); equal ranking keys go to the lower group index first.

    Args:
        scores (`torch.Tensor` of shape `(P,)`):
            Per-group scores, e.g. from [`group_reward_scores`]. Must be finite.
        strategy (`str`, defaults to `"top_p"`):
            `"top_p"`: a share of the score mass (see `top_p_mode`). `"top_k"`: a number or fraction of the groups.
            `"min_p"`: the groups scoring close enough to the best (or, with `largest=False`, the smallest) score.
            `"percentile_range"`: the groups whose rank falls in a band (RAGEN's `more-experiments` branch).
        top_p (`float`, defaults to `0.9`):
            Mass share for `"top_p"`, in (0, 1]. The paper's rho = 0.9. `1.0` keeps every candidate in both modes.
        top_k (`int` or `float`, *optional*):
            For `"top_k"`: an int is a number of groups (RAGEN's `top_k_abs`); a float in (0, 1] is a fraction of
            all P groups, `int(top_k * P)` of them (RAGEN's `top_k`; `1.0` keeps every candidate). At least one
            group and never more than the candidates are kept.
        min_p (`float`, *optional*):
            For `"min_p"`, in [0, 1]: keep the candidates with `s >= min_p * max(s) - 1e-10`, or with
            `largest=False` those with `s <= min(s) / (min_p + 1e-10) + 1e-10`.
        top_p_mode (`str`, defaults to `"linear"`):
            `"linear"` (the paper): walk the ranked candidates adding their scores until the kept mass reaches
            `top_p * sum(candidate scores) - margin` (see `selection_eps_mode`); the walk stops at a score <= 0,
            and when the mass never reaches the threshold, or the threshold is <= 0, **nothing** is kept.
            `"softmax"` (RAGEN's release scripts): rank `softmax(s)` (keep largest) or `softmax(-s)` (keep smallest)
            and keep the shortest prefix whose cumulative probability reaches `top_p`; at least one group.
        include_zero (`bool`, defaults to `False`):
            Keep zero-score groups among the candidates.
        selection_eps (`float`, defaults to `0.0`):
            Margin eps of the linear top-p threshold (RAGEN uses 0.01, absolute).
        selection_eps_mode (`str`, defaults to `"absolute"`):
            `"absolute"` (RAGEN's): the margin is `selection_eps` in score units, so a batch whose scores sum to at
            most `selection_eps / top_p` keeps nothing. `"relative"`: the margin is `selection_eps * sum(candidate
            scores)`, the same rule on every reward scale (multiplying the scores by a power of two changes nothing);
            `selection_eps` must then be below 1. The trainer configs default to `"relative"`.
        largest (`bool`, defaults to `True`):
            `False` keeps the smallest scores: the paper's "keep smallest" ablation.
        percentile_range (`tuple[float, float]`, defaults to `(0.0, 1.0)`):
            For `"percentile_range"`, `(low, high)` with `0 <= low < high <= 1`: rank the N candidates (highest
            first, or lowest with `largest=False`) and keep ranks `round(low * N)` up to `round(high * N)`, at least
            one rank (Python's round, halves to even: with N = 2, `(0.75, 1.0)` starts at rank 2 and keeps nothing).
            Table 6's quartiles are `(0, 0.25)`, `(0.25, 0.5)`, `(0.5, 0.75)` and `(0.75, 1.0)`.

    Returns:
        `torch.Tensor` of shape `(P,)`, dtype bool, on the scores' device.
    """
    _validate_selection(strategy, top_p, top_k, min_p, top_p_mode, selection_eps, selection_eps_mode, percentile_range)
    scores = torch.as_tensor(scores)
    if scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(
            f"select_groups: scores must be a non-empty 1-D tensor (one per group), got {tuple(scores.shape)}"
        )
    if not torch.isfinite(scores).all():
        raise ValueError(
            "select_groups: scores contain NaN or inf; score groups with group_reward_scores, which ignores NaN rewards"
        )

    values = scores.detach().cpu().float()  # (P,) float32, RAGEN's precision
    candidates = torch.arange(values.numel())  # group indices, ascending
    if not include_zero:
        candidates = candidates[values.abs() > ZERO_SCORE_TOL]
    keep = torch.zeros(values.numel(), dtype=torch.bool)
    if candidates.numel():
        kept = _STRATEGY_FUNCTIONS[strategy](
            values[candidates],
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            top_p_mode=top_p_mode,
            selection_eps=selection_eps,
            selection_eps_mode=selection_eps_mode,
            num_groups=values.numel(),
            largest=largest,
            percentile_range=tuple(percentile_range),
        )
        keep[candidates[kept]] = True
    return keep.to(scores.device)


def std_over_mean(rewards: torch.Tensor, num_generations: int) -> float:
    """Std/Mean over the groups of the per-group reward std: the paper's Table 8 indicator of whether filtering helps.

    The population std of the P group stds divided by their mean (high: reward variance concentrated in a few
    prompts; near 0: spread evenly). NaN when every group has zero std.
    """
    std = group_reward_scores(rewards, num_generations, metric="variance").to(torch.float64).sqrt()  # (P,)
    mean_std = std.mean().item()
    return std.std(unbiased=False).item() / mean_std if mean_std > 0 else math.nan


def filter_stats(rewards: torch.Tensor, num_generations: int, keep: torch.Tensor) -> dict[str, float]:
    """Describe one filtering decision (the numbers logged under `ragen2/filter/...`).

    Args:
        rewards (`torch.Tensor` of shape `(P * G,)`): rewards in group order, as given to [`group_reward_scores`].
        num_generations (`int`): rollouts per group, G.
        keep (`torch.Tensor` of shape `(P,)`, bool): the kept groups.

    Returns:
        `dict` with `num_groups`, `kept_groups`, `kept_fraction` (of groups), `kept_variance_share` (kept share of
        the summed per-group reward variance; NaN when the batch has none), `std_over_mean` (Std/Mean of the
        per-group reward std over the batch, the paper's Table 8 diagnostic; NaN when every group has zero std),
        `zero_variance_groups`, and of those `zero_variance_at_max` (every rollout earned the batch's best reward)
        and `zero_variance_at_min` (every rollout earned the batch's worst reward).
    """
    variance = group_reward_scores(rewards, num_generations, metric="variance").to(torch.float64)
    keep = torch.as_tensor(keep, dtype=torch.bool).to(variance.device)
    if keep.shape != variance.shape:
        raise ValueError(
            f"filter_stats: keep must have shape {tuple(variance.shape)} (one per group), got {tuple(keep.shape)}"
        )
    grouped = _check_rewards(rewards, num_generations, "filter_stats").view(-1, num_generations)
    total_variance = variance.sum().item()
    zero = variance <= ZERO_SCORE_TOL
    finite = grouped[torch.isfinite(grouped)]
    if finite.numel():
        best, worst = finite.max(), finite.min()
        group_max = (
            torch.where(torch.isfinite(grouped), grouped, torch.full_like(grouped, -math.inf)).max(dim=1).values
        )
        group_min = torch.where(torch.isfinite(grouped), grouped, torch.full_like(grouped, math.inf)).min(dim=1).values
        at_max = zero & (group_min == best)
        at_min = zero & (group_max == worst) & ~at_max
    else:
        at_max = at_min = torch.zeros_like(zero)
    return {
        "num_groups": float(variance.numel()),
        "kept_groups": float(keep.sum().item()),
        "kept_fraction": keep.float().mean().item(),
        "kept_variance_share": variance[keep].sum().item() / total_variance if total_variance > 0 else math.nan,
        "std_over_mean": std_over_mean(rewards, num_generations),
        "zero_variance_groups": float(zero.sum().item()),
        "zero_variance_at_max": float(at_max.sum().item()),
        "zero_variance_at_min": float(at_min.sum().item()),
    }
