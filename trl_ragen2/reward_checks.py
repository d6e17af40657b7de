"""Checks on the rewards a trainer receives, and the errors that name what went wrong. Pure; no trainer imports.

- [`reward_function_error`]: which reward function an exception came from (found on the traceback), wrapped as a
  [`RewardFunctionError`] that names it and keeps the original as its cause;
- [`check_finite_rewards`]: `inf` rewards are rejected with the function, the rollout and the value (NaN is TRL's
  "not scored" and stays allowed);
- [`empty_step_cause`] and [`empty_patience_message`]: why the SNR filter kept no group (NaN rewards are named
  as such, not as equal rewards) and the message that stops training after too many such steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


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


def empty_step_cause(rewards: torch.Tensor) -> str:
    """Why a filter step kept no group, from the rollouts' raw rewards `(N,)` (NaN: no function scored it)."""
    scored = torch.isfinite(rewards)
    total, missing = rewards.numel(), int((~scored).sum())
    if missing == total:
        return (
            f"every reward of the batch was NaN ({total} rollouts): no reward function scored any completion "
            "(each returned None or NaN)"
        )
    if missing:
        return f"{missing} of {total} rewards were NaN and every group's scored rollouts earned the same reward"
    return "every group's rollouts earned the same reward"


def empty_patience_message(consecutive: int, step: int, cause: str | None) -> str:
    """The message that stops training after `consecutive` empty filter steps, the last one for `cause`."""
    cause = cause or "every group's rollouts earned the same reward"
    if cause.startswith("every reward of the batch was NaN"):
        fix = (
            "Make at least one reward function return a number (not None or NaN) for every completion; check "
            "that the dataset columns it reads reach it"
        )
    else:
        fix = (
            "To continue, give the filter variance to work with: raise num_generations, sample at a higher "
            "temperature, use a denser reward, set reward_variance_include_zero=True with "
            "reward_variance_top_p_mode='softmax'"
        )
    return (
        f"SNR filter kept no prompt group for {consecutive} consecutive steps: {cause}, so there is no learning "
        f"signal and training stops at step {step}. {fix}, or set reward_variance_empty_patience=0 to never stop."
    )
