"""One generation batch's trip through the SNR filter: the two objects the trainer's overrides hand on.

TRL makes a generation batch in `GRPOTrainer._generate_and_score_completions`, which calls `_generate`, the scoring
passes (`_get_per_token_logps_and_entropies`) and `_calculate_rewards` in turn; the micro-steps then train on it
through `_prepare_inputs` and `_compute_loss`. `SNRFilteredGRPOTrainer` overrides each of them, and what one
override learns and a later one needs goes through two objects, each made in one place and kept by the trainer
until the next one replaces it:

- [`ScoredGeneration`]: one batch while TRL makes and scores it, in training and in evaluation.
- [`FilteredGeneration`]: what the filter kept of one training batch, and how the kept rows train.

Their docstrings say who writes and who reads each field. Nothing outside the trainer writes either; the
`RagenRollout` and the `EmptyStepGuard` read them through the trainer's read-only properties `generation_rows` and
`filtered_generation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .micro_steps import MicroStep
from .reward_checks import EmptyStepCause


def weighted_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each rollout's raw reward `(N,)`: the weighted sum of its reward functions `(N, F)`, before any normalisation.

    A function that did not score a rollout (NaN) counts as 0 in the sum; a rollout no function scored is NaN.
    """
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


@dataclass
class ScoredGeneration:
    """One generation batch while TRL makes and scores it (training or evaluation), before any filtering.

    Made by `SNRFilteredGRPOTrainer._generate_and_score_completions` from the batch's dataset rows, before TRL's
    generation. Then, in TRL's order:

    - `_generate` sets `early_keep` when the rollout returned the rewards (every reward function names a
      `rollout_field`), in training with filtering on;
    - `_get_per_token_logps_and_entropies` reads it in TRL's scoring passes (old, reference, importance-sampling
      log-probs) and scores the kept rows only, counting the others in `scoring_rows_skipped`;
    - `_calculate_rewards` sets `rewards_per_func` and `scoring_passes_done`: the forwards after it (the loss, the
      PPO trainer's KL pass) score every row they are given;
    - the filter (`_filter_batch`), the MI diagnostics, the gradient report and `SNRFilteredPPOTrainer` read the
      raw rewards ([`raw_rewards`]); `_filter_batch` checks its selection against `early_keep`.

    `RagenRollout` reads `rows` through the trainer's `generation_rows`, to know each prompt's environment and seed.
    """

    rows: list[dict[str, Any]]  # this process's dataset rows of the batch
    early_keep: torch.Tensor | None = None  # (B,) this process's kept rows, known before TRL's scoring passes
    scoring_passes_done: bool = False
    scoring_rows_skipped: int = 0  # rows this process's scoring passes left out (early_keep False)
    rewards_per_func: torch.Tensor | None = None  # (N_global, F), the same on every process; NaN: not scored
    # What a row ranking metric (`"length"`, `"entropy"`, ...) ranks by, gathered, (N_global,) each; set by the filter
    row_values: dict[str, torch.Tensor] = field(default_factory=dict)

    def scoring_keep(self) -> torch.Tensor | None:
        """The rows TRL's scoring passes score, while they run; `None` (every row) otherwise."""
        return None if self.scoring_passes_done else self.early_keep

    def raw_rewards(self, weights: torch.Tensor) -> torch.Tensor:
        """The raw reward of every rollout of the batch, `(N_global,)`, from the gathered `rewards_per_func`."""
        return weighted_rewards(self.rewards_per_func, weights)


@dataclass
class FilteredGeneration:
    """What the SNR filter kept of one training generation batch, and how the kept rows are laid out.

    Made by `SNRFilteredGRPOTrainer._filter_batch`, once per training generation (evaluation is never filtered,
    so an evaluation between two micro-steps leaves it in place). Read by:

    - `_prepare_inputs`: right after the generation, lays `batch` out over the generation's micro-steps (sets
      `micro_steps` and drops `batch`); at every micro-step, hands out its `MicroStep`;
    - `_compute_loss`: `loss_scale`;
    - `EmptyStepGuard.on_step_end`, through the trainer's `filtered_generation`: `empty_cause`, for the message
      that stops training;
    - `SNRFilteredPPOTrainer`: `local_kept_rows` (a process that kept nothing trains on placeholders), and a refill's
      `pool_inputs`.
    """

    keep_groups: torch.Tensor  # (P,) bool: the kept prompt groups of the whole batch, the same on every process
    local_kept_rows: int  # rows this process kept
    empty: bool  # no group kept, on any process
    empty_cause: EmptyStepCause | None  # why, when empty
    loss_scale: float  # the factor of `reward_variance_loss_scaling` on every micro-step's loss
    batch: dict | None  # the kept rows (a placeholder row when this process kept none), until laid out
    micro_steps: list[MicroStep] = field(default_factory=list)  # the generation's micro-steps, once laid out
    keep_rows: torch.Tensor | None = None  # (N_global,) bool: the kept rollouts of the whole batch
    # A refill's dataset rows of every round and process, in pool order (the PPO trainer's turn rewards read them);
    # None without refill, or when no trainer tagged its rows (`ROW_INDEX_KEY`)
    pool_inputs: list[dict[str, Any]] | None = None
    rounds: int = 1  # generation rounds the filter chose from (more than 1 with refill)
