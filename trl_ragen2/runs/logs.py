"""Read the metrics a training run logged, and summarise them; standard library only (no matplotlib, no torch).

Any trainer built on transformers' `Trainer` (TRL's, ours) leaves its log calls in one or more of

- `<output_dir>/metrics.jsonl`: one JSON object per log call, written live by
  [`~tracking.MetricsJSONLCallback`];
- `<output_dir>/trainer_state.json`: `log_history`, written by `trainer.save_state()` at the end of a run;
- `<output_dir>/checkpoint-<N>/trainer_state.json`: the same list up to step N (a running run has only these).

Every record is a dict with `step` plus metric keys; evaluation records carry `eval_` prefixes. [`load_run_logs`]
picks one source (the run of the top-level `trainer_state.json` when there is one, see there) and says which and
why in `RunLogs.notes`; a damaged source or line is skipped and named there, never fatal while another source is
intact. [`metric_series`] turns one key into clean `(steps, values)`, skipping records where the key is missing,
`None`, NaN or infinite. JSON Lines files are read line by line; `keep=` keeps only the keys a caller needs (the
summary of a run with a very large `metrics.jsonl` holds only its key metrics in memory).

```python
from trl_ragen2.runs.logs import load_run_logs, summarize, format_summary

logs = load_run_logs("out/webshop-grpo")
steps, kept = logs.series("ragen2/filter/kept_fraction")
print(format_summary(summarize(logs.records)))
```
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import keys


METRICS_FILE = "metrics.jsonl"  # the file tracking.MetricsJSONLCallback writes (the name's one definition)
STATE_FILE = "trainer_state.json"
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
ENV_KEY = re.compile(rf"^(?P<eval>{keys.EVAL_PREFIX})?{re.escape(keys.ENV)}(?P<env>[^/]+)/(?P<metric>[^/]+)$")

EXPECTED_SOURCES = (
    f"{STATE_FILE}, checkpoint-<step>/{STATE_FILE} or {METRICS_FILE} (written by "
    "trl_ragen2.runs.tracking.MetricsJSONLCallback); point at the output_dir of a training run"
)


class RunLogsNotFoundError(FileNotFoundError):
    """No readable metrics in the given place; the message names the path and the files looked for."""


@dataclass
class RunLogs:
    """The log records of one run, the file they came from, and notes on how it was chosen (sources skipped as
    older or damaged, damaged lines)."""

    source: Path
    records: list[dict]
    notes: list[str] = field(default_factory=list)

    @property
    def keys(self) -> set[str]:
        """Every metric name in the records (`step` excluded)."""
        return {key for record in self.records for key in record if key != "step"}

    @property
    def last_step(self) -> int | None:
        """The largest integer `step` in the records, or None."""
        steps = [record["step"] for record in self.records if _is_step(record.get("step"))]
        return max(steps) if steps else None

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """`(steps, values)` of one metric, ready to plot (see `metric_series`)."""
        return metric_series(self.records, key)


def as_records(history) -> list[dict]:
    """The records of a [`RunLogs`], or a list of record dicts as given."""
    return history.records if isinstance(history, RunLogs) else list(history)


def _is_step(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_float(value) -> float | None:
    """A plottable number, or None for missing, None, NaN, infinities, booleans and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def metric_series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """`(steps, values)` of one metric in step order; a step logged twice keeps its last value.

    Records without an integer `step`, and values that are missing, `None`, NaN, infinite or not numbers, are
    skipped, so the result can be plotted directly.
    """
    by_step: dict[int, float] = {}
    for record in records:
        step, value = record.get("step"), _as_float(record.get(key))
        if _is_step(step) and value is not None:
            by_step[step] = value
    steps = sorted(by_step)
    return steps, [by_step[step] for step in steps]


def _drop_replayed(records: list[dict]) -> list[dict]:
    """Keep the latest attempt of every step: when the step goes back (a resume, or a new run appending to the
    same file), the earlier records from that step on are superseded."""
    kept: list[dict] = []
    latest = -1  # highest step among the kept records
    for record in records:
        step = record.get("step")
        if _is_step(step):
            if step < latest:
                kept = [r for r in kept if not _is_step(r.get("step")) or r["step"] < step]
            latest = step
        kept.append(record)
    return kept


def _repaired(line: str) -> dict | None:
    """A record glued to the unfinished start of another (a resumed run appended to a killed run's last line):
    the last `{"step"` starts the intact one."""
    start = line.rfind('{"step"')
    if start <= 0:
        return None
    try:
        record = json.loads(line[start:])
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _slim(record: dict, keep: Callable[[str], bool] | None) -> dict:
    if keep is None:
        return record
    return {key: value for key, value in record.items() if key == "step" or keep(key)}


def _read_jsonl(path: Path, problems: list[str] | None, keep) -> list[dict]:
    if keep is not None:
        keep = functools.cache(keep)  # the same keys on every line: decide each once
    records = []
    pending = None  # a line that did not parse: fatal (strict mode) only if another line follows it
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if pending is not None:
                if problems is None:
                    raise ValueError(pending)
                problems.append(pending.replace("; fix or delete that line", "; skipped"))
                pending = None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                record = _repaired(line)
                if record is None:
                    pending = f"{path}:{number} is not a JSON object ({error.msg}); fix or delete that line"
                    continue
                if problems is not None:
                    problems.append(f"{path}:{number} began with an unfinished record; its intact record was kept")
            if not isinstance(record, dict):
                message = f"{path}:{number} holds a {type(record).__name__}, expected a JSON object per line"
                if problems is None:
                    raise ValueError(message)
                problems.append(message + "; skipped")
                continue
            records.append(_slim(record, keep))
    # a last line that does not parse is the line being written right now: skipped silently
    return _drop_replayed(records)


def read_log_file(
    path: str | os.PathLike, problems: list[str] | None = None, keep: Callable[[str], bool] | None = None
) -> list[dict]:
    """Records of one file: a `trainer_state.json` (its `log_history`) or a JSON Lines metrics file.

    JSON Lines are read line by line. Blank lines and a truncated last line (a write in progress) are skipped; a
    line that starts with an unfinished record followed by an intact one keeps the intact one. Another malformed
    line raises `ValueError` with its line number, or, when a `problems` list is given, is skipped and described
    there. `keep(key)` selects the metric keys to keep (`step` always stays).
    """
    path = Path(path)
    if path.suffix == ".jsonl":
        return _read_jsonl(path, problems, keep)
    try:
        state = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error.msg} at line {error.lineno})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ValueError(f"{path} has no 'log_history' list; expected a transformers trainer_state.json")
    return [_slim(record, keep) for record in history if isinstance(record, dict)]


def find_log_sources(output_dir: str | os.PathLike) -> list[Path]:
    """The metric files of a run, in tie-break order: top-level state, JSONL log, newest checkpoint's state."""
    output_dir = Path(output_dir)
    sources = [output_dir / STATE_FILE, output_dir / METRICS_FILE]
    checkpoints = []
    for child in output_dir.iterdir():
        match = CHECKPOINT_PATTERN.match(child.name)
        if match and (child / STATE_FILE).is_file():
            checkpoints.append((int(match.group(1)), child / STATE_FILE))
    if checkpoints:
        sources.append(max(checkpoints)[1])
    return [source for source in sources if source.is_file()]


def load_run_logs(path: str | os.PathLike, keep: Callable[[str], bool] | None = None) -> RunLogs:
    """The log records of a run: `path` is its output_dir, or one `trainer_state.json` / `.jsonl` file.

    Sources ([`find_log_sources`]) that cannot be read are skipped and named in `notes`. When the folder has a
    top-level `trainer_state.json` (written at the end of a run), that run is the one described: another source
    replaces it only if it was written later and reaches a higher step (the same run resumed and still
    training), so the checkpoints or log of an older run in the same folder are never taken for it. Without one,
    the source whose records reach the highest step wins (a live `metrics.jsonl` beats a checkpoint that is a few
    steps old); ties go to the earlier source in that order. `keep` is passed to [`read_log_file`].

    Raises:
        RunLogsNotFoundError: `path` does not exist, or holds none of the expected files, or they are all empty.
        ValueError: every source found is damaged (the message names each one).
    """
    path = Path(path)
    if not path.exists():
        raise RunLogsNotFoundError(f"{path} does not exist; expected a training output_dir holding {EXPECTED_SOURCES}")
    sources = [path] if path.is_file() else find_log_sources(path)
    if not sources:
        raise RunLogsNotFoundError(f"no training logs in {path}: expected {EXPECTED_SOURCES}")
    notes: list[str] = []
    candidates: list[RunLogs] = []
    for source in sources:
        problems: list[str] = []
        try:
            logs = RunLogs(source, read_log_file(source, problems, keep))
        except (ValueError, OSError) as error:
            notes.append(f"skipped {source}: {error}")
            continue
        notes += problems
        if logs.records:
            candidates.append(logs)
    if not candidates:
        damaged = [note for note in notes if note.startswith("skipped ")]
        if damaged:
            raise ValueError(f"no readable training logs in {path}: " + "; ".join(damaged))
        raise RunLogsNotFoundError(
            f"the training logs in {path} ({', '.join(str(s) for s in sources)}) hold no records yet; "
            "a run logs every `logging_steps` optimizer steps"
        )
    final = next((logs for logs in candidates if logs.source == path / STATE_FILE), None)
    best = final
    for logs in candidates:
        if final is not None and logs is not final:
            newer = logs.source.stat().st_mtime > final.source.stat().st_mtime
            if not newer or (logs.last_step or -1) <= (final.last_step or -1):
                if (logs.last_step or -1) > (final.last_step or -1):
                    notes.append(
                        f"ignored {logs.source} (step {logs.last_step}): older than {final.source}, the run's final "
                        "state; it belongs to an earlier run in the same folder"
                    )
                continue
        if best is None or (logs.last_step or -1) > (best.last_step or -1):
            best = logs
    if final is not None:
        reason = "the run's final state" if best is final else f"the run resumed after {final.source} was written"
    else:
        reason = "the source reaching the highest step"
    notes.insert(0, f"described: {best.source} ({reason})")
    best.notes = notes
    return best


def env_names(logged, metric: str) -> list[str]:
    """Environments that logged `ragen2/env/<env>/<metric>` (train or `eval_`), sorted.

    For mixed-environment batches the rollout also logs the pooled pseudo-env `all`; it is left out when only one
    real env logged the metric, since it then repeats that env.
    """
    names = set()
    for key in logged:
        match = ENV_KEY.match(key)
        if match and match["metric"] == metric:
            names.add(match["env"])
    if len(names - {keys.POOLED_ENV}) == 1:
        names.discard(keys.POOLED_ENV)
    return sorted(names)


# ---------------------------------------------------------------------------------------------------------------
# Summary


# The MI diagnostics' keys in the summary, per scope, with their direction
SUMMARY_MI_KEYS = {
    "retrieval_acc": "max",
    "retrieval_chance": None,
    "mi_est": "max",
    "mi_zscore_ema": "max",
    "cond_entropy": None,
}


@dataclass
class SummaryRow:
    """One metric of [`summarize`]: `best` is the max or min per the metric's direction, None if it has none."""

    key: str
    count: int
    last: float
    last_step: int
    mean: float
    best: float | None
    best_step: int | None


def summary_keys(logged) -> list[tuple[str, str | None]]:
    """The key metrics present in `logged` (keys), in display order, with their direction ("max", "min" or None)."""
    wanted: list[tuple[str, str | None]] = [
        ("reward", "max"),
        ("eval_reward", "max"),
        (keys.FILTER_KEPT_FRACTION, None),
        (keys.FILTER_KEPT_VARIANCE_SHARE, None),
        (keys.FILTER_EMPTY_STEPS, None),
    ]
    for env in env_names(logged, "success_rate"):
        success = keys.env_key(env, "success_rate")
        wanted += [(success, "max"), (keys.evaluation(success), "max")]
    for scope in keys.MI_SCOPES:
        wanted += [(keys.mi_key(scope, name), direction) for name, direction in SUMMARY_MI_KEYS.items()]
    wanted += [("entropy", None), ("step_time", "min")]
    return [(key, direction) for key, direction in wanted if key in logged]


def is_summary_key(key: str) -> bool:
    """Whether [`summarize`] (or the summary's regime line) can use the key: a `keep=` for [`load_run_logs`]."""
    if key in ("reward", "eval_reward", "entropy", "step_time") or key.startswith(keys.FILTER):
        return True
    match = ENV_KEY.match(key)
    if match:
        return match["metric"] == "success_rate"
    parts = key.removeprefix(keys.MI).split("/")  # <scope>/<name>
    return key.startswith(keys.MI) and len(parts) == 2 and parts[1] in SUMMARY_MI_KEYS


def summarize(records: list[dict]) -> list[SummaryRow]:
    """Last, mean and best values of the key metrics (reward, success rates, kept fraction, MI, entropy, step
    time) that the records hold at least one finite value of."""
    logged = {key for record in records for key in record}
    rows = []
    for key, direction in summary_keys(logged):
        steps, values = metric_series(records, key)
        if not values:
            continue
        best = best_step = None
        if direction is not None:
            pick = max if direction == "max" else min
            best_step, best = pick(zip(steps, values, strict=True), key=lambda pair: pair[1])
        rows.append(SummaryRow(key, len(values), values[-1], steps[-1], sum(values) / len(values), best, best_step))
    return rows


def format_summary(rows: list[SummaryRow], header: str | None = None) -> str:
    """A fixed-width text table of [`summarize`] rows (one line per metric)."""
    table = [("metric", "n", "last", "@step", "mean", "best", "@step")]
    for row in rows:
        best = ("-", "-") if row.best is None else (f"{row.best:.4g}", str(row.best_step))
        table.append((row.key, str(row.count), f"{row.last:.4g}", str(row.last_step), f"{row.mean:.4g}", *best))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [header] if header else []
    for line in table:
        cells = [line[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
