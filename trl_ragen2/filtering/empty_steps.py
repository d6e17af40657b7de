"""Counters of the SNR filter, and the callback that turns optimizer steps without a kept row into no-ops.

Kept rows fill a generation's optimizer steps in order (`trl_ragen2.filtering.micro_steps`), so a step can be left with
no kept row on any process. Its `optimizer.step()` is skipped; the learning-rate schedule still advances, since it
counts optimizer steps of training, not updates. After `reward_variance_empty_patience` consecutive generations in
which the filter kept nothing, training stops with a message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from transformers import TrainerCallback

from ..runs.keys import FILTER_SKIPPED_UPDATES
from .reward_checks import empty_patience_message


logger = logging.getLogger("trl_ragen2.grpo.grpo_trainer")

FILTER_STATE_FILE = "ragen2_filter_state.json"


@dataclass
class FilterState:
    """Counters of the SNR filter, saved with every checkpoint."""

    empty_steps: int = 0  # generation steps in which no group was kept, in total
    consecutive_empty_steps: int = 0
    filtered_steps: int = 0  # generation steps the filter has seen
    auto_signal: float | None = None  # reward_variance_filtering="auto": the smoothed Std/Mean, None before any
    auto_on: bool = True  # the auto switch; it starts on, as the paper filters from the first step

    def record(self, empty: bool, decision) -> None:
        """Count one filtered generation batch, and keep the auto switch's new state (a `FilterDecision`)."""
        if decision.auto_on is not None:
            self.auto_signal, self.auto_on = decision.auto_signal, decision.auto_on
        self.filtered_steps += 1
        self.empty_steps += int(empty)
        self.consecutive_empty_steps = self.consecutive_empty_steps + 1 if empty else 0


class EmptyStepGuard(TrainerCallback):
    """Makes an optimizer step without a kept row a true no-op, and stops training after too many empty steps.

    An optimizer step none of whose micro-steps holds a kept row (on any process) would still let the optimizer
    move every weight (weight decay, moment updates). Its `optimizer.step()` call is skipped: no parameter,
    optimizer-state or gradient-scaler change. The learning-rate schedule still advances (it counts optimizer
    steps of training, not updates).

    The trainer reports each micro-step ([`on_micro_step`]); the guard keeps whether the optimizer step under way
    has trained on a kept row (`step_has_kept_rows`, which `SNRFilteredPPOTrainer` reads for its critic) and
    starts over at each optimizer step. It reads the trainer's public `args`, `optimizer`, `accelerator`,
    `filter_state` and `filtered_generation`, and appends to TRL's metrics.
    """

    def __init__(self, trainer):
        self.trainer = trainer
        self.step_has_kept_rows = False  # whether the optimizer step under way has trained on a kept row yet
        self.stop_reported = False
        self.skipped_optimizer = None
        self.saved_step = None
        self.skipped_engine_optimizer = None
        self.saved_engine_step = None

    def on_micro_step(self, has_kept_rows: bool) -> None:
        """Called by the trainer as each training micro-step starts, before its forward."""
        self.step_has_kept_rows |= has_kept_rows
        self.before_boundary_backward()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        trainer = self.trainer
        if trainer.args.reward_variance_filtering is not None and not self.step_has_kept_rows:
            optimizer = trainer.optimizer
            # Shadow step() for this one call. The LR scheduler may have wrapped it in an instance attribute
            # already: keep whatever is there to put it back.
            self.saved_step = optimizer.__dict__.get("step")
            optimizer.step = _skipped_step
            self.skipped_optimizer = optimizer
            trainer._metrics["train"][FILTER_SKIPPED_UPDATES].append(1.0)
        elif trainer.args.reward_variance_filtering is not None:
            trainer._metrics["train"][FILTER_SKIPPED_UPDATES].append(0.0)

    def before_boundary_backward(self) -> None:
        """Under DeepSpeed the optimizer steps inside the last micro-step's backward: skip it there.

        Only the engine's inner optimizer step is skipped; the engine still zeroes the gradients, advances its
        counters and a schedule it manages, as on any step.
        """
        trainer = self.trainer
        if not (trainer.is_deepspeed_enabled and trainer.accelerator.sync_gradients):
            return
        if trainer.args.reward_variance_filtering is None or self.step_has_kept_rows:
            return
        inner = trainer.accelerator.deepspeed_engine_wrapped.engine.optimizer
        self.saved_engine_step = inner.__dict__.get("step")
        inner.step = _skipped_step
        self.skipped_engine_optimizer = inner

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.skipped_engine_optimizer is not None:
            if self.saved_engine_step is None:
                del self.skipped_engine_optimizer.step
            else:
                self.skipped_engine_optimizer.step = self.saved_engine_step
            self.skipped_engine_optimizer = self.saved_engine_step = None
        if self.skipped_optimizer is not None:
            if self.saved_step is None:
                del self.skipped_optimizer.step  # the class's step() again
            else:
                self.skipped_optimizer.step = self.saved_step
            self.skipped_optimizer = self.saved_step = None
        self.step_has_kept_rows = False  # the next optimizer step starts

    def on_step_end(self, args, state, control, **kwargs):
        patience = self.trainer.args.reward_variance_empty_patience
        consecutive = self.trainer.filter_state.consecutive_empty_steps
        if patience and consecutive >= patience:
            control.should_training_stop = True
            if not self.stop_reported:
                self.stop_reported = True
                generation = self.trainer.filtered_generation
                cause = generation.empty_cause if generation is not None else None
                logger.warning(empty_patience_message(consecutive, state.global_step, cause))
        return control


def _skipped_step(*args, **kwargs):
    return None
