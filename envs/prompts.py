"""The RAGEN prompt protocol as pure string functions: system and per-turn prompts, feedback, answer parsing.

One episode is a chat: a system message (`system_prompt`), then per turn a user message (`turn_prompt`, the first
one built by `initial_messages`) and the model's reply. Generation is primed with `<think>`, so the reply usually
starts inside the think block; `parse_response` accepts it with or without the leading tag and pulls out the
`||`-separated actions of the `<answer>` block. After a step, the environment's reward is reported back with
`reward_feedback` in front of the next turn prompt.

The texts follow RAGEN-2 (paper §4.1) to the character, so trained models see the prompts of the paper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from .base import TextEnv


SYSTEM_PREFIX = "You're a helpful assistant. "
ACTION_SEPARATOR = "||"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

# Tags and ChatML markers that may leak into a captured block; they are removed from the think and answer texts.
_STRAY_TOKENS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE, "<|im_start|>", "<|im_end|>", "<|endoftext|>")
_THINK_TO_ANSWER = re.compile(r"</think>\s*<answer>")

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


# ----------------------------------------------------------------------------------------------------------------
# Prompts


def system_prompt(env: TextEnv) -> str:
    """The system message: RAGEN's fixed preamble followed by the environment's instructions."""
    return SYSTEM_PREFIX + env.instructions


def turn_prompt(turn: int, observation: str, actions_left: int, max_tokens: int) -> str:
    """The user message of turn `turn` (1-based) showing `observation`."""
    return (
        f"\nTurn {turn}:\nState:\n{observation}\nYou have {actions_left} actions left. "
        "Always output: <think> [Your thoughts] </think> <answer> [your answer] </answer> with no extra text. "
        f"Strictly follow this format. Max response length: {max_tokens} words (tokens)."
    )


def reward_feedback(reward: float) -> str:
    """The text reporting a turn's reward; the rollout puts it in front of the next turn prompt."""
    return f"Reward:\n{reward}\n"


def initial_messages(env: TextEnv, observation: str, *, actions_left: int, max_tokens: int) -> list[dict[str, str]]:
    """The chat that opens an episode: the system message and the turn-1 user message."""
    return [
        {"role": "system", "content": system_prompt(env)},
        {"role": "user", "content": turn_prompt(1, observation, actions_left, max_tokens)},
    ]


# ----------------------------------------------------------------------------------------------------------------
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


def _clean(block: str) -> str:
    for token in _STRAY_TOKENS:
        block = block.replace(token, "")
    return block.strip()


def parse_response(text: str, *, max_actions: int) -> ParsedResponse:
    """Parse a reply with the semantics of `re.search(r"<think>(.*?)</think>\\s*<answer>(.*?)</answer>", text, re.S)`.

    A reply that does not start with `<think>` (after leading whitespace) is read as starting inside the think
    block, because generation is primed with that tag. Runs in linear time (plain `str.find` instead of the
    backtracking regex, which is quadratic on replies with many unclosed tags) and never raises.
    """
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
    think = _clean(text[think_start : middle.start()])
    answer = _clean(text[middle.end() : answer_end])
    actions = [part.strip() for part in answer.split(ACTION_SEPARATOR) if part.strip()]
    actions = actions[: max(max_actions, 0)]
    return ParsedResponse(think=think, answer=answer, actions=actions, format_ok=bool(actions))
