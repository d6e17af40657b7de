"""The sample log: what the model wrote at a few steps, and what the filter and the MI diagnostics made of it.

`<output_dir>/samples.jsonl` holds one JSON object per line, one line per sampled (or MI-diagnosed) step; the
fields are named in `trl_ragen2.runs.keys` (`SAMPLE_*`) and described in `docs/run_browser.md`. The trainers write
it through `trl_ragen2.grpo.sample_log.SampleRecorder` (main process only); `trl-ragen2 view` reads it. This module
owns the file: its bounds ([`SampleLogSettings`]), the writer ([`SampleLogWriter`], state: the path and a failure
count) and the readers ([`index_samples`], [`read_samples`]). Standard library only.

**Crash rules** (those of `trl_ragen2.runs.checkpoints` for a file that grows): a record is one line, written by one
`write` to a file opened for appending and fsynced before training goes on, so every record is whole, or it is the
last line, cut short by a crash. The writer's first write of a run cuts such an unfinished last line off, so a
resumed run never appends to half a record. The readers skip a last line that does not parse (a write in progress)
silently, any other bad line with a note, and lines over `max_line_bytes` without reading them into memory; when
the step goes back (a resume replays steps), the later records of the earlier attempt are dropped.

**Bounds.** At most `groups` prompt groups per step, at step 1 and every `every_n_steps` steps; each text is cut
to `text_limit` characters (prompts and contexts keep their end, completions their start), with a note saying how
much was cut.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import keys


logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 2**20  # a reader skips longer lines (a step's record is far smaller under the default bounds)
_STEP_AT_START = re.compile(rb'^\{"step":\s*(-?\d+)[,}]')  # the writer puts the step first: no parse to index


@dataclass(frozen=True)
class SampleLogSettings:
    """How much the sample log keeps: `groups` prompt groups per step (0: off), at step 1 and every
    `every_n_steps` optimizer steps, each text cut to `text_limit` characters."""

    groups: int = 4
    every_n_steps: int = 5
    text_limit: int = 4000

    def __post_init__(self):
        for name, minimum in (("groups", 0), ("every_n_steps", 1), ("text_limit", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"sample log {name}={value!r} is invalid; use an integer >= {minimum}")

    def is_due(self, step: int) -> bool:
        """Whether the groups of the batch that trains this 1-indexed optimizer step are logged."""
        return self.groups > 0 and (step == 1 or step % self.every_n_steps == 0)


def pick_groups(scores: Sequence[float], n: int) -> list[int]:
    """`n` groups spread evenly over the ranking by score (highest, lowest and between), in group order, so a
    logged step shows groups the filter kept and groups it dropped; every group when there are at most `n`."""
    order = sorted(range(len(scores)), key=lambda g: (-_finite_or(scores[g], -math.inf), g))
    if len(order) <= n:
        return sorted(order)
    if n <= 0:
        return []
    if n == 1:
        return [order[0]]
    picked = {order[round(i * (len(order) - 1) / (n - 1))] for i in range(n)}
    return sorted(picked)


def _finite_or(value, default: float) -> float:
    return value if isinstance(value, int | float) and math.isfinite(value) else default


def clip_text(text: str, limit: int, keep: str = "start") -> str:
    """`text` cut to `limit` characters, keeping its start (or its `"end"`), with a note saying how much was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "end":
        return f"[... {cut} characters cut by the sample log] " + text[-limit:]
    return text[:limit] + f" [... {cut} characters cut by the sample log]"


def json_safe(value):
    """`value` with every NaN or infinite float replaced by None (strict JSON), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


# ---------------------------------------------------------------------------------------------------------------
# Writing


class SampleLogWriter:
    """Appends records to the sample log, one line each, fsynced; a failed write is cut off again and warned about
    once, and never stops training (the log is a convenience, like `metrics.jsonl`)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.failed_writes = 0
        self._started = False

    def write(self, record: dict) -> bool:
        """Append `record` (its `step` first) as one line; True when it is on disk."""
        record = {keys.SAMPLE_STEP: record[keys.SAMPLE_STEP], "version": keys.SAMPLES_VERSION, **record}
        line = json.dumps(json_safe(record), allow_nan=False, ensure_ascii=False, separators=(",", ":")) + "\n"
        data = line.encode("utf-8", errors="replace")
        size = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self._started:
                from .tracking import cut_unfinished_line  # a killed run's last write (tracking needs transformers)

                cut_unfinished_line(self.path)
                self._started = True
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            return True
        except OSError as error:
            if size is not None:
                with contextlib.suppress(OSError):
                    os.truncate(self.path, size)  # drop the part of the line that was written
            self.failed_writes += 1
            if self.failed_writes == 1:
                logger.warning("could not write the sample log %s (%s); training goes on without it", self.path, error)
            return False


# ---------------------------------------------------------------------------------------------------------------
# Reading


@dataclass
class SampleIndex:
    """Where each step's record is in a sample log: `{step: (offset, size)}` (the latest attempt of each step), and
    notes on the lines skipped."""

    path: Path
    entries: dict[int, tuple[int, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> list[int]:
        return sorted(self.entries)


def _lines(f, limit: int) -> Iterator[tuple[int, bytes | None, int]]:
    """`(offset, line or None when over `limit` bytes, size)` for each line of a binary file."""
    offset = f.tell()
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        size = len(line)
        if size > limit and not line.endswith(b"\n"):
            while True:  # skip the rest of a huge line in bounded chunks
                chunk = f.readline(2**20)
                size += len(chunk)
                if not chunk or chunk.endswith(b"\n"):
                    break
            yield offset, None, size
        else:
            yield offset, line, size
        offset += size


def _step_of(line: bytes) -> int | None:
    match = _STEP_AT_START.match(line)
    if match:
        return int(match.group(1))
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    step = record.get(keys.SAMPLE_STEP) if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def index_samples(path: str | os.PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> SampleIndex:
    """Index a sample log without parsing its records (the step is read from the start of each line).

    A missing file gives an empty index (a run without the sample log: older versions, or the log off).
    """
    index = SampleIndex(Path(path))
    if not index.path.is_file():
        return index
    latest = -math.inf
    with open(index.path, "rb") as f:
        for number, (offset, line, size) in enumerate(_lines(f, max_line_bytes), start=1):
            where = f"{index.path}:{number}"
            if line is None:
                index.notes.append(f"{where} is {size:,} bytes, over the {max_line_bytes:,}-byte limit; skipped")
                continue
            if not line.endswith(b"\n") or not line.strip():
                continue  # only the last line can lack its newline: a write in progress, or a crash's torn line
            step = _step_of(line)
            if step is None:
                index.notes.append(f"{where} is not a sample record; skipped")
                continue
            if step <= latest:  # a resume replays steps: the latest attempt wins
                for later in [s for s in index.entries if s >= step]:
                    del index.entries[later]
            index.entries[step], latest = (offset, size), step
    return index


def read_record(index: SampleIndex, step: int) -> dict | None:
    """The record of one step of an index, or None (with a note) when it no longer parses or is of a newer version."""
    offset, size = index.entries[step]
    with open(index.path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    try:
        record = json.loads(data.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as error:
        index.notes.append(f"{index.path}: the record of step {step} is not JSON ({error.msg}); skipped")
        return None
    if not isinstance(record, dict):
        return None
    version = record.get("version")
    if isinstance(version, int) and version > keys.SAMPLES_VERSION:
        index.notes.append(f"step {step}: sample record version {version} is newer than this reader's; skipped")
        return None
    return record


def read_samples(path: str | os.PathLike, steps: Sequence[int] | None = None, **kwargs) -> tuple[list[dict], list]:
    """`(records in step order, notes)` of a sample log, only the given steps when `steps` is given."""
    index = index_samples(path, **kwargs)
    wanted = index.steps if steps is None else sorted(set(steps) & set(index.entries))
    records = [record for step in wanted if (record := read_record(index, step)) is not None]
    return records, index.notes
