"""What the run browser shows of one run, as JSON-ready data: its curves, its logged steps, its MI retrievals.

[`load_run`] reads a run folder through `trl_ragen2.runs.logs` (the metrics, whichever source it picks) and
`trl_ragen2.runs.samples` (the sample log, absent in runs of older versions or with the log off), and returns a
plain dict that `trl_ragen2.browser.page` embeds in the report. Nothing here keeps state. Long series are thinned to
`max_points` points (each bucket keeps its first, lowest and highest point, so spikes survive) and at most
`max_sample_steps` logged steps are embedded (evenly spread, the last one included), so a page stays small and
fast for a run of any length. [`retrieval_view`] is the MI view's per-chain retrieval, by the rule of
`trl_ragen2.collapse.mi.mi_metrics` (ties count fractionally), so its mean is that function's `retrieval_acc`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from ..plots.panels import PANELS, panel_data
from ..runs import keys
from ..runs.logs import RunLogsNotFoundError, load_run_logs, metric_series
from ..runs.samples import index_samples, read_record


MAX_POINTS = 1500
MAX_SAMPLE_STEPS = 100


def thin(steps: Sequence[int], values: Sequence[float], max_points: int = MAX_POINTS) -> list[list[float]]:
    """`[[step, value], ...]` with at most about `max_points` points: per bucket its first, lowest and highest."""
    points = [[s, v] for s, v in zip(steps, values, strict=True)]
    if len(points) <= max_points:
        return points
    size = math.ceil(len(points) / max(1, max_points // 3))
    kept = []
    for start in range(0, len(points), size):
        bucket = points[start : start + size]
        picks = {id(bucket[0]): bucket[0], id(min(bucket, key=lambda p: p[1])): min(bucket, key=lambda p: p[1])}
        high = max(bucket, key=lambda p: p[1])
        picks[id(high)] = high
        kept += sorted(picks.values(), key=lambda p: p[0])
    if kept[-1] is not points[-1]:
        kept.append(points[-1])
    return kept


def _band(records: list[dict], low_key: str, high_key: str, max_points: int) -> list[list[float]]:
    low = dict(zip(*metric_series(records, low_key), strict=True))
    high = dict(zip(*metric_series(records, high_key), strict=True))
    steps = sorted(set(low) & set(high))
    pairs = thin(steps, [low[s] for s in steps], max_points)
    return [[s, low[s], high[s]] for s, _ in pairs]


def curves(records: list[dict], max_points: int = MAX_POINTS) -> list[dict]:
    """The panels of `trl_ragen2.plots.panels` that have data, with their series, bands and alarm marks."""
    out = []
    for panel, lines in panel_data(records, PANELS):
        if not lines:
            continue
        series = []
        for line, steps, values in lines:
            entry = {"key": line.key, "label": line.label, "role": line.role, "group": line.group or line.key}
            entry["points"] = thin(steps, values, max_points)
            if line.band is not None:
                entry["band"] = _band(records, *line.band, max_points)
                entry["band_label"] = line.band_label
            elif line.std_key is not None:
                std = dict(zip(*metric_series(records, line.std_key), strict=True))
                entry["band"] = [[s, v - std[s], v + std[s]] for s, v in entry["points"] if s in std]
                entry["band_label"] = "± 1 std"
            series.append(entry)
        out.append({"title": panel.title, "ylabel": panel.ylabel, "alarms": panel.marks_alarms, "series": series})
    return out


def regimes(records: list[dict]) -> list[dict]:
    """Per MI scope, the run's path on the reasoning-regime plane (H(Z|X), MI-Est) with the default thresholds."""
    from ..plots.figures import classify_run, regime_points, regime_thresholds

    mi_threshold, entropy_threshold = regime_thresholds()
    out = []
    for scope in keys.MI_SCOPES:
        steps, mi, entropy = regime_points(records, scope)
        if steps:
            labels = [regime for _, regime in classify_run(records, scope)]
            points = [list(p) for p in zip(steps, entropy, mi, labels, strict=True)]
            out.append(
                {
                    "scope": scope,
                    "points": points,
                    "mi_threshold": mi_threshold,
                    "entropy_threshold": entropy_threshold,
                }
            )
    return out


# ---------------------------------------------------------------------------------------------------------------
# The MI view


def _score(value) -> float:
    """A score of the sample log's matrix: null is -inf (a column that cannot produce the chain)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else -math.inf


def retrieval_view(logp: Sequence[Sequence], target: Sequence[int], same: Sequence[Sequence[int]] | None = None):
    """Per chain: `{"own", "best", "hit"}`: its own column, the column it scores highest under (the first of ties),
    and the probability a uniformly tie-broken argmax picks a correct column (its own, or one with an identical
    context), as `mi_metrics` counts it: 1 or 0 without ties."""
    view = []
    for n, row in enumerate(logp):
        scores = [_score(v) for v in row]
        correct = {int(target[n]), *(int(c) for c in (same[n] if same else []))}
        best_correct = max(scores[c] for c in correct)
        top = max(scores)
        best = scores.index(top)
        tied = [c for c, s in enumerate(scores) if s == best_correct]
        if top > best_correct:
            hit = 0.0
        else:
            hit = sum(1 for c in tied if c in correct) / len(tied)
        view.append({"own": int(target[n]), "best": best, "hit": hit})
    return view


def _matrix_view(matrix: dict) -> dict | None:
    """A sample record's MI matrix with its retrieval view, or None when it is not a well-formed matrix."""
    try:
        logp, target = matrix["logp"], matrix["target"]
        same = matrix.get("same") or [[] for _ in target]
        view = retrieval_view(logp, target, same)
        chance = [len({t, *s}) / len(row) for t, s, row in zip(target, same, logp, strict=True)]
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
    matrix = dict(matrix, retrieval=view)
    matrix["retrieval_acc"] = sum(v["hit"] for v in view) / len(view) if view else None
    matrix["retrieval_chance"] = sum(chance) / len(chance) if chance else None
    return matrix


def _clean_record(record: dict) -> dict:
    """A sample record with the parts the page relies on in the expected shape (lists and dicts), the rest as is."""
    groups = record.get(keys.SAMPLE_GROUPS)
    record[keys.SAMPLE_GROUPS] = [g for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []
    mi = record.get(keys.SAMPLE_MI)
    mi = mi if isinstance(mi, dict) else {}
    record[keys.SAMPLE_MI] = {
        scope: view for scope, m in mi.items() if isinstance(m, dict) and (view := _matrix_view(m))
    }
    return record


def spread(steps: Sequence[int], count: int) -> list[int]:
    """At most `count` of `steps`, evenly spread, the first and the last included."""
    if len(steps) <= count:
        return list(steps)
    if count <= 1:
        return [steps[-1]]
    return sorted({steps[round(i * (len(steps) - 1) / (count - 1))] for i in range(count)})


# ---------------------------------------------------------------------------------------------------------------
# One run


def load_run(
    run_dir: str | os.PathLike, *, max_sample_steps: int = MAX_SAMPLE_STEPS, max_points: int = MAX_POINTS
) -> dict:
    """Everything the report shows of one run; raises `RunLogsNotFoundError` when it has neither logs nor samples."""
    run_dir = Path(run_dir)
    notes: list[str] = []
    try:
        logs = load_run_logs(run_dir)
        records, source = logs.records, str(logs.source)
        notes += logs.notes
    except RunLogsNotFoundError as error:
        records, source = [], None
        notes.append(str(error))
    folder = run_dir if run_dir.is_dir() else run_dir.parent
    index = index_samples(folder / keys.SAMPLES_FILE)
    if source is None and not index.entries:
        raise RunLogsNotFoundError(f"{run_dir} has no training logs and no {keys.SAMPLES_FILE}: {notes[0]}")
    steps = spread(index.steps, max_sample_steps)
    if len(steps) < len(index.steps):
        notes.append(f"{len(index.steps)} logged steps; the page holds {len(steps)} (--max-sample-steps)")
    samples = [_clean_record(record) for step in steps if (record := read_record(index, step)) is not None]
    if not index.path.is_file():
        notes.append(f"no {keys.SAMPLES_FILE}: this run has no sample log (an older version, or sample_log_groups=0)")
    notes += index.notes
    alarm_steps, fired = metric_series(records, keys.alarm_key("fired"))
    return {
        "name": run_dir.resolve().name,
        "path": str(run_dir),
        "source": source,
        "last_step": max((r["step"] for r in records if isinstance(r.get("step"), int)), default=None),
        "notes": notes,
        "curves": curves(records, max_points),
        "alarms": [s for s, v in zip(alarm_steps, fired, strict=True) if v > 0],
        "regimes": regimes(records),
        "logged": _logged_mi(records),
        "samples": samples,
    }


def _logged_mi(records: list[dict]) -> dict:
    """`{scope: {step: retrieval_acc}}` as the run logged it, shown beside the MI view's own count."""
    out = {}
    for scope in keys.MI_SCOPES:
        steps, values = metric_series(records, keys.mi_key(scope, "retrieval_acc"))
        if steps:
            out[scope] = {str(s): v for s, v in zip(steps, values, strict=True)}
    return out
