"""RAGEN's SearchQA rules as pure functions: how an action is read, how an answer is pulled out of free text, and
the observation texts (`SearchQAEnv(rules="ragen")`).

RAGEN's search environment (mll-lab-nu/RAGEN, `ragen/env/search`) reads the whole action, stripped of surrounding
whitespace:

- `search[...]` / `finish[...]`: the text starts with `search[` or `finish[` (lower case) and ends with `]`; the
  argument is everything in between, unstripped (`search[a] finish[b]` searches for `a] finish[b`);
- empty text: an invalid action (a step is used, the episode goes on unless that was the last step);
- anything else: read as a final answer, pulled out by `extract_answer`, scored, and the episode ends.

Every action, the empty one included, counts toward `max_steps`. Search results are shown as RAGEN's retrieval
client writes them (`format_passages`): `[Document i] (ID: <id>, Score: <score:.3f>)` and the content, each content
over 800 characters cut to 800 plus `...`, the whole text over 4,000 cut to 4,000 plus `...`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..prompts import THINK_CLOSE, THINK_OPEN


ACTIONS_LINE = "Available actions: search[<query>], finish[<answer>]"
BUDGET_SPENT_LINE = "Maximum search steps reached. Episode ended without an answer."
INVALID_OBSERVATION = f"Invalid action. Use search[<query>] to search or finish[<answer>] to answer.\n{ACTIONS_LINE}"
NO_RESULTS = "No relevant documents found for the query."
TOP_K = 5  # `max_search_results` of RAGEN's SearchQA config
MAX_REQUESTED_RESULTS = 50  # RAGEN's client never asks the server for more
SEARCH, FINISH, INVALID, FALLBACK = "search", "finish", "invalid", "fallback"  # RAGEN's `info["action_type"]` values


# ---------------------------------------------------------------------------------------------------------------
# Reading an action


def read_action(text: str) -> tuple[str, str]:
    """`(kind, argument)` of an action: `("search", query)`, `("finish", answer)`, `("invalid", "")` for empty text,
    or `("fallback", stripped text)` for anything else (RAGEN extracts an answer from it)."""
    text = text.strip()
    for verb in (SEARCH, FINISH):
        if text.startswith(verb + "[") and text.endswith("]"):
            return verb, text[len(verb) + 1 : -1]
    return (FALLBACK, text) if text else (INVALID, "")


# ---------------------------------------------------------------------------------------------------------------
# Pulling an answer out of free text

_WHITESPACE = re.compile(r"\s+")
_DOUBLE_STARRED = re.compile(r"\*\*([^*]+)\*\*")
_STARRED = re.compile(r"\*([^*]+)\*")
_WORD_CHARACTER = re.compile(r"\w")
# A phrase announcing the answer, then the answer up to the end of its sentence. There is no word boundary:
# "so" also matches inside "also" or "reason".
_ANNOUNCED = (
    re.compile(r"(?:the\s+)?(?:correct\s+)?answer\s+is\s*:?\s*([^.!?]+)", re.IGNORECASE),
    re.compile(r"(?:therefore|thus|so|hence)\s*,?\s*([^.!?]+)", re.IGNORECASE),
)
_EDGE_NON_WORD = re.compile(r"^\W+|\W+$")
_SENTENCE_END = re.compile(r"[.!?]+")


def _drop_think_blocks(text: str) -> str:
    """`text` without its `<think>...</think>` blocks (each from a `<think>` to the next `</think>`), in linear time.

    Once a `<think>` has no `</think>` after it, no later one has either, so the rest is kept as it is.
    """
    kept, position = [], 0
    while (start := text.find(THINK_OPEN, position)) >= 0 and (
        end := text.find(THINK_CLOSE, start + len(THINK_OPEN))
    ) >= 0:
        kept.append(text[position:start])
        position = end + len(THINK_CLOSE)
    return "".join(kept) + text[position:]


def _first_boxed(text: str) -> str | None:
    """The content of the first `\\boxed{...}` with a non-empty content free of `}`, in linear time."""
    position = 0
    while (start := text.find("\\boxed{", position)) >= 0:
        content_start = start + len("\\boxed{")
        end = text.find("}", content_start)
        if end < 0:
            return None  # no "}" anywhere after: no later "\boxed{" closes either
        if end > content_start:
            return text[content_start:end]
        position = start + 1  # "\boxed{}": try the next one
    return None


def extract_answer(text: str) -> str:
    """The answer RAGEN reads from free text, trying in order:

    1. the content of the first `\\boxed{...}`;
    2. the first `**bold**`, then the first `*starred*`, span longer than 2 characters holding a word character;
    3. after "answer is" ("the correct answer is: X"), then after "therefore", "thus", "so" or "hence" (anywhere,
       even inside a word), the text up to the next `.`, `!` or `?`, without non-word characters at its ends, when
       it is longer than 3 characters (only the first occurrence of each phrase is tried);
    4. the first sentence (split at runs of `.`, `!`, `?`) longer than 5 characters;
    5. the first 100 characters.

    `<think>...</think>` blocks are removed and whitespace runs become one space first; empty text gives "".
    """
    text = _WHITESPACE.sub(" ", _drop_think_blocks(text.strip())).strip()
    if not text:
        return ""
    boxed = _first_boxed(text)
    if boxed is not None:
        return boxed.strip()
    for pattern in (_DOUBLE_STARRED, _STARRED):
        for span in pattern.findall(text):
            span = span.strip()
            if len(span) > 2 and _WORD_CHARACTER.search(span):
                return span
    for pattern in _ANNOUNCED:
        match = pattern.search(text)
        if match:
            answer = _EDGE_NON_WORD.sub("", match.group(1).strip())
            if len(answer) > 3:
                return answer
    for sentence in _SENTENCE_END.split(text):
        if len(sentence.strip()) > 5:
            return sentence.strip()
    return text[:100].strip()


# ---------------------------------------------------------------------------------------------------------------
# What the agent sees


def first_observation(question: str) -> str:
    """The observation `reset` returns."""
    return f"Question: {question}\n{ACTIONS_LINE}"


def format_passages(hits: Sequence, top_k: int, max_doc_chars: int = 800, max_total_chars: int = 4000) -> str:
    """RAGEN's client's text for the first `top_k` of `hits` (`SearchHit`s, best first): `[Document i] (ID: <id>,
    Score: <score:.3f>)` then the content, blocks separated by a blank line; a content over `max_doc_chars`
    characters is cut to that many plus `...`, the whole text over `max_total_chars` likewise."""
    if not hits:
        return NO_RESULTS
    blocks = []
    for number, hit in enumerate(hits[:top_k], start=1):
        content = hit.content if len(hit.content) <= max_doc_chars else hit.content[:max_doc_chars] + "..."
        blocks.append(f"[Document {number}] (ID: {hit.passage_id}, Score: {hit.score:.3f})\n{content}")
    text = "\n\n".join(blocks)
    return text if len(text) <= max_total_chars else text[:max_total_chars] + "..."


def search_observation(query: str, results: str, budget_spent: bool) -> str:
    """The observation after `search[query]`: the results, then the actions line, or the end-of-budget line when
    that search used the last step."""
    return f"Search results for '{query}':\n{results}\n\n{BUDGET_SPENT_LINE if budget_spent else ACTIONS_LINE}"


def answer_observation(answer: str, reward: float, extracted: bool) -> str:
    """The observation after an answer (`extracted`: read from free text rather than `finish[...]`)."""
    return f"Your answer{' (extracted)' if extracted else ''}: {answer}. Reward: {reward:.2f}"
