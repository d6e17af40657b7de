"""Checks on the rewards a trainer receives, and the errors that name what went wrong. Pure; no trainer imports.

- [`reward_function_error`]: which reward function an exception came from (found on the traceback), wrapped as a
  [`RewardFunctionError`] that names it and keeps the original as its cause;
- [`check_finite_rewards`]: `inf` rewards are rejected with the function, the rollout and the value (NaN is TRL's
  "not scored" and stays allowed);
- [`empty_step_cause`] and [`empty_patience_message`]: why the SNR filter kept no group (NaN or inf rewards, every
  group without variance, or variance below the selection margin, each with its numbers and its fix) and the
  message that stops training after too many such steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from .keep_rate import AUTO
from .selection import ZERO_SCORE_TOL, group_reward_scores, linear_threshold


MAX_CAUSE_CHARS = 500  # the original exception's message is cut here in the wrapped one


class RewardFunctionError(RuntimeError):
    """A reward function raised; the message names it, `__cause__` is the original exception."""


def _code_objects(func: Any) -> set:
    """The code objects a call of `func` runs first: a function, a partial's function, a bound method, a callable
    object's `__call__` or a reward model's `forward`."""
    candidates = [
        func,
        getattr(func, "func", None),
        getattr(func, "__func__", None),
        getattr(func, "__wrapped__", None),
    ]
    candidates += [type(func).__call__, getattr(type(func), "forward", None)]
    codes = set()
    for candidate in candidates:
        candidate = getattr(candidate, "__func__", candidate)
        code = getattr(candidate, "__code__", None)
        if code is not None:
            codes.add(code)
    return codes


def reward_function_error(
    error: BaseException, reward_funcs: Sequence[Any], names: Sequence[str]
) -> RewardFunctionError | None:
    """A [`RewardFunctionError`] naming the reward function whose code raised `error`, or None when no reward
    function is on the traceback (the error came from elsewhere and should propagate unchanged)."""
    owners = {}
    for index, func in enumerate(reward_funcs):
        for code in _code_objects(func):
            owners.setdefault(code, index)
    traceback = error.__traceback__
    while traceback is not None:  # outermost first: the frame the trainer called
        index = owners.get(traceback.tb_frame.f_code)
        if index is not None:
            detail = str(error)
            detail = detail if len(detail) <= MAX_CAUSE_CHARS else detail[: MAX_CAUSE_CHARS - 3] + "..."
            return RewardFunctionError(
                f"reward function {names[index]!r} (reward_funcs[{index}]) raised {type(error).__name__}: {detail}. "
                "Fix the function, or have it return None for a completion it cannot score (TRL then leaves that "
                "completion to the other reward functions)."
            )
        traceback = traceback.tb_next
    return None


def check_finite_rewards(rewards_per_func: torch.Tensor, names: Sequence[str]) -> None:
    """Raise a `ValueError` if any reward is `inf` or `-inf`, naming the first: its function, rollout and value.

    Args:
        rewards_per_func (`torch.Tensor` of shape `(N, F)`): one column per reward function, NaN where a function
            did not score a rollout (allowed).
        names: The reward functions' names, one per column.
    """
    infinite = torch.isinf(rewards_per_func)
    if not bool(infinite.any()):
        return
    row, column = (int(i) for i in infinite.nonzero()[0])
    value = float(rewards_per_func[row, column])
    raise ValueError(
        f"reward function {names[column]!r} (reward_funcs[{column}]) returned {value} for rollout {row} of the "
        f"generation batch ({int(infinite.sum())} infinite rewards in all); rewards must be finite numbers: clip or "
        "rescale the value, or return None for a completion that cannot be scored"
    )


class EmptyStepCause(NamedTuple):
    """Why a filter step kept no group: `kind` is `"nan"`, `"zero_variance"`, `"below_margin"` or `"selection"`,
    `text` names the cause with the batch's numbers and `fix` says what to change."""

    kind: str
    text: str
    fix: str


NAN_FIX = (
    "Make at least one reward function return a finite number (not None, NaN or inf) for every completion; check "
    "that the dataset columns it reads reach it"
)
PARTIAL_NAN_FIX = (
    "Check why the reward functions leave some completions without a finite reward (None, NaN or inf): those "
    "rollouts do not count towards their group's variance"
)
ZERO_VARIANCE_FIX = (
    "To continue, give the filter variance to work with: raise num_generations, sample at a higher temperature, "
    "use a denser reward, set reward_variance_include_zero=True with reward_variance_top_p_mode='softmax'"
)


def _unscored(rewards: torch.Tensor) -> str:
    """'3 of 16 rewards were NaN', '3 of 16 rewards were NaN and 1 was inf', or '' when every reward is finite."""
    nan, inf = int(torch.isnan(rewards).sum()), int(torch.isinf(rewards).sum())
    if not (nan or inf):
        return ""
    first, count = ("NaN", nan) if nan else ("inf", inf)
    text = f"{count} of {rewards.numel()} rewards {'was' if count == 1 else 'were'} {first}"
    if nan and inf:
        text += f" and {inf} {'was' if inf == 1 else 'were'} inf"
    return text


def empty_step_cause(
    rewards: torch.Tensor,
    num_generations: int,
    *,
    metric: str = "variance",
    top_p: float | None = None,
    top_p_mode: str = "linear",
    selection_eps: float = 0.0,
    selection_eps_mode: str = "absolute",
    include_zero: bool = False,
    largest: bool = True,
) -> EmptyStepCause:
    """Why a filter step kept no group, from the rollouts' raw rewards `(N,)` in group order and the selection.

    Args:
        rewards (`torch.Tensor` of shape `(P * G,)`): the raw rewards the filter saw (NaN: no function scored it).
        num_generations (`int`): rollouts per group, G.
        metric, top_p_mode, selection_eps, selection_eps_mode, include_zero, largest: the selection's settings, as
            passed to [`~trl_ragen2.filtering.selection.select_groups`].
        top_p (`float` or `None`): the rho in force when the rule was `"top_p"` (or `"auto"`, on); `None` for the
            other rules, which keep at least one group whenever one has variance.

    Returns:
        [`EmptyStepCause`], in this order of precedence: every reward NaN or inf, or no group with two finite
        rewards (`"nan"`); every group with zero variance, the non-finite rewards named when there are some
        (`"zero_variance"`); variance, but a linear top-p threshold `rho * sum - margin <= 0` (`"below_margin"`,
        with the sum, the margin and the settings to change); otherwise the rule itself (`"selection"`).
    """
    rewards = torch.as_tensor(rewards).to(torch.float64)
    finite = torch.isfinite(rewards)
    unscored = _unscored(rewards)
    if not bool(finite.any()):
        if bool(torch.isnan(rewards).all()):
            text = (
                f"every reward of the batch was NaN ({rewards.numel()} rollouts): no reward function scored any "
                "completion (each returned None or NaN)"
            )
        else:
            text = f"no reward of the batch was finite ({unscored})"
        return EmptyStepCause("nan", text, NAN_FIX)
    variance = group_reward_scores(rewards, num_generations, metric="variance").to(torch.float64)  # (P,)
    num_groups = variance.numel()
    scored_per_group = finite.view(-1, num_generations).sum(dim=1)
    if not bool((scored_per_group >= 2).any()):
        return EmptyStepCause(
            "nan",
            f"{unscored}, so no group had two scored rollouts to compare (a group's variance needs two)",
            NAN_FIX,
        )
    prefix = f"{unscored} (ignored within their groups); besides them, " if unscored else ""
    if bool((variance <= ZERO_SCORE_TOL).all()):
        values = rewards[finite]
        low, high = values.min().item(), values.max().item()
        seen = f"every reward was {low:g}" if low == high else f"rewards from {low:g} to {high:g}"
        text = (
            f"{prefix}every group has zero reward variance: in each of the {num_groups} groups the scored rollouts "
            f"earned the same reward ({seen}), so there is no learning signal"
        )
        largest_variance = variance.max().item()
        if largest_variance > 0:
            text += (
                f" (the largest group variance, {largest_variance:.3g}, is within the zero tolerance "
                f"{ZERO_SCORE_TOL:g}: rescale the rewards to see it)"
            )
        fix = ZERO_VARIANCE_FIX if not unscored else f"{PARTIAL_NAN_FIX}. {ZERO_VARIANCE_FIX}"
        return EmptyStepCause("zero_variance", text, fix)

    scores = group_reward_scores(rewards, num_generations, metric=metric)  # float32, as select_groups sees them
    candidates = scores if include_zero else scores[scores.abs() > ZERO_SCORE_TOL]
    total = candidates.sum()
    with_variance = int((variance > ZERO_SCORE_TOL).sum())
    if top_p is not None and top_p < 1.0 and top_p_mode == "linear":
        margin, threshold = linear_threshold(total, top_p, selection_eps, selection_eps_mode)
        if threshold.item() <= 0:
            sum_text, margin_value, threshold_value = f"{total.item():.3g}", margin.item(), threshold.item()
            if selection_eps_mode == "absolute":
                margin_text = (
                    f"reward_variance_selection_eps={selection_eps:g} in score units, "
                    "reward_variance_selection_eps_mode='absolute'"
                )
                fix = (
                    "Set reward_variance_selection_eps_mode='relative' (the margin becomes a share of the summed "
                    f"scores, so any reward scale trains), lower reward_variance_selection_eps below {top_p:g} * "
                    f"{sum_text} = {top_p * total.item():.3g}, or scale the rewards up"
                )
            else:
                margin_text = (
                    f"reward_variance_selection_eps={selection_eps:g} of the summed scores, "
                    "reward_variance_selection_eps_mode='relative'"
                )
                fix = f"Lower reward_variance_selection_eps below reward_variance_top_p={top_p:g}"
            return EmptyStepCause(
                "below_margin",
                f"{prefix}{with_variance} of {num_groups} groups have reward variance, but their summed reward "
                f"{metric} {sum_text} is below the selection margin: the linear top-p threshold rho * sum - margin = "
                f"{top_p:g} * {sum_text} - {margin_value:.3g} = {threshold_value:.3g} is <= 0, and then the "
                f"linear rule keeps no group (margin: {margin_text})",
                fix,
            )
        if not largest and include_zero and bool((scores <= 0).any()):
            return EmptyStepCause(
                "selection",
                f"{prefix}the keep-smallest walk (reward_variance_largest=False) met a zero-variance group first, "
                "which reward_variance_include_zero=True makes a candidate, and the linear rule stops there",
                "Set reward_variance_include_zero=False or reward_variance_top_p_mode='softmax'",
            )
    return EmptyStepCause(
        "selection",
        f"{prefix}{with_variance} of {num_groups} groups have reward variance (summed {metric} {total.item():.3g}), "
        "but the selection rule kept none of them",
        "Check the reward_variance_* settings against the selection rules in docs/filtering.md",
    )


def empty_patience_message(consecutive: int, step: int, cause: EmptyStepCause | None) -> str:
    """The message that stops training after `consecutive` empty filter steps, the last one for `cause`."""
    if cause is None:
        cause = EmptyStepCause("selection", "the selection rule kept no group", ZERO_VARIANCE_FIX)
    return (
        f"SNR filter kept no prompt group for {consecutive} consecutive steps: {cause.text}. Training stops at step "
        f"{step}. {cause.fix}, or set reward_variance_empty_patience=0 to never stop."
    )


def filter_empty_cause(args, rewards: torch.Tensor, num_generations: int, decision) -> EmptyStepCause:
    """Why a generation's selection kept no group, for the message that stops training: from the trainer config's
    `reward_variance_*` fields, the batch's raw rewards `(N_global,)` and the keep-rate decision in force."""
    if args.reward_variance_metric not in ("variance", "std"):
        return EmptyStepCause(
            "selection",
            f"no group's {args.reward_variance_metric} score was selected by "
            f"reward_variance_filtering={args.reward_variance_filtering!r} (zero scores are candidates only "
            f"with reward_variance_include_zero=True; it is {args.reward_variance_include_zero})",
            "Check the reward_variance_* settings against the selection rules in docs/filtering.md",
        )
    return empty_step_cause(
        rewards,
        num_generations,
        metric=args.reward_variance_metric,
        top_p=decision.top_p if args.reward_variance_filtering in ("top_p", AUTO) else None,
        top_p_mode=args.reward_variance_top_p_mode,
        selection_eps=args.reward_variance_selection_eps,
        selection_eps_mode=args.reward_variance_selection_eps_mode,
        include_zero=args.reward_variance_include_zero,
        largest=args.reward_variance_largest,
    )
