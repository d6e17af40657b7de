"""The `ragen2/filter/...` values of one filtering decision, as a dict the trainer appends to TRL's metrics.

Pure: built from the batch's raw rewards, what was kept, the filter's counters and the keep-rate decision. The keys
come from `trl_ragen2.runs.keys`; `docs/metrics.md` describes each.
"""

from __future__ import annotations

import math

import torch

from ..runs import keys
from .arguments import WITHIN_GROUP
from .empty_steps import FilterState
from .keep_rate import AUTO, FilterDecision
from .selection import filter_stats


def filter_step_metrics(
    rewards: torch.Tensor,
    num_generations: int,
    keep_groups: torch.Tensor,
    keep_rows: torch.Tensor,
    *,
    empty: bool,
    loss_scale: float,
    state: FilterState,
    decision: FilterDecision,
    guard_added: int,
    rule_kept_groups: int,
    args,
) -> dict[str, float]:
    """The values logged for one generation batch.

    Args:
        rewards (`torch.Tensor` of shape `(N_global,)`): raw rewards in group order.
        num_generations (`int`): G.
        keep_groups (`(P,)` bool), keep_rows (`(N_global,)` bool): what the filter (or its control arm) kept.
        empty (`bool`): no row was kept. loss_scale (`float`): the factor on the loss.
        state (`FilterState`): the counters after this batch.
        decision (`FilterDecision`): the keep-rate decision in force. guard_added (`int`): groups the guard added.
        rule_kept_groups (`int`): groups the rule kept (differs from `keep_groups` under a control arm).
        args: the trainer config (its `reward_variance_*` fields say which optional keys apply).
    """
    values = {
        keys.filter_key(key): value
        for key, value in filter_stats(rewards.cpu(), num_generations, keep_groups.cpu()).items()
    }
    values[keys.FILTER_KEPT_ROWS] = float(keep_rows.sum().item())
    values[keys.FILTER_EMPTY] = float(empty)
    values[keys.FILTER_EMPTY_STEPS] = float(state.empty_steps)
    values[keys.FILTER_CONSECUTIVE_EMPTY_STEPS] = float(state.consecutive_empty_steps)
    values[keys.FILTER_LOSS_SCALE] = loss_scale
    values[keys.FILTER_ACTIVE] = float(decision.active)
    rule = args.reward_variance_filtering
    if rule in ("top_p", AUTO):
        values[keys.FILTER_TOP_P] = decision.top_p
    if decision.auto_on is not None:
        values[keys.FILTER_AUTO_ON] = float(decision.auto_on)
        values[keys.FILTER_AUTO_SIGNAL] = math.nan if decision.auto_signal is None else decision.auto_signal
    if args.reward_variance_min_kept_fraction:
        values[keys.FILTER_GUARD_ADDED] = float(guard_added)
    if rule in ("percentile_range", WITHIN_GROUP):  # the ablation rules: the kept share of the rollouts
        values[keys.FILTER_KEPT_ROLLOUT_FRACTION] = keep_rows.float().mean().item()
        kept = int(keep_groups.sum())
        values[keys.FILTER_ROLLOUTS_PER_GROUP] = keep_rows.sum().item() / kept if kept else 0.0
    if args.reward_variance_control is not None:
        values[keys.FILTER_RULE_KEPT_GROUPS] = float(rule_kept_groups)
    return values
