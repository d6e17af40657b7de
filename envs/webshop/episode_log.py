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
| `action` | the action text as received (null on the reset line) |
| `observation` | the page text after the action (WebShop "simple" mode) |
| `reward` | the reward of this step (RL reward: 1/0 success by default) |
| `done` | whether the episode ended (a purchase) |
| `info` | the step's `info`: `action_is_valid`, `success`, the page, and on a purchase the score parts |
| `time` | Unix time of the step |

`read_episodes(path)` groups a log's lines by episode, in order, for replay.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from .goals import Goal


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
        "action": action,
        "observation": observation,
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
        with self._lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def read_episodes(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Episode id -> its records sorted by step; lines that are not valid records are skipped."""
    episodes: dict[str, list[dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "episode" in record and "step" in record:
                episodes.setdefault(str(record["episode"]), []).append(record)
    for records in episodes.values():
        records.sort(key=lambda r: r["step"])
    return episodes
