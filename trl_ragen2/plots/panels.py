"""What the training-curve figure of `trl_ragen2.plots.figures` draws: its panels, their lines, and the data a run has.

A [`Panel`] groups the logged keys that share an axis (reward, success rate per env, kept fraction, MI proxies per
scope, ...); its `series(keys)` lists the [`Series`] (lines) it can draw from the keys a run logged, so per-env and
per-scope lines appear for whatever envs and scopes the run has. Standard library only: no matplotlib here.

```python
from trl_ragen2.plots.panels import missing_panels

[panel.title for panel in missing_panels(records)]  # what the run has not logged (yet)
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..runs.keys import (
    FILTER_KEPT_FRACTION,
    FILTER_KEPT_VARIANCE_SHARE,
    MI_SCOPES,
    PPO_EXPLAINED_VARIANCE,
    PPO_VALUE_LOSS,
    env_key,
    evaluation,
    mi_key,
    text_key,
)
from ..runs.logs import as_records, env_names, metric_series


@dataclass(frozen=True)
class Series:
    """One line of a panel: a logged key, its legend label, its role ("train", "eval" or "reference", which set the
    line style), its colour group (lines of one env or one MI scope share a colour; default: the key), and
    optionally the key of its standard deviation, shaded as a band of one std around the line, or a band: the keys
    of its lower and upper edge, shaded where both are logged (a confidence interval, or the reach of chance)."""

    key: str
    label: str
    role: str = "train"
    group: str | None = None
    std_key: str | None = None
    band: tuple[str, str] | None = None
    band_label: str | None = None


@dataclass(frozen=True)
class Panel:
    """One panel of the training curves: `series(keys)` lists the lines it can draw from a run's logged keys."""

    title: str
    ylabel: str
    looks_for: str  # shown when the panel has no data
    series: Callable[[set[str]], list[Series]] = field(repr=False)
    optional: bool = False  # only some runs log it (PPO, env rollouts): not reported as missing
    marks_alarms: bool = False  # a vertical line at each step where the collapse alarm fired


def _fixed(*series: Series) -> Callable[[set[str]], list[Series]]:
    return lambda keys: list(series)


def _per_env(metric: str) -> Callable[[set[str]], list[Series]]:
    def series(keys):
        lines = []
        for env in env_names(keys, metric):
            key = env_key(env, metric)
            lines.append(Series(key, f"{env} (train)", "train", env))
            lines.append(Series(evaluation(key), f"{env} (validation)", "eval", env))
        return lines

    return series


def _action_validity(keys: set[str]) -> list[Series]:
    """Valid-action rate per env (train and validation), and the train format-error rate as a reference."""
    lines = _per_env("valid_action_rate")(keys)
    for env in env_names(keys, "format_error_rate"):
        key = env_key(env, "format_error_rate")
        lines.append(Series(key, f"{env} format errors (train)", "reference", env))
    return lines


def _per_scope(*metrics: tuple) -> Callable[[set[str]], list[Series]]:
    """Lines for `ragen2/mi/<scope>/<metric>` in both scopes; each metric is (key suffix, label, role) and optionally
    the key suffixes of its band's edges and the band's label."""

    def series(keys):
        lines = []
        for scope in MI_SCOPES:
            for metric, label, role, *band in metrics:
                edges = (mi_key(scope, band[0][0]), mi_key(scope, band[0][1])) if band else None
                shown = scope.replace("_", "-")
                band_label = f"{band[1]} ({shown})" if band else None
                key = mi_key(scope, metric)
                lines.append(Series(key, f"{label} ({shown})", role, scope, band=edges, band_label=band_label))
        return lines

    return series


def _interval(metric: str) -> tuple[tuple[str, str], str]:
    """The bootstrap interval of an MI proxy as a band (see `trl_ragen2.collapse.mi_uncertainty`)."""
    return (f"{metric}_ci_low", f"{metric}_ci_high"), "95% interval"


PANELS = (
    Panel(
        "Reward",
        "mean reward",
        "reward, eval_reward",
        _fixed(
            Series("reward", "train", "train", "reward", std_key="reward_std"),
            Series("eval_reward", "validation", "eval", "reward"),
        ),
    ),
    Panel("Success rate", "success rate", env_key("<env>", "success_rate"), _per_env("success_rate")),
    Panel(
        "Episode return",
        "mean return",
        env_key("<env>", "mean_return"),
        _per_env("mean_return"),
        optional=True,
    ),
    Panel("Valid actions", "rate", env_key("<env>", "valid_action_rate"), _action_validity, optional=True),
    Panel("Turns per episode", "turns", env_key("<env>", "turns"), _per_env("turns"), optional=True),
    Panel(
        "SNR filter: kept fraction",
        "fraction",
        FILTER_KEPT_FRACTION,
        _fixed(
            Series(FILTER_KEPT_FRACTION, "prompt groups kept"),
            Series(FILTER_KEPT_VARIANCE_SHARE, "reward-variance share kept", "reference"),
        ),
    ),
    Panel(
        "Retrieval accuracy",
        "accuracy",
        mi_key("<scope>", "retrieval_acc"),
        _per_scope(
            ("retrieval_acc", "Retrieval-Acc", "train", *_interval("retrieval_acc")),
            ("retrieval_chance", "chance", "reference", ("retrieval_chance", "retrieval_null_high"), "chance reach"),
        ),
        marks_alarms=True,
    ),
    Panel(
        "MI-Est",
        "nats/token",
        mi_key("<scope>", "mi_est"),
        _per_scope(("mi_est", "MI-Est", "train", *_interval("mi_est"))),
        marks_alarms=True,
    ),
    Panel(
        "MI-ZScore",
        "z-score",
        mi_key("<scope>", "mi_zscore(_ema)"),
        _per_scope(
            ("mi_zscore", "MI-ZScore", "train"),
            ("mi_zscore_ema", "MI-ZScore-EMA", "reference", *_interval("mi_zscore_ema")),
        ),
        marks_alarms=True,
    ),
    Panel(
        "Reasoning text",
        "score",
        text_key("..."),
        _fixed(
            Series(text_key("distinct_2"), "distinct-2"),
            Series(text_key("self_bleu_within"), "self-BLEU within a prompt"),
            Series(text_key("self_bleu_across"), "self-BLEU across prompts"),
            Series(text_key("cross_prompt_overlap"), "cross-prompt trigram overlap", "reference"),
        ),
        optional=True,
    ),
    Panel(
        "Entropy",
        "nats/token",
        "entropy, " + mi_key("<scope>", "cond_entropy"),
        lambda keys: (
            [Series("entropy", "token entropy (policy)")] + _per_scope(("cond_entropy", "H(Z|X)", "train"))(keys)
        ),
        marks_alarms=True,
    ),
    Panel(
        "Step time",
        "seconds",
        "step_time",
        lambda keys: (
            [Series("step_time", "optimizer step")] + _per_scope(("time_s", "MI diagnostics", "reference"))(keys)
        ),
    ),
    Panel(
        "PPO critic: value loss",
        "loss",
        PPO_VALUE_LOSS,
        _fixed(
            Series(PPO_VALUE_LOSS, "value loss"),
            Series(evaluation(PPO_VALUE_LOSS), "validation", "eval"),
        ),
        optional=True,
    ),
    Panel(
        "PPO critic: explained variance",
        "explained variance",
        PPO_EXPLAINED_VARIANCE,
        _fixed(Series(PPO_EXPLAINED_VARIANCE, "explained variance")),
        optional=True,
    ),
)
LINE_STYLES = {  # role -> Line2D keyword arguments
    "train": dict(ls="-", marker="o", markersize=2.5, lw=1.4),
    "eval": dict(ls="--", marker="s", markersize=4, lw=1.2),
    "reference": dict(ls=":", marker=".", markersize=3, lw=1.2),
}


def panel_data(history, panels: Sequence[Panel] = PANELS) -> list[tuple[Panel, list[tuple[Series, list, list]]]]:
    """For each panel: the series that have at least one finite value, with their `(steps, values)`."""
    records = as_records(history)
    keys = {key for record in records for key in record}
    result = []
    for panel in panels:
        lines = []
        for series in panel.series(keys):
            steps, values = metric_series(records, series.key) if series.key in keys else ([], [])
            if values:
                lines.append((series, steps, values))
        result.append((panel, lines))
    return result


def missing_panels(history, panels: Sequence[Panel] = PANELS) -> list[Panel]:
    """The non-optional panels the run has no data for (all their keys missing, None or NaN)."""
    return [panel for panel, lines in panel_data(history, panels) if not lines and not panel.optional]
