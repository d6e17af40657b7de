"""Early warning of template collapse from a run's logged MI diagnostics: MI falls significantly, entropy stays up.

[`CollapseDetector`] reads one log record at a time (a dict of logged metrics, as in `trainer_state.json`'s
`log_history` or `metrics.jsonl`) and keeps the state the decision needs. Records without the scope's
MI-ZScore-EMA (steps without diagnostics) are skipped. At each diagnostic it compares the current values with those
at the **peak**, the diagnostic with the highest MI-ZScore-EMA so far:

- **MI-ZScore-EMA fell**: it is at most `(1 - min_drop)` times its peak, and (when the intervals are logged, see
  `trl_ragen2.collapse.mi_uncertainty`) its interval lies entirely below the peak's, a drop the resampling cannot
  explain;
- **retrieval fell**: `retrieval_above_chance` is at most `(1 - min_drop)` times its peak, and it is no longer
  significantly above chance (`retrieval_pvalue > pvalue`; when no p-value is logged the drop alone counts);
- **entropy stays up**: the entropy (`cond_entropy` of the scope, or TRL's token `entropy`) is at least
  `entropy_tolerance` times its value at the peak. Collapse *with* falling entropy is low-entropy collapse, which
  entropy already shows; this detector is for the quadrant entropy cannot see.

`require` says which MI signals must hold: `"both"` (default), `"either"`, `"mi_zscore_ema"` or `"retrieval"`. When
they and the entropy condition hold at `patience` consecutive diagnostics, after at least `warmup` diagnostics, the
detector fires (once per run). Pure Python: the same decisions offline on a finished run's records as online.

```python
from trl_ragen2.collapse.detector import CollapseDetector

detector = CollapseDetector(scope="trajectory")
events = [detector.update(record) for record in log_history]
detector.fired_step  # first step where the alarm fired, or None
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..runs.keys import MI_SCOPES, mi_key


REQUIRE = ("both", "either", "mi_zscore_ema", "retrieval")
ENTROPY_KEYS = ("cond_entropy", "entropy")
ALARM_KEYS = ("active", "fired", "consecutive", "mi_drop", "retrieval_drop", "entropy_ratio")  # logged: alarm_key


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class Reading:
    """The values of one diagnostic that the detector uses (None: not logged)."""

    step: int
    mi: float
    mi_low: float | None
    mi_high: float | None
    retrieval: float | None
    pvalue: float | None
    entropy: float | None


@dataclass
class AlarmUpdate:
    """The detector's view after one diagnostic; `metrics()` are the `ragen2/alarm/...` values to log."""

    step: int
    mi_fell: bool
    retrieval_fell: bool
    entropy_up: bool
    consecutive: int
    active: bool
    fired: bool  # the alarm fired at this diagnostic (only once per run)
    mi_drop: float  # 1 - MI-ZScore-EMA / its peak
    retrieval_drop: float  # 1 - retrieval_above_chance / its peak (NaN without retrieval)
    entropy_ratio: float  # entropy / entropy at the MI peak (NaN without entropy)
    peak_step: int

    def metrics(self) -> dict[str, float]:
        return {
            "active": float(self.active),
            "fired": float(self.fired),
            "consecutive": float(self.consecutive),
            "mi_drop": self.mi_drop,
            "retrieval_drop": self.retrieval_drop,
            "entropy_ratio": self.entropy_ratio,
        }


def validate_alarm_settings(owner: str, **settings) -> None:
    """Raise a `ValueError` naming `owner.field`, its value and the fix for any invalid setting."""
    checks = {
        "scope": (lambda v: v in MI_SCOPES, f"choose one of {MI_SCOPES}"),
        "min_drop": (lambda v: 0.0 < v <= 1.0, "use a fraction in (0, 1], e.g. 0.5 (MI halved from its peak)"),
        "pvalue": (lambda v: 0.0 < v < 1.0, "use a significance level in (0, 1), e.g. 0.05"),
        "entropy_tolerance": (lambda v: 0.0 <= v <= 1.0, "use a fraction in [0, 1], e.g. 0.8; 0 ignores entropy"),
        "patience": (lambda v: isinstance(v, int) and v >= 1, "use an integer >= 1 (consecutive diagnostics)"),
        "warmup": (lambda v: isinstance(v, int) and v >= 0, "use an integer >= 0 (diagnostics before arming)"),
        "require": (lambda v: v in REQUIRE, f"choose one of {REQUIRE}"),
        "entropy_key": (lambda v: v in ENTROPY_KEYS, f"choose one of {ENTROPY_KEYS}"),
    }
    for name, value in settings.items():
        ok, fix = checks[name]
        try:
            valid = ok(value)
        except TypeError:
            valid = False
        if not valid:
            raise ValueError(f"{owner}.{name}={value!r} is invalid; {fix}")


class CollapseDetector:
    """Decides, diagnostic after diagnostic, whether a run is sliding into template collapse (module docstring).

    Args:
        scope (`str`, defaults to `"trajectory"`): the MI scope to watch (the paper's correlation with success is on
            the trajectory scope).
        min_drop (`float`, defaults to `0.5`): relative fall from the peak that counts (0.5: halved).
        pvalue (`float`, defaults to `0.05`): retrieval is significantly above chance while its p-value is at most
            this.
        entropy_tolerance (`float`, defaults to `0.8`): entropy "stays up" while at least this share of its value at
            the MI peak; 0 disables the entropy condition.
        patience (`int`, defaults to `2`): consecutive diagnostics the condition must hold.
        warmup (`int`, defaults to `3`): diagnostics seen before the detector may fire (the peak needs a history).
        require (`str`, defaults to `"both"`): which MI signals must hold (module docstring).
        entropy_key (`str`, defaults to `"cond_entropy"`): `"cond_entropy"` (H(Z|X) of the scope) or `"entropy"`
            (TRL's token-level policy entropy).
    """

    def __init__(
        self,
        scope: str = "trajectory",
        min_drop: float = 0.5,
        pvalue: float = 0.05,
        entropy_tolerance: float = 0.8,
        patience: int = 2,
        warmup: int = 3,
        require: str = "both",
        entropy_key: str = "cond_entropy",
    ):
        settings = dict(
            scope=scope,
            min_drop=min_drop,
            pvalue=pvalue,
            entropy_tolerance=entropy_tolerance,
            patience=patience,
            warmup=warmup,
            require=require,
            entropy_key=entropy_key,
        )
        validate_alarm_settings(type(self).__name__, **settings)
        self.settings = settings
        self.scope, self.min_drop, self.pvalue = scope, min_drop, pvalue
        self.entropy_tolerance, self.patience, self.warmup = entropy_tolerance, patience, warmup
        self.require, self.entropy_key = require, entropy_key
        self.reset()

    def reset(self) -> None:
        """Forget the run: no peak, no diagnostics seen, not fired."""
        self.peak: Reading | None = None
        self.best_retrieval: Reading | None = None
        self.seen = 0
        self.consecutive = 0
        self.fired_step: int | None = None
        self.last_step: int | None = None

    def read(self, record: dict) -> Reading | None:
        """The detector's values from one log record, or None when it holds no MI-ZScore-EMA of the scope."""

        def value(name: str) -> float | None:
            return _number(record.get(mi_key(self.scope, name)))

        mi = value("mi_zscore_ema")
        step = record.get("step")
        if mi is None or not isinstance(step, int):
            return None
        entropy_key = mi_key(self.scope, "cond_entropy") if self.entropy_key == "cond_entropy" else "entropy"
        return Reading(
            step=step,
            mi=mi,
            mi_low=value("mi_zscore_ema_ci_low"),
            mi_high=value("mi_zscore_ema_ci_high"),
            retrieval=value("retrieval_above_chance"),
            pvalue=value("retrieval_pvalue"),
            entropy=_number(record.get(entropy_key)),
        )

    def update(self, record: dict) -> AlarmUpdate | None:
        """Fold in one log record; None when it is not a diagnostic of the scope (or replays an earlier step)."""
        now = self.read(record)
        if now is None or (self.last_step is not None and now.step <= self.last_step):
            return None
        self.last_step = now.step
        self.seen += 1
        if self.peak is None or now.mi > self.peak.mi:
            self.peak = now
        if now.retrieval is not None and (
            self.best_retrieval is None or now.retrieval > self.best_retrieval.retrieval
        ):
            self.best_retrieval = now
        peak, best = self.peak, self.best_retrieval

        mi_drop = 1.0 - now.mi / peak.mi if peak.mi > 0 else math.nan
        mi_fell = peak.mi > 0 and now.mi <= (1.0 - self.min_drop) * peak.mi
        if mi_fell and now.mi_high is not None and peak.mi_low is not None:
            mi_fell = now.mi_high < peak.mi_low  # the intervals do not overlap: a real drop

        retrieval_drop, retrieval_fell = math.nan, False
        if now.retrieval is not None and best is not None and best.retrieval > 0:
            retrieval_drop = 1.0 - now.retrieval / best.retrieval
            retrieval_fell = now.retrieval <= (1.0 - self.min_drop) * best.retrieval
            if retrieval_fell and now.pvalue is not None:
                retrieval_fell = now.pvalue > self.pvalue  # no longer significantly above chance

        entropy_ratio = math.nan
        if now.entropy is not None and peak.entropy is not None and peak.entropy > 0:
            entropy_ratio = now.entropy / peak.entropy
        entropy_up = self.entropy_tolerance == 0 or entropy_ratio >= self.entropy_tolerance  # NaN compares False

        signal = {
            "both": mi_fell and retrieval_fell,
            "either": mi_fell or retrieval_fell,
            "mi_zscore_ema": mi_fell,
            "retrieval": retrieval_fell,
        }[self.require]
        condition = signal and entropy_up and self.seen > self.warmup
        self.consecutive = self.consecutive + 1 if condition else 0
        active = self.consecutive >= self.patience
        fired = active and self.fired_step is None
        if fired:
            self.fired_step = now.step
        return AlarmUpdate(
            step=now.step,
            mi_fell=mi_fell,
            retrieval_fell=retrieval_fell,
            entropy_up=entropy_up,
            consecutive=self.consecutive,
            active=active,
            fired=fired,
            mi_drop=mi_drop,
            retrieval_drop=retrieval_drop,
            entropy_ratio=entropy_ratio,
            peak_step=peak.step,
        )


def first_alarm(records, **settings) -> int | None:
    """The step at which a [`CollapseDetector`] with these settings first fires on `records`, or None."""
    detector = CollapseDetector(**settings)
    for record in records:
        detector.update(record)
    return detector.fired_step
