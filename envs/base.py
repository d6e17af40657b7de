"""The protocol every trl-ragen2 environment follows, and the small helpers they share.

One episode: `reset(seed) -> observation text`, then `step(action text) -> (observation, reward, done, info)`
until `done`. `info` always carries `success` (task solved) and `action_is_valid` (the action was understood
and legal). The same seed gives the same instance. Model output is untrusted input: `step` never raises on any
string (lone surrogates included); an action it cannot use is reported with `action_is_valid=False` and leaves
the state unchanged (the rollout applies the format penalty). A step the environment's own machinery failed to
serve (a search server down) carries the cause in `info["env_error"]`.

`step` before the first `reset` follows the same rule in every environment: it does not raise but returns
`not_started_step()`, an invalid step (empty observation, no reward, not done) whose `invalid_reason` says to call
`reset()`. So a wrapper that steps a fresh environment gets an answer it already handles, and the reason names the
missing call. (RAGEN's environments fail with whatever error their missing state raises.)

Environments are plain Python (numpy at most): no torch, no TRL.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np


StepResult = tuple[str, float, bool, dict[str, Any]]
T = TypeVar("T")


class TextEnv(ABC):
    """Base class of the text environments.

    Subclasses set `name` (and `takes_split` when they choose instances by split), implement `reset`, `step` and
    `render`, and return their task instructions from `instructions`. Discrete tasks list their action vocabulary
    in `action_vocabulary()`; open-ended ones (Countdown, MetaMathQA) return `None`.
    """

    name: str = ""
    # Whether the constructor takes a `split` keyword and draws its instances from that split (WebShop's goals);
    # dataset builders then give the train and evaluation environments their own split.
    takes_split: bool = False
    # The keys `episode_metrics` returns (listed in docs/metrics.md as `ragen2/env/<name>/<key>`).
    episode_metric_keys: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.rng = np.random.default_rng()

    @property
    @abstractmethod
    def instructions(self) -> str:
        """Task instructions, placed in the system message after "You're a helpful assistant. "."""

    def action_vocabulary(self) -> list[str] | None:
        """The actions the task accepts (case-insensitive), or `None` for free-form answers."""
        return None

    def symbol_legend(self) -> dict[str, str] | None:
        """What each symbol of a grid observation means, in display order; `None` for text observations."""
        return None

    @property
    def task_instructions(self) -> str:
        """The task alone, without the symbol legend and the action list, for a system message that lists those
        separately (RAGEN's layout, `prompts.system_prompt(protocol="ragen")`); by default `instructions`."""
        return self.instructions

    def protocol_reward(self, reward: float, protocol: str) -> float:
        """A step's reward in the number type the protocol's original environment returns, for the feedback text
        (RAGEN prints `str(0 + r_1 + ... + r_k)`); by default the reward itself. FrozenLake gives gymnasium's ints
        for `protocol="ragen"`."""
        return reward

    def protocol_observation(self, observation: str, protocol: str) -> str:
        """The state text a rollout protocol shows for `observation`, the text `reset` or `step` just returned.

        By default the observation itself; Sokoban and FrozenLake show RAGEN's coordinates-first layout for
        `protocol="ragen"`.
        """
        return observation

    @abstractmethod
    def reset(self, seed: int | None = None) -> str:
        """Start a new episode; the same seed gives the same instance. Returns the first observation."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action (untrusted text); never raises on it."""

    @abstractmethod
    def render(self) -> str:
        """The current state as text (the observation `reset` and `step` return)."""

    def episode_metrics(self) -> dict[str, float]:
        """The environment's own numbers about the episode it just played, beyond the rollout's statistics.

        The rollout reads them when the episode ends and logs their mean over the environment's episodes as
        `ragen2/env/<name>/<key>`; the keys are those of `episode_metric_keys` and may not repeat a name of the
        rollout's own (`success`, `turns`, `success_rate`, ...). None by default.
        """
        return {}

    def close(self) -> None:  # noqa: B027 (a no-op by default, not abstract: most environments hold nothing)
        """Release resources (most environments hold none)."""

    def seed_rng(self, seed: int | None) -> None:
        """Give the environment its own generator: the same seed gives the same instance, no global state."""
        self.rng = np.random.default_rng(seed)

    def pick_for_seed(self, items: Sequence[T], seed: int | None) -> T:
        """The item a seed picks in a file-backed environment: `items[seed % len(items)]`, so consecutive seeds
        visit distinct items; without a seed, one drawn from the environment's generator."""
        return items[seed % len(items) if seed is not None else int(self.rng.integers(len(items)))]


def invalid_step(observation: str, reason: str, **info: Any) -> StepResult:
    """The result of an action the environment could not use: no reward, state unchanged, not done."""
    return observation, 0.0, False, {"success": False, "action_is_valid": False, "invalid_reason": reason, **info}


NOT_STARTED_REASON = "no episode: call reset() before step()"


def not_started_step(**info: Any) -> StepResult:
    """The result of `step` before the first `reset`: an invalid step on an empty observation (see the module
    docstring)."""
    return invalid_step("", NOT_STARTED_REASON, **info)


def finished_step(
    observation: str, success: bool, reason: str = "the episode is over; call reset() to start another", **info: Any
) -> StepResult:
    """The result of an action after the episode's end: no reward, state unchanged, still done, `success` kept."""
    return observation, 0.0, True, {"success": success, "action_is_valid": False, "invalid_reason": reason, **info}


# Longer text cannot name an action; it is rejected before stripping, so megabyte answers cost nothing.
MAX_ACTION_CHARS = 64


def action_index(action: Any, lookup: dict[str, int]) -> int:
    """The index `lookup` gives an action name (lower-case keys; case and surrounding whitespace are ignored), or
    -1 for anything else, text or not."""
    if not isinstance(action, str) or len(action) > MAX_ACTION_CHARS:
        return -1
    return lookup.get(action.strip().lower(), -1)


def require_int(field: str, value: Any, minimum: int, fix: str) -> int:
    """`value` as an int if it is an integer >= `minimum` (bools are not); else a `ValueError` naming `field`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ValueError(f"{field} must be an integer >= {minimum}, got {shown} ({type(value).__name__}); {fix}")
    return int(value)


def check_env_keywords(env_class: type, config: dict[str, Any], source: str) -> None:
    """Raise a `TypeError` naming every key of `config` (from `source`) that `env_class` does not take, and the
    keywords it does take."""
    parameters = inspect.signature(env_class).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = sorted(p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY)
    unknown = sorted(set(config) - set(accepted), key=str)
    if unknown:
        raise TypeError(
            f"{env_class.__name__} does not take {', '.join(map(repr, unknown))} ({source}); "
            f"its keywords are {', '.join(accepted)}; remove the unknown keys or fix their spelling"
        )
