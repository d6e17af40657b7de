"""WebShop episode logs: one JSON object per line per step, written by the environment and by the web UI alike.

Record fields:

| field | meaning |
|---|---|
| `episode` | episode id (text), the same on every line of one episode |
| `catalog` | catalogue name (`webshop-small-1k`, `procedural-1000-seed0`, ...) |
| `split`, `seed` | the split and seed that picked the goal (`seed` is null for a goal chosen by id) |
| `goal_id`, `goal_asin` | the goal's index in the catalogue's goal list and its target product |
| `instruction` | the goal's instruction text |
| `step` | 0 for the reset line, then 1, 2, ... per action |
| `action` | the action text as received, cut to its first 1,000 characters (null on the reset line) |
| `action_chars` | the length of an action that was cut (present only then) |
| `observation` | the page text after the action (WebShop "simple" mode), cut to 20,000 characters |
| `reward` | the reward of this step (RL reward: 1/0 success by default) |
| `done` | whether the episode ended (a purchase) |
| `info` | the step's `info`: `action_is_valid`, `success`, the page, and on a purchase the score parts |
| `time` | Unix time of the step |

Lines are bounded whatever the action (a megabyte action logs its first 1,000 characters and its length), and
any text can be logged: a lone surrogate is written as its JSON escape (`\\ud800`), so the line stays valid JSON
and UTF-8.

`read_episodes(path)` groups a log's lines by episode, in order, for replay. Logs are files of any origin, so it
reads at most `MAX_READ_CHARS` characters, skips lines that are too long, not JSON or not records, and gives every
record the expected types (see [`clean_record`]); it raises only when the file cannot be opened.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

from .goals import Goal


MAX_LOGGED_ACTION_CHARS = 1000  # the engine rejects longer actions; their first characters are enough to see why
MAX_LOGGED_OBSERVATION_CHARS = 20_000  # WebShop pages are a few thousand characters
MAX_LINE_CHARS = 1 << 20  # longer lines are skipped when reading
MAX_READ_CHARS = 64 << 20  # a log is read up to this many characters (the first lines of a larger one)


def step_record(
    *,
    episode: str,
    catalog: str,
    split: str | None,
    seed: int | None,
    goal: Goal,
    step: int,
    action: str | None,
    observation: str,
    reward: float,
    done: bool,
    info: dict[str, Any],
) -> dict[str, Any]:
    """One log line (see the module docstring for the fields)."""
    return {
        "episode": episode,
        "catalog": catalog,
        "split": split,
        "seed": seed,
        "goal_id": goal.goal_id,
        "goal_asin": goal.asin,
        "instruction": goal.instruction_text,
        "step": step,
        "action": action if action is None else action[:MAX_LOGGED_ACTION_CHARS],
        **({"action_chars": len(action)} if action is not None and len(action) > MAX_LOGGED_ACTION_CHARS else {}),
        "observation": observation[:MAX_LOGGED_OBSERVATION_CHARS],
        "reward": float(reward),
        "done": bool(done),
        "info": info,
        "time": time.time(),
    }


class EpisodeLog:
    """Appends step records to a JSONL file (thread-safe; each line is flushed as written)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` as one JSON line (values JSON cannot hold are written as strings)."""
        line = json.dumps(record, ensure_ascii=False, default=str)
        # JSON puts text only inside strings, so a lone surrogate written as "\\udXXX" is a valid JSON escape.
        with self._lock, open(self.path, "a", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(line + "\n")


def read_episodes(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Episode id -> its records sorted by step; lines that are not valid records are skipped (see the module
    docstring). Raises `OSError` only when the file cannot be opened."""
    episodes: dict[str, list[dict[str, Any]]] = {}
    for line in _bounded_lines(Path(path)):
        try:
            record = clean_record(json.loads(line))
        except (ValueError, RecursionError):  # not JSON, or nested past the decoder's limit
            continue
        if record is not None:
            episodes.setdefault(record["episode"], []).append(record)
    for records in episodes.values():
        records.sort(key=lambda r: r["step"])
    return episodes


def _bounded_lines(path: Path):
    """The lines in the first `MAX_READ_CHARS` characters of `path` (bytes that are not UTF-8 replaced), except
    lines longer than `MAX_LINE_CHARS`."""
    # Opened without blocking and checked before reading: a FIFO or device named like a log must not hang replay.
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OSError(f"{path} is not a regular file")
    with open(descriptor, encoding="utf-8", errors="replace", newline="\n") as handle:
        read = 0
        while read < MAX_READ_CHARS:
            line = handle.readline(MAX_LINE_CHARS + 1)
            if not line:
                return
            read += len(line)
            if len(line) > MAX_LINE_CHARS:  # skip the rest of an overlong line
                while line and not line.endswith("\n") and read < MAX_READ_CHARS:
                    line = handle.readline(MAX_LINE_CHARS)
                    read += len(line)
                continue
            yield line


_TEXT_FIELDS = ("catalog", "split", "goal_asin", "instruction", "action", "observation")


def clean_record(record: Any) -> dict[str, Any] | None:
    """A log line's record with the types replay relies on, or None when it is not a step record.

    A record needs `episode` (text or number) and an integer `step`. `info` becomes a dict (`{}` unless it is
    one), `reward` a float or None, `done` a bool, the text fields text or None; every string is made valid
    Unicode (a lone surrogate becomes `?`) so pages can always be rendered.
    """
    if not isinstance(record, dict):
        return None
    episode, step = record.get("episode"), record.get("step")
    if isinstance(episode, bool) or not isinstance(episode, (str, int)) or not str(episode):
        return None
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    cleaned = _valid_unicode(record)
    cleaned["episode"], cleaned["step"] = str(cleaned["episode"]), step
    if not isinstance(cleaned.get("info"), dict):
        cleaned["info"] = {}
    reward = cleaned.get("reward")
    cleaned["reward"] = float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None
    cleaned["done"] = cleaned.get("done") is True
    for field in _TEXT_FIELDS:
        value = cleaned.get(field)
        cleaned[field] = None if value is None else str(value)
    return cleaned


def _valid_unicode(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_valid_unicode(str(key)): _valid_unicode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_valid_unicode(item) for item in value]
    return value
