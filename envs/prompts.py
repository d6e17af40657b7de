"""The prompt protocols as pure string functions: system and per-turn prompts, feedback, answer parsing.

One episode is a chat: a system message (`system_prompt`), then per turn a user message (`turn_prompt`, the first
one built by `initial_messages`) and the model's reply. Generation is primed with `<think>`, so the reply usually
starts inside the think block; `parse_response` accepts it with or without the leading tag and pulls out the
`||`-separated actions of the `<answer>` block. After a step, the environment's reward is reported back with
`reward_feedback` in front of the next turn prompt.

Two protocols (`PROTOCOLS`) share the turn layout of RAGEN-2 (paper §4.1):

- `"trl_ragen2"` (the default): the system message is the preamble and the environment's `instructions`; user
  turns end right after "(tokens).".
- `"ragen"`: RAGEN's ContextManager layout to the character. The system message is built like RAGEN's (task
  instruction, then a symbol legend, the action list and the action-budget line, in this library's own words);
  user turns end with a newline; after a turn without a valid action the state block carries RAGEN's warning line;
  the state is shown in the environment's RAGEN layout (`TextEnv.protocol_observation`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from .base import TextEnv


PROTOCOLS = ("trl_ragen2", "ragen")
SYSTEM_PREFIX = "You're a helpful assistant. "
ACTION_SEPARATOR = "||"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

# Tags and ChatML markers that may leak into a captured block; they are removed from the think and answer texts.
# RAGEN's ContextManager removes the same list without "<|endoftext|>".
_STRAY_TOKENS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE, "<|im_start|>", "<|im_end|>", "<|endoftext|>")
_RAGEN_STRAY_TOKENS = _STRAY_TOKENS[:-1]
_FORMAT_INSTRUCTION = (
    "Always output: <think> [Your thoughts] </think> <answer> [your answer] </answer> with no extra text. "
    "Strictly follow this format."
)
# The line RAGEN's ContextManager puts into the state block after a turn in which no action was valid.
RAGEN_NO_VALID_ACTION_LINE = (
    "No valid action provided previously. Environment state remains the same. Please try again.\n"
)
_THINK_TO_ANSWER = re.compile(re.escape(THINK_CLOSE) + r"\s*" + re.escape(ANSWER_OPEN))

# RAGEN's per-environment prompt budgets (config/envs.yaml of the RAGEN-2 code, paper variants CoordSokoban and
# CoordFrozenLake): name -> (actions per episode, the "Max response length" shown in the prompt).
RAGEN_PROMPT_BUDGETS: dict[str, tuple[int, int]] = {
    "sokoban": (10, 120),
    "frozen_lake": (10, 120),
    "countdown": (1, 100),
    "metamathqa": (1, 100),
    "webshop": (9, 200),
    "searchqa": (10, 300),
    "deepcoder": (1, 8000),
}


def prompt_budget(env_name: str, max_actions: int | None = None, max_tokens: int | None = None) -> tuple[int, int]:
    """`(max_actions, max_tokens)` for `env_name`: the given values, else RAGEN's (`RAGEN_PROMPT_BUDGETS`)."""
    if max_actions is None or max_tokens is None:
        if env_name not in RAGEN_PROMPT_BUDGETS:
            raise ValueError(
                f"env={env_name!r} has no RAGEN prompt budget; pass max_actions and max_tokens explicitly "
                f"(known defaults: {sorted(RAGEN_PROMPT_BUDGETS)})"
            )
        default_actions, default_tokens = RAGEN_PROMPT_BUDGETS[env_name]
        max_actions = default_actions if max_actions is None else max_actions
        max_tokens = default_tokens if max_tokens is None else max_tokens
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1, got {max_actions}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    return max_actions, max_tokens


# ---------------------------------------------------------------------------------------------------------------
# Prompts


def check_protocol(protocol: str, field: str = "protocol") -> str:
    """`protocol` if it names one of `PROTOCOLS`, else a `ValueError` naming `field` and the choices."""
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"{field} must be one of {PROTOCOLS}, got {protocol!r}; use 'ragen' for RAGEN's prompts and penalty rules "
            "or 'trl_ragen2' for this library's default"
        )
    return protocol


def system_prompt(env: TextEnv, protocol: str = "trl_ragen2", *, max_actions: int | None = None) -> str:
    """The system message of `protocol`.

    `"trl_ragen2"`: the fixed preamble followed by the environment's instructions. `"ragen"`, for an environment
    with a symbol legend or an action vocabulary: the preamble, the task instruction ending in a newline, then
    (each on a new line) the legend as `symbol: meaning` pairs, the actions, and the action budget `max_actions`
    (required then); other environments get the `"trl_ragen2"` message, as RAGEN adds nothing to theirs.
    """
    check_protocol(protocol)
    legend = env.symbol_legend() if protocol == "ragen" else None
    actions = env.action_vocabulary() if protocol == "ragen" else None
    if legend is None and actions is None:
        return SYSTEM_PREFIX + env.instructions
    text = SYSTEM_PREFIX + env.task_instructions + "\n"
    if legend is not None:
        text += "\nSymbols in the state:\n" + ", ".join(f"{symbol}: {meaning}" for symbol, meaning in legend.items())
    if actions is not None:
        if max_actions is None:
            raise ValueError("system_prompt(protocol='ragen') needs max_actions, the episode's action budget")
        text += (
            "\nActions you can take:\n" + ", ".join(actions) + f"\nAn episode allows at most {max_actions} "
            f'actions in all; put " {ACTION_SEPARATOR} " between two actions of one answer.\n'
        )
    return text


def turn_prompt(
    turn: int, observation: str, actions_left: int, max_tokens: int, protocol: str = "trl_ragen2", *,
    no_valid_action: bool = False,
) -> str:  # fmt: skip
    """The user message of turn `turn` (1-based) showing `observation`.

    With `protocol="ragen"` the message ends with a newline, and `no_valid_action=True` (the previous turn had no
    valid action) puts RAGEN's warning line between the state and the actions-left line.
    """
    check_protocol(protocol)
    warning = RAGEN_NO_VALID_ACTION_LINE if protocol == "ragen" and no_valid_action else ""
    end = "\n" if protocol == "ragen" else ""
    return (
        f"\nTurn {turn}:\nState:\n{observation}\n{warning}You have {actions_left} actions left. "
        f"{_FORMAT_INSTRUCTION} Max response length: {max_tokens} words (tokens).{end}"
    )


def reward_feedback(reward: float) -> str:
    """The text reporting a turn's reward (`str(reward)`); the rollout puts it in front of the next turn prompt.

    The number is shown as Python prints it, so its type shows: RAGEN reports the sum `0 + r_1 + ... + r_k` of the
    turn's executed actions with the number types of RAGEN's environments (`0` for a turn without an action, `0`
    for FrozenLake's int rewards, `-0.2` for two Sokoban moves); see `TextEnv.protocol_reward`.
    """
    return f"Reward:\n{reward}\n"


def initial_messages(
    env: TextEnv, observation: str, *, actions_left: int, max_tokens: int, protocol: str = "trl_ragen2"
) -> list[dict[str, str]]:
    """The chat that opens an episode: the system message and the turn-1 user message.

    `observation` is what `env.reset` returned; `protocol="ragen"` shows it in the environment's RAGEN layout and
    states `actions_left` (the whole budget at the start) as the system message's action budget.
    """
    state = env.protocol_observation(observation, protocol)
    return [
        {"role": "system", "content": system_prompt(env, protocol, max_actions=actions_left)},
        {"role": "user", "content": turn_prompt(1, state, actions_left, max_tokens, protocol)},
    ]


# ---------------------------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class ParsedResponse:
    """A model reply split into its parts.

    `think` and `answer` are the block texts, stripped, with stray think/answer tags and ChatML markers removed
    (`None` when the reply does not match the format); `answer` is kept whole even when `actions` is truncated.
    `actions` are the non-empty `||`-separated parts of the answer, at most `max_actions`, and `format_ok` is True
    when the reply matched the format and holds at least one action.
    """

    think: str | None
    answer: str | None
    actions: list[str] = field(default_factory=list)
    format_ok: bool = False


def _clean(block: str, stray_tokens: tuple[str, ...]) -> str:
    for token in stray_tokens:
        block = block.replace(token, "")
    return block.strip()


def parse_response(text: str, *, max_actions: int, protocol: str = "trl_ragen2") -> ParsedResponse:
    """Parse a reply with the semantics of `re.search(r"<think>(.*?)</think>\\s*<answer>(.*?)</answer>", text, re.S)`.

    A reply that does not start with `<think>` (after leading whitespace) is read as starting inside the think
    block, because generation is primed with that tag. Runs in linear time (plain `str.find` instead of the
    backtracking regex, which is quadratic on replies with many unclosed tags) and never raises. `protocol="ragen"`
    removes RAGEN's list of stray tokens, which keeps a literal `<|endoftext|>`.
    """
    stray_tokens = _RAGEN_STRAY_TOKENS if check_protocol(protocol) == "ragen" else _STRAY_TOKENS
    if not isinstance(text, str):
        return ParsedResponse(think=None, answer=None)
    if not text.lstrip().startswith(THINK_OPEN):
        text = THINK_OPEN + text
    # The leftmost match starts at the first <think>: if a match exists from any later <think>, it also exists
    # from this one with a longer think block. Its think block then ends at the first "</think>\s*<answer>".
    think_start = text.find(THINK_OPEN) + len(THINK_OPEN)
    middle = _THINK_TO_ANSWER.search(text, think_start)
    if middle is None:
        return ParsedResponse(think=None, answer=None)
    answer_end = text.find(ANSWER_CLOSE, middle.end())
    if answer_end < 0:
        return ParsedResponse(think=None, answer=None)
    think = _clean(text[think_start : middle.start()], stray_tokens)
    answer = _clean(text[middle.end() : answer_end], stray_tokens)
    actions = [part.strip() for part in answer.split(ACTION_SEPARATOR) if part.strip()]
    actions = actions[: max(max_actions, 0)]
    return ParsedResponse(think=think, answer=answer, actions=actions, format_ok=bool(actions))
