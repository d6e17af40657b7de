"""`FilterRule`: what the configured filter keeps of one generation batch, from its gathered raw rewards.

It combines, in this order, the keep-rate decision (warm-up, scheduled rho, auto switch: `keep_rate`), the group
scores (`group_metrics`), the selection rule and its exploration guard (`selection`, `keep_rate.select_under`) or
the rollout rule (`ablations.select_within_group`), and the control arm (`controls`). It holds the config and the
keep-rate schedule; the counters (`FilterState`) are the trainer's and are passed in, so every call is a pure
function of its arguments and every process computes the same selection from the same gathered rewards.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .ablations import select_within_group
from .arguments import WITHIN_GROUP
from .controls import apply_control
from .empty_steps import FilterState
from .group_metrics import group_scores
from .keep_rate import FilterDecision, GuardedSelection, select_under
from .selection import std_over_mean


class KeptRows(NamedTuple):
    """One filtering decision over the generation batch."""

    keep_groups: torch.Tensor  # (P,) bool: the groups trained on
    keep_rows: torch.Tensor  # (N_global,) bool: the rollouts trained on
    guard_added: int  # groups the exploration guard added to the rule's choice
    rule_kept_groups: int  # groups the rule kept (a control arm trains on others)


class FilterRule:
    """The `reward_variance_*` settings of a run, applied to raw rewards `(N_global,)` in group order.

    Args:
        args: the trainer config (`SNRFilterArguments` fields, and `seed` for the control arm's draw).
        num_generations (`int`): G, rollouts per prompt group.
    """

    def __init__(self, args, num_generations: int):
        self.args, self.num_generations = args, num_generations
        self.keep_rate = args.keep_rate_control()  # rho schedule, warm-up and auto switch

    def decide(self, rewards: torch.Tensor, step: int, state: FilterState) -> FilterDecision:
        """Warm-up, scheduled rho and auto switch at optimizer step `step`, from the state before this batch (no side
        effect: the trainer commits the switch's new state with `FilterState.record`)."""
        observed = std_over_mean(rewards.cpu(), self.num_generations) if self.keep_rate.auto else math.nan
        return self.keep_rate.decide(step, observed, state.auto_signal, state.auto_on)

    def select_groups(self, rewards: torch.Tensor, decision: FilterDecision, row_values: dict) -> GuardedSelection:
        """The rule's kept groups (P,) under `decision`, and how many of them the exploration guard added.
        `row_values` holds what a row ranking metric needs (`row_lengths`, `row_entropies`; `{}` otherwise)."""
        args = self.args
        return select_under(
            decision,
            group_scores(args.reward_variance_metric, self.num_generations, rewards=rewards, **row_values),
            strategy=args.reward_variance_filtering,
            min_kept_fraction=args.reward_variance_min_kept_fraction,
            include_zero=args.reward_variance_include_zero,
            largest=args.reward_variance_largest,
            top_k=args.reward_variance_top_k,
            min_p=args.reward_variance_min_p,
            top_p_mode=args.reward_variance_top_p_mode,
            selection_eps=args.reward_variance_selection_eps,
            selection_eps_mode=args.reward_variance_selection_eps_mode,
            percentile_range=(args.reward_variance_percentile_low, args.reward_variance_percentile_high),
        )

    def control(self, rule_keep: torch.Tensor, generation_index: int) -> torch.Tensor:
        """The groups (P,) the control arm keeps from the rule's choice; the rule's choice without one. The draw of
        `"random_matched"` is keyed by the seed and `generation_index` (batches filtered before this one)."""
        args = self.args
        return apply_control(
            rule_keep, args.reward_variance_control, seed=args.seed, generation_index=generation_index
        )

    def keep(
        self, rewards: torch.Tensor, decision: FilterDecision, *, generation_index: int, select=None, row_values=None
    ) -> KeptRows:
        """Everything kept of the batch: groups (P,), rows (N_global,), the guard's additions and the rule's count.
        `select(rewards, decision)` replaces `select_groups` (the trainer passes its own, which tests can record)."""
        G = self.num_generations
        if self.args.reward_variance_filtering == WITHIN_GROUP:
            every_group = torch.ones(rewards.numel() // G, dtype=torch.bool)
            P = every_group.numel()
            if not decision.active:  # warm-up: every rollout
                return KeptRows(every_group, torch.ones(rewards.numel(), dtype=torch.bool), 0, P)
            ratio = self.args.reward_variance_within_group_ratio
            return KeptRows(every_group, select_within_group(rewards.cpu(), G, ratio), 0, P)
        if select is None:
            rule_keep, guard_added = self.select_groups(rewards, decision, row_values or {})
        else:
            rule_keep, guard_added = select(rewards, decision)  # (P,)
        keep_groups = self.control(rule_keep, generation_index)
        return KeptRows(keep_groups, keep_groups.repeat_interleave(G), guard_added, int(rule_keep.sum()))
