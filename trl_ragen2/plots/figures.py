"""Figures of a RAGEN-2 training run: the reasoning-regime plane of the paper's Figure 1, and the training curves.

- [`plot_regimes`]: MI against the conditional entropy H(Z|X), one point per MI diagnostic step, coloured by step
  and joined in step order, on the four quadrants of [`trl_ragen2.collapse.mi.reasoning_regime`] (diverse reasoning,
  template collapse, compressed reasoning, low-entropy collapse).
- [`plot_training_curves`]: one panel per group of logged metrics (reward, success rate per env and on
  validation, kept fraction of the SNR filter, retrieval accuracy, MI-Est, MI-ZScore(-EMA), entropy, step time);
  panels without data are left out and missing / NaN values are skipped.
- [`plot_run`]: reads a run's logs (see `trl_ragen2.runs.logs`) and writes every PNG it can, also for a run that is
  still training (with the gradient report of `trl_ragen2.plots.gradients` when the run logged one). The command line
  `trl-ragen2 plot OUTPUT_DIR` calls it.

The MI panels shade the bootstrap intervals of `trl_ragen2.collapse.mi_uncertainty` (and, beside the chance line, the
reach of chance: the accuracy shuffled labels reach at the confidence level), and mark the steps where
`trl_ragen2.CollapseAlarm` fired.

The default MI axis is MI-Est of the trajectory scope. Figure 1 of RAGEN-2 places reasoning on the plane of the
mutual information I(X;Z) and H(Z|X); MI-Est is the proxy that estimates I(X;Z) itself, in the same nats per token
as H(Z|X) (MI-Est = H(Z) - H(Z|X) exactly), so one pair of thresholds means the same thing at every step. The
trajectory scope is the one behind the paper's headline correlation (trajectory MI-ZScore vs success, Spearman
+0.39 in Fig. 8). The quadrant thresholds default to those of `reasoning_regime` (0.05 and 0.5 nats per token),
which are heuristic starting points: the paper draws the regimes without numbers. The z-scores and retrieval
accuracy are drawn as curves; on the plane they need a threshold in their own units (`mi_threshold=`).

Figures are `matplotlib.figure.Figure` objects drawn with the Agg canvas, without pyplot: nothing global changes,
and matplotlib is imported on first use only. In Jupyter, run `%matplotlib inline` once (or `display(figure)`) so
that a returned figure is shown as an image.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..runs import keys
from ..runs.keys import MI_SCOPES
from ..runs.logs import as_records, load_run_logs, metric_series
from .canvas import new_figure
from .gradients import GRADIENT_FILE, plot_gradient_report
from .panels import LINE_STYLES, PANELS, Panel, missing_panels, panel_data


logger = logging.getLogger(__name__)

# MI proxies that can go on the regime plane's MI axis: key suffix of ragen2/mi/<scope>/ -> axis label
PROXIES = {
    "mi_est": "MI-Est (nats/token)",
    "mi_seq_est": "MI-Seq-Est (nats)",
    "mi_zscore": "MI-ZScore",
    "mi_zscore_ema": "MI-ZScore-EMA",
    "mi_zscore_seq": "MI-ZScore (sequence)",
    "mi_zscore_ema_seq": "MI-ZScore-EMA (sequence)",
    "retrieval_acc": "Retrieval-Acc",
    "retrieval_above_chance": "Retrieval-Acc above chance",
}
ENTROPIES = {"cond_entropy": "H(Z|X) (nats/token)", "cond_entropy_seq": "H(Z|X) (nats per chain)"}
DEFAULT_SCOPE = "trajectory"
DEFAULT_PROXY = "mi_est"
DEFAULT_ENTROPY = "cond_entropy"
CURVES_FILE = "training_curves.png"
REGIMES_FILE = "regimes_{scope}.png"

# quadrant tints, in the order of trl_ragen2.collapse.mi.REGIMES (diverse, template collapse, compressed, low-entropy
# collapse)
REGIME_COLORS = ("#2ca02c", "#d62728", "#1f77b4", "#7f7f7f")


class MissingMetricsError(ValueError):
    """A figure has nothing to draw: the run logged none of the metrics it needs (listed in the message)."""


# ---------------------------------------------------------------------------------------------------------------
# The regime plane


def regime_thresholds(
    proxy: str = DEFAULT_PROXY,
    entropy: str = DEFAULT_ENTROPY,
    mi_threshold: float | None = None,
    entropy_threshold: float | None = None,
) -> tuple[float, float]:
    """`(mi_threshold, entropy_threshold)` for the regime plane; defaults exist only in MI-Est / H(Z|X) units.

    The defaults are those of [`trl_ragen2.collapse.mi.reasoning_regime`] (nats per token). Any other proxy or entropy
    key needs its threshold passed explicitly, in its own units.
    """
    from ..collapse.mi import DEFAULT_ENTROPY_THRESHOLD, DEFAULT_MI_THRESHOLD

    if proxy not in PROXIES:
        raise ValueError(f"proxy={proxy!r} is not an MI proxy of the regime plane; choose one of {list(PROXIES)}")
    if entropy not in ENTROPIES:
        raise ValueError(f"entropy={entropy!r} is not a conditional entropy key; choose one of {list(ENTROPIES)}")
    if mi_threshold is None:
        if proxy != "mi_est":
            raise ValueError(
                f"proxy={proxy!r} has no default MI threshold (the default {DEFAULT_MI_THRESHOLD} is in MI-Est's "
                f"nats per token); pass mi_threshold (--mi-threshold) in {proxy}'s units, e.g. a value read off the "
                "first diagnostics of a healthy run"
            )
        mi_threshold = DEFAULT_MI_THRESHOLD
    if entropy_threshold is None:
        if entropy != "cond_entropy":
            raise ValueError(
                f"entropy={entropy!r} has no default threshold (the default {DEFAULT_ENTROPY_THRESHOLD} is in "
                "nats per token); pass entropy_threshold (--entropy-threshold) in nats per chain"
            )
        entropy_threshold = DEFAULT_ENTROPY_THRESHOLD
    for name, value in (("mi_threshold", mi_threshold), ("entropy_threshold", entropy_threshold)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(mi_threshold), float(entropy_threshold)


def regime_points(
    history, scope: str = DEFAULT_SCOPE, proxy: str = DEFAULT_PROXY, entropy: str = DEFAULT_ENTROPY
) -> tuple[list[int], list[float], list[float]]:
    """`(steps, mi, cond_entropy)` of the diagnostic steps that logged both values finite, in step order."""
    if scope not in MI_SCOPES:
        raise ValueError(f"scope={scope!r} is not an MI scope; choose one of {MI_SCOPES}")
    records = as_records(history)
    mi = dict(zip(*metric_series(records, keys.mi_key(scope, proxy)), strict=True))
    ent = dict(zip(*metric_series(records, keys.mi_key(scope, entropy)), strict=True))
    steps = sorted(set(mi) & set(ent))
    return steps, [mi[s] for s in steps], [ent[s] for s in steps]


def classify_run(
    history,
    scope: str = DEFAULT_SCOPE,
    proxy: str = DEFAULT_PROXY,
    entropy: str = DEFAULT_ENTROPY,
    mi_threshold: float | None = None,
    entropy_threshold: float | None = None,
) -> list[tuple[int, str]]:
    """`[(step, regime), ...]` for every diagnostic step, by [`trl_ragen2.collapse.mi.reasoning_regime`]."""
    from ..collapse.mi import reasoning_regime

    mi_thr, ent_thr = regime_thresholds(proxy, entropy, mi_threshold, entropy_threshold)
    steps, mi, ent = regime_points(history, scope, proxy, entropy)
    return [
        (step, reasoning_regime(m, h, mi_threshold=mi_thr, entropy_threshold=ent_thr))
        for step, m, h in zip(steps, mi, ent, strict=True)
    ]


def _limits(values: Sequence[float], threshold: float) -> tuple[float, float]:
    low, high = min(*values, threshold), max(*values, threshold)
    pad = 0.12 * (high - low) if high > low else (0.5 * abs(high) or 1.0)  # one value: half its size
    return low - pad, high + pad


def plot_regimes(
    history,
    scope: str = DEFAULT_SCOPE,
    proxy: str = DEFAULT_PROXY,
    entropy: str = DEFAULT_ENTROPY,
    mi_threshold: float | None = None,
    entropy_threshold: float | None = None,
    title: str | None = None,
):
    """The four reasoning regimes of RAGEN-2 Figure 1, with the run's path through them.

    x = H(Z|X) (`ragen2/mi/<scope>/<entropy>`), y = the MI proxy (`ragen2/mi/<scope>/<proxy>`); one point per
    diagnostic step, coloured by step (colour bar), joined in step order. The quadrants are split at the thresholds
    (see [`regime_thresholds`]) and labelled with the regime each one stands for.

    Args:
        history: log records (`list[dict]` with `step`) or a [`~trl_ragen2.runs.logs.RunLogs`].
        scope: `"trajectory"` or `"first_turn"`.
        proxy: a key of [`PROXIES`]; `"mi_est"` by default (see the module docstring for why).
        entropy: `"cond_entropy"` (per token) or `"cond_entropy_seq"`.
        mi_threshold, entropy_threshold: quadrant boundaries; required for a proxy other than `"mi_est"`.

    Returns:
        `matplotlib.figure.Figure`. The joining line is `ax.lines[0]` (x = entropy, y = MI, step order) and the
        scatter `ax.collections[-1]`; the quadrant labels are the texts with gid `"regime-label"`.

    Raises:
        MissingMetricsError: no step logged both values.
    """
    mi_thr, ent_thr = regime_thresholds(proxy, entropy, mi_threshold, entropy_threshold)
    steps, mi, ent = regime_points(history, scope, proxy, entropy)
    if not steps:
        raise MissingMetricsError(
            f"regimes ({scope}): no step logged both {keys.mi_key(scope, proxy)} and {keys.mi_key(scope, entropy)} "
            "(the MI diagnostics run at step 1 and every mi_every_n_steps; is MIDiagnosticsCallback attached and "
            f"the {scope} scope enabled?)"
        )
    from matplotlib.patches import Rectangle

    from ..collapse.mi import COMPRESSED_REASONING, DIVERSE_REASONING, LOW_ENTROPY_COLLAPSE, REGIMES, TEMPLATE_COLLAPSE

    figure = new_figure(figsize=(7.5, 5.5))
    ax = figure.add_subplot()
    (x0, x1), (y0, y1) = _limits(ent, ent_thr), _limits(mi, mi_thr)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    quadrants = {  # regime -> (x range, y range, label anchor, alignment)
        DIVERSE_REASONING: ((ent_thr, x1), (mi_thr, y1), "right", "top"),
        TEMPLATE_COLLAPSE: ((ent_thr, x1), (y0, mi_thr), "right", "bottom"),
        COMPRESSED_REASONING: ((x0, ent_thr), (mi_thr, y1), "left", "top"),
        LOW_ENTROPY_COLLAPSE: ((x0, ent_thr), (y0, mi_thr), "left", "bottom"),
    }
    colors = dict(zip(REGIMES, REGIME_COLORS, strict=True))
    margin_x, margin_y = 0.02 * (x1 - x0), 0.03 * (y1 - y0)
    for regime, ((qx0, qx1), (qy0, qy1), ha, va) in quadrants.items():
        ax.add_patch(Rectangle((qx0, qy0), qx1 - qx0, qy1 - qy0, color=colors[regime], alpha=0.08, lw=0))
        x = qx1 - margin_x if ha == "right" else qx0 + margin_x
        y = qy1 - margin_y if va == "top" else qy0 + margin_y
        label = ax.text(x, y, regime, ha=ha, va=va, color=colors[regime], fontsize=11, weight="bold")
        label.set_gid("regime-label")
    ax.axvline(ent_thr, color="0.35", ls="--", lw=1, label=f"H(Z|X) threshold {ent_thr:g}")
    ax.axhline(mi_thr, color="0.35", ls=":", lw=1, label=f"MI threshold {mi_thr:g}")

    ax.plot(ent, mi, color="0.45", lw=1, zorder=2)  # the run's path, in step order
    points = ax.scatter(ent, mi, c=steps, cmap="viridis", s=40, edgecolors="black", linewidths=0.5, zorder=3)
    figure.colorbar(points, ax=ax, label="step")
    for index in {0, len(steps) - 1}:
        ax.annotate(
            f"step {steps[index]}", (ent[index], mi[index]), textcoords="offset points", xytext=(6, 6), fontsize=8
        )

    regimes = classify_run(history, scope, proxy, entropy, mi_thr, ent_thr)
    ax.set_xlabel(ENTROPIES[entropy])
    ax.set_ylabel(PROXIES[proxy])
    ax.legend(loc="best", fontsize=8, framealpha=0.8)
    scope_name = scope.replace("_", "-")
    ax.set_title(
        title or f"Reasoning regimes, {scope_name} scope\nlast diagnostic (step {steps[-1]}): {regimes[-1][1]}"
    )
    return figure


# ---------------------------------------------------------------------------------------------------------------
# Training curves


def plot_training_curves(history, panels: Sequence[Panel] = PANELS, title: str | None = None):
    """A multi-panel figure of the run's metrics over steps; only panels with data are drawn.

    Each panel is an Axes titled [`Panel.title`]; each line has gid = its logged key and the legend label of its
    [`Series`]. Values that are missing, None or NaN are skipped (a line joins the steps that have values).

    Raises:
        MissingMetricsError: none of the panels has data.
    """
    filled = [(panel, lines) for panel, lines in panel_data(history, panels) if lines]
    if not filled:
        wanted = "; ".join(f"{panel.title} ({panel.looks_for})" for panel in panels)
        raise MissingMetricsError(f"training curves: the logs hold none of the plotted metrics: {wanted}")
    ncols = 1 if len(filled) == 1 else 2 if len(filled) <= 4 else 3
    nrows = math.ceil(len(filled) / ncols)
    figure = new_figure(figsize=(5.2 * ncols, 3.3 * nrows))
    from matplotlib.ticker import MaxNLocator

    axes = figure.subplots(nrows, ncols, squeeze=False).flatten()
    for ax, (panel, lines) in zip(axes, filled, strict=False):
        colors = {}  # colour group -> colour of the default cycle, in order of first appearance
        for series, steps, values in lines:
            group = series.group or series.key
            color = colors.setdefault(group, f"C{len(colors) % 10}")
            (line,) = ax.plot(steps, values, label=series.label, color=color, **LINE_STYLES[series.role])
            line.set_gid(series.key)
            if series.band is not None:
                _shade_band(ax, as_records(history), series, color)
        for series, _, _ in lines:
            if series.std_key is not None:
                _shade_std(ax, as_records(history), series)
        if panel.marks_alarms:
            _mark_alarms(ax, as_records(history))
        ax.set_title(panel.title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers, also in short runs
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(filled) :]:
        figure.delaxes(ax)
    figure.suptitle(title or "Training curves")
    return figure


def _shade_band(ax, records: list[dict], series, color: str) -> None:
    """Shade a series' band (its interval, or chance's reach) at the steps that logged both edges."""
    low = dict(zip(*metric_series(records, series.band[0]), strict=True))
    high = dict(zip(*metric_series(records, series.band[1]), strict=True))
    steps = sorted(set(low) & set(high))
    if steps:
        band = ax.fill_between(
            steps, [low[s] for s in steps], [high[s] for s in steps], color=color, alpha=0.15, lw=0,
            label=series.band_label,
        )  # fmt: skip
        band.set_gid(f"{series.key}:band")


def _mark_alarms(ax, records: list[dict]) -> None:
    """A vertical line at each step where the collapse alarm fired (`ragen2/alarm/fired`)."""
    steps, fired = metric_series(records, keys.alarm_key("fired"))
    for number, step in enumerate(s for s, value in zip(steps, fired, strict=True) if value > 0):
        mark = ax.axvline(step, color="#d62728", ls="--", lw=1.2, label="collapse alarm" if number == 0 else None)
        mark.set_gid("collapse-alarm")


def _shade_std(ax, records: list[dict], series) -> None:
    """Shade a series' value +- its `std_key` at the steps that logged both."""
    mean = dict(zip(*metric_series(records, series.key), strict=True))
    std = dict(zip(*metric_series(records, series.std_key), strict=True))
    steps = sorted(set(mean) & set(std))
    if steps:
        ax.fill_between(
            steps,
            [mean[s] - std[s] for s in steps],
            [mean[s] + std[s] for s in steps],
            alpha=0.15,
            label=f"{series.key} ± std",
        )


# ---------------------------------------------------------------------------------------------------------------
# A whole run


@dataclass
class RunPlots:
    """What [`plot_run_report`] wrote, and why anything is missing."""

    source: Path  # the log file that was read
    paths: list[Path]
    missing: list[str]  # one line per figure or panel without data
    notes: list[str] = field(default_factory=list)  # which source was read and why, damaged sources skipped


def plot_run_report(
    output_dir: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    *,
    scopes: Sequence[str] = MI_SCOPES,
    proxy: str = DEFAULT_PROXY,
    entropy: str = DEFAULT_ENTROPY,
    mi_threshold: float | None = None,
    entropy_threshold: float | None = None,
    dpi: int = 120,
) -> RunPlots:
    """[`plot_run`], returning the log source and the list of missing metrics beside the written paths."""
    regime_thresholds(proxy, entropy, mi_threshold, entropy_threshold)  # bad settings fail before any drawing
    logs = load_run_logs(output_dir)
    run_dir = Path(output_dir) if Path(output_dir).is_dir() else Path(output_dir).parent
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "plots"
    figures, missing = [], []
    try:
        figures.append((CURVES_FILE, plot_training_curves(logs)))
        missing += [
            f"training curves: no {panel.title} panel, nothing logged for {panel.looks_for}"
            for panel in missing_panels(logs)
        ]
    except MissingMetricsError as error:
        missing.append(str(error))
    for scope in scopes:
        try:
            figure = plot_regimes(logs, scope, proxy, entropy, mi_threshold, entropy_threshold)
            figures.append((REGIMES_FILE.format(scope=scope), figure))
        except MissingMetricsError as error:
            missing.append(str(error))

    gradients = plot_gradient_report(logs)  # only runs with grad_report_every_n_steps have it: never "missing"
    if gradients is not None:
        figures.append((GRADIENT_FILE, gradients))
    paths = []
    if figures:
        out_dir.mkdir(parents=True, exist_ok=True)
    for name, figure in figures:
        path = out_dir / name
        figure.savefig(path, dpi=dpi)
        paths.append(path)
    return RunPlots(logs.source, paths, missing, logs.notes)


def plot_run(output_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, **kwargs) -> list[Path]:
    """Write every figure the run's logs allow as PNG files and return their paths.

    Reads `output_dir` with [`~trl_ragen2.runs.logs.load_run_logs`] (final `trainer_state.json`, the newest
    checkpoint's, or a live `metrics.jsonl`) and writes `training_curves.png`, `regimes_<scope>.png` per MI scope and,
    when the run logged the gradient report, `gradient_snr.png` into `out_dir` (default `<output_dir>/plots`). Figures
    or panels without data are skipped and listed in one warning; keyword arguments (`scopes`, `proxy`, `entropy`,
    `mi_threshold`, `entropy_threshold`, `dpi`) go to [`plot_run_report`].

    Raises:
        RunLogsNotFoundError: `output_dir` does not exist or holds no logs.
        ValueError: an unknown proxy / entropy key, or a proxy without a threshold.
    """
    report = plot_run_report(output_dir, out_dir, **kwargs)
    if report.missing:
        logger.warning("Not plotted (from %s):\n  %s", report.source, "\n  ".join(report.missing))
    return report.paths
