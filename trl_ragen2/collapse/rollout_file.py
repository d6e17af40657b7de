"""Saved rollouts for `trl-ragen2 diagnose`: the JSONL rows any framework can dump, read line by line and checked.

One JSON object per line:

| field | type | meaning |
|---|---|---|
| `prompt` | `str`, or a list of chat messages | the text the model was given (used as it is), or messages the tokenizer's chat template renders with the generation prompt |
| `completion` | `str`, or a list of `{"role", "content"}` messages | what the model wrote: one turn, or several turns (role `assistant`) with the environment's or tool's messages (any other role) in between |
| `group` | `str` or `int`, *optional* | the prompt group (the G samples of one prompt); either every row has one or none does, and then rows are grouped by their prompt |
| `reward` | number, *optional* | the row's reward, shown on the page |

[`read_rollouts`] checks each row as it is read, so a bad row 3 of a 10 GB file is reported after three lines: a
line that is not JSON, a missing or empty field, a group named by some rows only, a group id used with two
prompts, fewer than two prompts in the file. Each error names the file, the line, the value and the fix.
[`write_rollouts`] writes the same format (`diagnose --save-rollouts`, and the export recipes of
docs/diagnose.md). Standard library only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


FIELDS = ("prompt", "completion", "group", "reward")
EXPORT_HINT = "see docs/diagnose.md, 'Saved rollouts', for the format and how to export it from TRL or veRL"


class RolloutFileError(ValueError):
    """A saved-rollouts file that cannot be diagnosed; the message names the file, the line and the fix."""


@dataclass
class RolloutRow:
    """One rollout: the prompt, the completion's pieces, the group and the reward.

    `completion` is a list of `(role, text)` pieces; the `assistant` pieces are the turns (a plain string
    completion is one assistant piece). `group` defaults to the prompt.
    """

    prompt: str | list[dict]
    completion: list[tuple[str, str]]
    group: str
    reward: float | None = None
    line: int = 0  # 1-based line of the file (0: not from a file)
    named_group: bool = True  # whether the row named its group (False: the group is the prompt)

    def prompt_key(self) -> str:
        """The prompt as one string (messages as JSON), to compare prompts."""
        return self.prompt if isinstance(self.prompt, str) else json.dumps(self.prompt, sort_keys=True)

    def to_json(self) -> dict:
        completion = self.completion[0][1] if len(self.completion) == 1 and self.completion[0][0] == "assistant" else [
            {"role": role, "content": text} for role, text in self.completion
        ]  # fmt: skip
        row = {"prompt": self.prompt, "completion": completion, "group": self.group}
        if self.reward is not None:
            row["reward"] = self.reward
        return row


def _messages(value, where: str, name: str) -> list[dict]:
    if not value or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in value):
        raise RolloutFileError(
            f"{where}: '{name}' is a list but not of chat messages ({json.dumps(value)[:120]}); give a string or a "
            'list of {"role": ..., "content": "..."} objects'
        )
    for message in value:
        if not isinstance(message.get("role"), str):
            raise RolloutFileError(f"{where}: a message of '{name}' has no 'role' ({json.dumps(message)[:120]})")
    return value


def parse_row(record, where: str, line: int = 0) -> RolloutRow:
    """One row from a parsed JSON value, or a `RolloutFileError` naming `where` (e.g. `"rollouts.jsonl line 3"`)."""
    if not isinstance(record, dict):
        raise RolloutFileError(f"{where}: expected a JSON object with 'prompt' and 'completion', got {record!r:.80}")
    missing = [name for name in ("prompt", "completion") if name not in record]
    if missing:
        raise RolloutFileError(
            f"{where}: missing field {' and '.join(repr(m) for m in missing)} (fields present: {sorted(record)}); "
            f"every row needs 'prompt' and 'completion' ({EXPORT_HINT})"
        )
    prompt, completion = record["prompt"], record["completion"]
    if isinstance(prompt, list):
        prompt = _messages(prompt, where, "prompt")
    elif not isinstance(prompt, str) or not prompt.strip():
        raise RolloutFileError(f"{where}: 'prompt' must be non-empty text or chat messages, got {prompt!r:.80}")
    if isinstance(completion, str):
        pieces = [("assistant", completion)]
    elif isinstance(completion, list):
        pieces = [(m["role"], m["content"]) for m in _messages(completion, where, "completion")]
    else:
        raise RolloutFileError(f"{where}: 'completion' must be text or chat messages, got {completion!r:.80}")
    if not any(role == "assistant" and text.strip() for role, text in pieces):
        raise RolloutFileError(
            f"{where}: the completion is empty ({json.dumps(completion)[:80]}); there is no reasoning to score, so "
            "drop the row (or fix the export: a multi-turn completion needs 'assistant' messages)"
        )
    group = record.get("group")
    if group is not None and (isinstance(group, bool) or not isinstance(group, (str, int))):
        raise RolloutFileError(f"{where}: 'group' must be a string or an integer, got {group!r:.80}")
    reward = record.get("reward")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise RolloutFileError(f"{where}: 'reward' must be a finite number or absent, got {reward!r:.80}")
        reward = float(reward)
    return RolloutRow(prompt, pieces, "" if group is None else str(group), reward, line, group is not None)


def check_rows(rows: Iterable[RolloutRow], source: str) -> Iterator[RolloutRow]:
    """Check rows across the file as they stream by: groups named by all rows or none, one prompt per group.

    Rows without a group get their prompt as group. Raises `RolloutFileError` at the first inconsistent row, and at
    the end if the rows hold fewer than two prompts.
    """
    first_has_group, prompt_of_group, prompts = None, {}, set()
    for number, row in enumerate(rows, start=1):
        where = f"{source} line {row.line}" if row.line else f"{source} row {number}"
        has_group = row.named_group
        if first_has_group is None:
            first_has_group = has_group
        elif has_group != first_has_group:
            raise RolloutFileError(
                f"{where}: this row {'has' if has_group else 'has no'} 'group' but the first row "
                f"{'has one' if first_has_group else 'has none'}; give every row a group id or none (rows are then "
                "grouped by their prompt)"
            )
        key = row.prompt_key()
        if not has_group:
            row.group = key
        elif prompt_of_group.setdefault(row.group, key) != key:
            raise RolloutFileError(
                f"{where}: group {row.group!r} has two different prompts ({prompt_of_group[row.group][:60]!r} and "
                f"{key[:60]!r}); a group is the samples of one prompt, so give this row its own group id"
            )
        prompts.add(key)
        yield row
    if len(prompts) < 2:
        raise RolloutFileError(
            f"{source}: {len(prompts)} distinct prompt(s); the MI diagnostics compare reasoning across prompts, so "
            "give at least 2 (the paper uses 8 or more prompts x 8 or more samples)"
        )


def read_rollouts(path: str | os.PathLike, max_rows: int | None = None) -> Iterator[RolloutRow]:
    """Stream the rows of a saved-rollouts JSONL file, each checked as it is read (see the module docstring).

    Blank lines are skipped. `max_rows` stops after that many rows (the rest of the file is not read).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise RolloutFileError(f"{path}: no such file; pass a JSONL file of {{prompt, completion}} rows")

    def rows():
        count = 0
        with open(path, encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                if max_rows is not None and count >= max_rows:
                    return
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise RolloutFileError(
                        f"{path} line {line_number}: not JSON ({error.msg} at column {error.colno}: "
                        f"{line.strip()[:80]!r}); write one JSON object per line"
                    ) from None
                count += 1
                yield parse_row(record, f"{path} line {line_number}", line_number)

    return check_rows(rows(), path)


def write_rollouts(path: str | os.PathLike, rows: Iterable[RolloutRow]) -> str:
    """Write rows as JSONL (the format [`read_rollouts`] reads); returns the path."""
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row.to_json(), ensure_ascii=False) + "\n")
    return path
