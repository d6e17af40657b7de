"""`ToolEnvAdapter`: what the TRL `environment_factory` classes of the environments (`SokobanToolEnv`, ...) share.

`trl.GRPOTrainer(environment_factory=SokobanToolEnv)` builds one adapter per rollout, calls `reset(**row)` with the
episode's dataset row, offers every other public method of the class as a tool (the method's name, typed signature
and Google-style docstring become the tool schema) and reads `get_reward()` when the rollout ends. This base
therefore defines only `reset` and `get_reward` as public methods; its helpers start with `_`, and the tools live
in the environment modules:

```python
class SokobanToolEnv(ToolEnvAdapter):
    env_class = SokobanEnv
    tool_instructions = "Sokoban: push every box onto a target. Call `move` ..."

    def move(self, direction: str) -> str:
        # a Google-style docstring (summary, Args, Returns) here: TRL builds the tool schema from it
        return self._act(direction)
```

One episode per row. `reset` reads `seed` (a non-negative integer, or None for a random instance) and the optional
`env_config` (JSON text or a dict of `env_class` keywords, added to the keywords given to the adapter's constructor),
builds the environment (reused while those keywords stay the same), resets it and returns the tool instructions
with the first observation; other columns are ignored. A tool call goes through `_act`, which steps the environment
once, adds the step reward to the episode return and answers with text. Model output is untrusted input: a tool
never raises on it. A call the environment cannot use is answered with the reason and changes nothing; a call before
`reset` or after the episode's end is answered without reaching the environment.
"""

from __future__ import annotations

from typing import Any

from .base import TextEnv, check_env_keywords
from .datasets import parse_env_config, row_seed


class ToolEnvAdapter:
    """Base of the `*ToolEnv` classes: one `env_class` episode per dataset row, exposed through tool methods.

    A subclass sets `env_class` and `tool_instructions` and defines the tools: public methods with a typed signature
    and a Google-style docstring that turn their arguments into one action text and return `self._act(action)`.
    The class attributes below set the texts it answers with; `_tool_instructions`, `_refusal` and `_reply` are
    the hooks for what varies with the environment's state.

    Args:
        **env_config: `env_class` keywords for every episode (e.g. through `functools.partial`); a row's
            `env_config` adds to them and wins on shared keys.
    """

    env_class: type[TextEnv]
    # The task's tool instructions, shown by `reset` with the first observation.
    tool_instructions = ""
    # How `reset` lays out the instructions and the first observation (TRL appends it to the prompt's last turn).
    reset_layout = "\n\n{instructions}\n\n{observation}"
    # The answers to calls that do not reach the environment.
    not_started_reply = "Error: the environment has not been reset."
    episode_over_reply = "The episode is over; no further calls count."
    # The answer to an action the environment rejected: {reason} is its `invalid_reason`, {got} the repr of the
    # action's first 40 characters, {observation} the (unchanged) observation.
    invalid_reply = "Error: {reason}."

    def __init__(self, **env_config: Any) -> None:
        check_env_keywords(self.env_class, env_config, f"given to {type(self).__name__}()")
        self._base_config = env_config
        self.env: TextEnv | None = None
        self.env_config: dict[str, Any] | None = None  # the keywords `env` was built with
        self.episode_return = 0.0
        self._started = False  # an episode was reset (tool calls reach the environment)
        self._done = False  # the environment ended the episode

    def reset(self, **row: Any) -> str:
        """Start the episode of a dataset row (`seed`, optional `env_config`); returns the instructions and the
        first observation."""
        seed = row_seed(row.get("seed"), allow_none=True)
        row_config = parse_env_config(row.get("env_config"))
        config = {**self._base_config, **row_config}
        if self.env is None or config != self.env_config:
            check_env_keywords(self.env_class, row_config, "given in the row's env_config")
            self.env, self.env_config = self.env_class(**config), config
        self.episode_return, self._started, self._done = 0.0, False, False
        observation = self.env.reset(seed=seed)
        self._started = True
        return self.reset_layout.format(instructions=self._tool_instructions(), observation=observation)

    def get_reward(self) -> float:
        """The episode's return: the sum of its step rewards (0.0 until a step pays)."""
        return self.episode_return

    # -----------------------------------------------------------------------------------------------------------
    # Hooks

    def _tool_instructions(self) -> str:
        """The instructions `reset` shows (override when they depend on the configured environment)."""
        return self.tool_instructions

    def _refusal(self) -> str | None:
        """An answer that stops a call in a running episode before it reaches the environment, or None."""
        return None

    def _reply(self, observation: str, reward: float, done: bool, info: dict[str, Any]) -> str:
        """The answer to an action the environment used: its new observation unless overridden."""
        return observation

    # -----------------------------------------------------------------------------------------------------------
    # The step every tool takes

    def _act(self, action: Any) -> str:
        """Apply one action (untrusted; non-text is turned into text) and answer; never raises on the action."""
        if not self._started:
            return self.not_started_reply
        if self._done:
            return self.episode_over_reply
        refusal = self._refusal()
        if refusal is not None:
            return refusal
        text = action if isinstance(action, str) else str(action)
        observation, reward, done, info = self.env.step(text)
        self.episode_return += float(reward)  # 0.0 for a rejected action
        self._done = done
        if not info["action_is_valid"]:
            reason = info.get("invalid_reason", "the action was not accepted")
            return self.invalid_reply.format(reason=reason, got=repr(text[:40]), observation=observation)
        return self._reply(observation, reward, done, info)


__all__ = ["ToolEnvAdapter"]
