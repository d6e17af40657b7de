"""Keep-rate control beyond the paper: an annealed rho, a switch driven by Table 8's diagnostic, and a floor.

The paper filters every step with one fixed rho. Three additions, each a pure function, decide what the SNR
filter of `trl_ragen2.filtering.selection` does at a generation step:

- **Schedule** ([`scheduled_top_p`]): rho moves from a start value to an end value, linearly or along a half
  cosine, after an optional warm-up in which the filter is off (every group kept).
- **Auto switch** ([`auto_switch`]): the filter is turned on or off from the Std/Mean over groups of the per-group
  reward std (the paper's Table 8 indicator), smoothed by an exponential moving average, with hysteresis.
- **Guard** ([`guard_min_kept`]): after the rule has chosen, groups are added in the rule's ranking until a
  minimum share of the batch is kept.

[`KeepRateControl.decide`] combines the schedule and the switch into one [`FilterDecision`] per generation, and
[`select_under`] applies it: the selection rule of `select_groups` with the rho in force, then the guard.

```python
control = KeepRateControl(top_p=1.0, top_p_end=0.9, schedule="linear", schedule_steps=100, warmup_steps=10)
decision = control.decide(step)                                   # active? rho in force?
keep, added = select_under(decision, scores, strategy="top_p", min_kept_fraction=0.25)
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .selection import ZERO_SCORE_TOL, select_groups


SCHEDULES = ("constant", "linear", "cosine")
AUTO = "auto"

# Thresholds of the auto switch on the smoothed Std/Mean of the per-group reward std. The paper's Table 8 has two
# data points: Sokoban at 1.16-1.29 gained 3-5 points from filtering, FrozenLake (GRPO) at 0.33 lost 5. It states no
# threshold; both values below lie strictly between those measurements, and the gap between them is the hysteresis.
AUTO_ON_ABOVE = 0.8
AUTO_OFF_BELOW = 0.5
AUTO_SMOOTHING = 0.5


def scheduled_top_p(
    step: int, *, start: float, end: float | None, schedule: str, schedule_steps: int, warmup_steps: int = 0
) -> float:
    """The rho in force at optimizer step `step` (the number of optimizer steps completed when the batch was made).

    The schedule starts when the warm-up ends: at `step = warmup_steps` rho is `start`, and `schedule_steps` steps
    later it is `end`, then stays there. `"linear"` interpolates; `"cosine"` follows
    `end + (start - end) * (1 + cos(pi * t)) / 2` with `t` the elapsed fraction. `"constant"` is always `start`.
    Steps inside the warm-up get `start` (the filter is off then; see [`KeepRateControl.decide`]).

    >>> scheduled_top_p(3, start=1.0, end=0.6, schedule="linear", schedule_steps=4, warmup_steps=1)
    0.8
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"scheduled_top_p: schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "constant":
        return start
    if end is None or schedule_steps < 1:
        raise ValueError(
            f"scheduled_top_p: schedule={schedule!r} needs an end value and schedule_steps >= 1, got end={end!r}, "
            f"schedule_steps={schedule_steps!r}"
        )
    progress = min(max(step - warmup_steps, 0) / schedule_steps, 1.0)
    if schedule == "linear":
        return start + (end - start) * progress
    return end + (start - end) * (1.0 + math.cos(math.pi * progress)) / 2.0


def auto_switch(
    observed: float,
    signal: float | None,
    on: bool,
    *,
    on_above: float = AUTO_ON_ABOVE,
    off_below: float = AUTO_OFF_BELOW,
    smoothing: float = AUTO_SMOOTHING,
) -> tuple[float | None, bool]:
    """One update of the auto switch: `(signal, on)` after observing `observed`, the batch's Std/Mean.

    `signal` is the exponential moving average of the observations (`smoothing` is its decay: the new signal is
    `smoothing * signal + (1 - smoothing) * observed`; the first observation sets it). A filter that is on turns off
    when the signal falls below `off_below`; one that is off turns on when it reaches `on_above`; in between the
    state is kept (hysteresis). A NaN observation (no group has reward variance) changes nothing.
    """
    if math.isnan(observed):
        return signal, on
    signal = observed if signal is None else smoothing * signal + (1.0 - smoothing) * observed
    if on and signal < off_below:
        on = False
    elif not on and signal >= on_above:
        on = True
    return signal, on


class GuardedSelection(NamedTuple):
    """What [`select_under`] returns: the kept groups `(P,)`, and how many of them the guard added."""

    keep: torch.Tensor
    guard_added: int


@dataclass(frozen=True)
class FilterDecision:
    """What the filter does at one generation step."""

    active: bool  # whether the selection rule runs; False keeps every group (warm-up, or the auto switch off)
    top_p: float  # rho the rule uses (1.0 when inactive: every group is kept)
    auto_signal: float | None = None  # smoothed Std/Mean after this step's observation (auto mode)
    auto_on: bool | None = None  # the auto switch after this step's observation (auto mode)


@dataclass(frozen=True)
class KeepRateControl:
    """The schedule, warm-up and auto switch of one run (built from the config by `keep_rate_control()`)."""

    top_p: float = 0.9
    top_p_end: float | None = None
    schedule: str = "constant"
    schedule_steps: int = 0
    warmup_steps: int = 0
    auto: bool = False
    auto_on_above: float = AUTO_ON_ABOVE
    auto_off_below: float = AUTO_OFF_BELOW
    auto_smoothing: float = AUTO_SMOOTHING

    def decide(
        self, step: int, std_over_mean: float = math.nan, auto_signal: float | None = None, auto_on: bool = True
    ) -> FilterDecision:
        """The decision for a batch made after `step` optimizer steps; `std_over_mean` is that batch's Table 8
        statistic and `auto_signal` / `auto_on` the switch's state before it (auto mode only)."""
        active = step >= self.warmup_steps
        if self.auto:
            auto_signal, auto_on = auto_switch(
                std_over_mean,
                auto_signal,
                auto_on,
                on_above=self.auto_on_above,
                off_below=self.auto_off_below,
                smoothing=self.auto_smoothing,
            )
            active = active and auto_on
        else:
            auto_signal = auto_on = None
        top_p = (
            scheduled_top_p(
                step,
                start=self.top_p,
                end=self.top_p_end,
                schedule=self.schedule,
                schedule_steps=self.schedule_steps,
                warmup_steps=self.warmup_steps,
            )
            if active
            else 1.0
        )
        return FilterDecision(active=active, top_p=top_p, auto_signal=auto_signal, auto_on=auto_on)


def min_kept_groups(min_fraction: float, num_groups: int) -> int:
    """`ceil(min_fraction * num_groups)`, immune to float error in the product (0.3 * 10 is 3 groups, not 4)."""
    return math.ceil(min_fraction * num_groups - 1e-9)


def guard_min_kept(
    scores: torch.Tensor,
    keep: torch.Tensor,
    *,
    min_fraction: float,
    include_zero: bool = False,
    largest: bool = True,
) -> torch.Tensor:
    """Add groups to a selection until it holds at least `ceil(min_fraction * P)` of the P groups.

    Groups not yet kept are added in the selection's own ranking (descending score, or ascending with
    `largest=False`; equal scores go to the lower group index first), in float32 as `select_groups` compares them.
    Only candidates are added: zero-variance groups (|score| <= 1e-10) only with `include_zero`, and then after every
    group with variance when `largest` (they carry no task gradient, only the KL and entropy terms'). When the
    candidates run out the selection stays smaller; a batch without a candidate stays empty.

    Args:
        scores (`torch.Tensor` of shape `(P,)`): the scores the selection ranked.
        keep (`torch.Tensor` of shape `(P,)`, bool): the selection.
        min_fraction (`float`): the share of the P groups to keep at least, in [0, 1].

    Returns:
        `torch.Tensor` of shape `(P,)`, bool, on `keep`'s device: a superset of `keep`.
    """
    if not (isinstance(min_fraction, int | float) and 0.0 <= min_fraction <= 1.0):
        raise ValueError(f"guard_min_kept: min_fraction must be in [0, 1], got {min_fraction!r}")
    values = torch.as_tensor(scores).detach().cpu().float()  # (P,) float32, as select_groups ranks them
    guarded = torch.as_tensor(keep, dtype=torch.bool).detach().cpu().clone()
    if guarded.shape != values.shape:
        raise ValueError(f"guard_min_kept: keep must have shape {tuple(values.shape)}, got {tuple(guarded.shape)}")
    missing = min_kept_groups(min_fraction, values.numel()) - int(guarded.sum())
    if missing > 0:
        order = torch.sort(values, descending=largest, stable=True).indices  # (P,) group indices, best first
        candidate = ~guarded if include_zero else ~guarded & (values.abs() > ZERO_SCORE_TOL)
        added = order[candidate[order]][:missing]
        guarded[added] = True
    return guarded.to(torch.as_tensor(keep).device)


def select_under(
    decision: FilterDecision,
    scores: torch.Tensor,
    *,
    strategy: str = "top_p",
    min_kept_fraction: float = 0.0,
    include_zero: bool = False,
    largest: bool = True,
    **selection,
) -> GuardedSelection:
    """The kept groups (P,) under `decision`, and how many of them the guard added.

    An inactive decision keeps every group (zero-variance ones too), as no filtering would. Otherwise
    `select_groups(scores, strategy=..., top_p=decision.top_p, ...)` chooses (`"auto"` applies `"top_p"`), and
    [`guard_min_kept`] tops the choice up to `min_kept_fraction` of the groups. `selection` holds the other
    arguments of `select_groups` (`top_k`, `min_p`, `top_p_mode`, `selection_eps`, `selection_eps_mode`).
    """
    scores = torch.as_tensor(scores)
    if not decision.active:
        return GuardedSelection(torch.ones(scores.numel(), dtype=torch.bool, device=scores.device), 0)
    keep = select_groups(
        scores,
        strategy="top_p" if strategy == AUTO else strategy,
        top_p=decision.top_p,
        include_zero=include_zero,
        largest=largest,
        **selection,
    )
    if not min_kept_fraction:
        return GuardedSelection(keep, 0)
    guarded = guard_min_kept(scores, keep, min_fraction=min_kept_fraction, include_zero=include_zero, largest=largest)
    return GuardedSelection(guarded, int(guarded.sum() - keep.sum()))
