"""Where the reasoning is: turn boundaries inside a completion, and the reasoning span inside a turn.

A TRL GRPO batch holds, per row, a right-padded `completion_ids` that may span several assistant turns. Turn
boundaries come, in order of preference, from

1. the rollout's `turn_spans` (per dataset row: a list of half-open `(start, end)` token offsets into the row's
   completion, one per assistant turn, model tokens only),
2. the 0/1 transitions of TRL's `tool_mask` (each run of 1s inside the completion is one assistant turn; the 0s are
   tool or environment tokens),
3. otherwise the whole completion is a single turn.

Inside a turn, the reasoning Z is the text between `<think>` and `</think>` ([`ThinkTagExtractor`]), or any
`text -> reasoning text` callable. Generation in the RAGEN protocol is primed with `<think>` in the prompt, so a first
turn can start inside the think block: "no opening tag, closing tag present" means reasoning = text before the tag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from trl_ragen2_envs.prompts import THINK_CLOSE, THINK_OPEN


ReasoningExtractor = Callable[[str], str]


@dataclass(frozen=True)
class ThinkTagExtractor:
    """Extract the reasoning between an opening and a closing tag (RAGEN's `<think> ... </think>`).

    | turn text | reasoning |
    |---|---|
    | `... <think> R </think> ...` | `R` (first opening tag, first closing tag after it) |
    | `R </think> ...` (generation primed with `<think>`) | `R` |
    | `... <think> R` (cut off before the closing tag) | `R` |
    | no tags | the whole turn |

    The text is returned as generated (not stripped); whitespace-only reasoning counts as empty, and empty reasoning
    is dropped by the pair builder. `open_tag` also tells the pair builder to end every context X with the opening tag
    (RAGEN's X ends with a literal `<think>`), unless it already does.
    """

    open_tag: str = THINK_OPEN
    close_tag: str = THINK_CLOSE

    def __post_init__(self):
        if not self.open_tag or not self.close_tag:
            raise ValueError(f"open_tag and close_tag must be non-empty, got {self.open_tag!r} and {self.close_tag!r}")

    def __call__(self, text: str) -> str:
        start = text.find(self.open_tag)
        if start >= 0:
            body = text[start + len(self.open_tag) :]
            end = body.find(self.close_tag)
            return body if end < 0 else body[:end]
        end = text.find(self.close_tag)
        return text if end < 0 else text[:end]


def completion_lengths(
    completion_ids: torch.Tensor, completion_mask: torch.Tensor, pad_token_id: int | None
) -> list[int]:
    """Real (unpadded) length of each completion row.

    `completion_mask` covers everything up to and including the first EOS. TRL zeroes the whole mask of truncated rows
    when `mask_truncated_completions=True`; such rows fall back to "up to the last non-pad token".
    """
    lengths = completion_mask.sum(1).tolist()
    for row, length in enumerate(lengths):
        if length == 0 and pad_token_id is not None:
            non_pad = (completion_ids[row] != pad_token_id).nonzero()
            lengths[row] = int(non_pad[-1]) + 1 if len(non_pad) else 0
    return [int(length) for length in lengths]


def _runs_of_ones(bits: Sequence[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for position, bit in enumerate(bits):
        if bit and start is None:
            start = position
        elif not bit and start is not None:
            spans.append((start, position))
            start = None
    if start is not None:
        spans.append((start, len(bits)))
    return spans


def _clean_spans(spans, length: int, row: int) -> list[tuple[int, int]]:
    if not isinstance(spans, (list, tuple)):
        raise ValueError(f"turn_spans of row {row} must be a list of (start, end) pairs, got {type(spans).__name__}")
    cleaned = []
    for span in spans:
        if not isinstance(span, (list, tuple)) or len(span) != 2:
            raise ValueError(f"turn_spans of row {row} must hold (start, end) pairs, got {span!r}")
        start, end = int(span[0]), min(int(span[1]), length)
        if start < 0:
            raise ValueError(f"turn_spans of row {row} has a negative start {start}; offsets index completion_ids")
        if start < end:
            cleaned.append((start, end))
    return cleaned


def turn_spans(
    rows: Sequence[dict] | None,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    tool_mask: torch.Tensor | None = None,
    pad_token_id: int | None = None,
) -> list[list[tuple[int, int]]]:
    """Half-open token spans of the assistant turns of every row of a batch (see the module docstring for the rules).

    Args:
        rows: the dataset rows of the batch (`rows[i]` matches batch row i); a row may carry `turn_spans`.
        completion_ids, completion_mask: `(B, Lc)`, right-padded.
        tool_mask: `(B, Lc)`, 1 on model tokens and 0 on tool/environment tokens, or `None`.
        pad_token_id: used to recover the length of rows whose `completion_mask` TRL zeroed.

    Returns:
        Per row, the turns as `(start, end)` offsets into `completion_ids[i]`, clipped to the row's real length;
        empty spans are removed (a row with an empty completion has no turns).
    """
    lengths = completion_lengths(completion_ids, completion_mask, pad_token_id)
    spans = []
    for row, length in enumerate(lengths):
        given = rows[row].get("turn_spans") if rows is not None else None
        if given is not None:
            spans.append(_clean_spans(given, length, row))
        elif tool_mask is not None:
            spans.append(_runs_of_ones(tool_mask[row, :length].tolist()))
        else:
            spans.append([(0, length)] if length > 0 else [])
    return spans
