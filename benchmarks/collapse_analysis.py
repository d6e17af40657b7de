"""The pre-registered analysis of the controlled template-collapse experiment (`docs/template_collapse_experiment.md`,
"Pre-registered plan"): endpoints per run, paired contrasts over seeds, Holm's correction, the equivalence test,
the verdict and the power check. Pure Python (standard library only): every number the report prints comes from
these functions, and `tests/test_collapse_analysis.py` checks them against hand-computed and tabulated values.

The unit of replication is the seed: each run gives one number per endpoint, and arms are compared by the paired
difference over the seeds both arms finished.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


# ---------------------------------------------------------------------------------------------------------------
# The plan's constants (fixed before the first run of seeds 5-34; see the docs page)

ENDPOINT_STEPS = (25, 50)  # the primary endpoint averages the diagnostics logged at steps 25..50 inclusive
SUCCESS_LAST_STEPS = 10  # success: mean over the last 10 optimizer steps
ALPHA = 0.05  # family-wise, two-sided, over the three primary contrasts (Holm)
EQUIVALENCE_MARGIN = 0.1  # nats/token: TOST margin on filtered - unfiltered MI-Est
SUCCESS_MARGIN = 0.05  # non-inferiority margin on success: filtered no lower than unfiltered - 0.05
POWER_TARGET = 0.8
COLLAPSE_RETRIEVAL_DROP = 0.1  # a seed "collapsed": Retrieval-Acc fell by >= 0.1 from step 1 while H(Z|X) did not fall

# (name, minuend arm, subtrahend arm): the three primary contrasts, paired by seed
CONTRASTS = (
    ("filtered - unfiltered", "filtered", "unfiltered"),
    ("filtered - random_matched", "filtered", "random_matched"),
    ("skip_matched - unfiltered", "skip_matched", "unfiltered"),
)


# ---------------------------------------------------------------------------------------------------------------
# Student's t, exactly (regularised incomplete beta by Lentz's continued fraction)


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, dof: int) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom."""
    tail = 0.5 * regularized_beta(dof / (dof + t * t), dof / 2.0, 0.5)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(q: float, dof: int) -> float:
    """The q-quantile of Student's t (bisection on `t_cdf`, to 1e-12)."""
    low, high = -1e3, 1e3
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, dof) < q:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def normal_quantile(q: float) -> float:
    return statistics.NormalDist().inv_cdf(q)


# ---------------------------------------------------------------------------------------------------------------
# Endpoints of one run


def series_mean(series: list, low: int, high: int) -> float:
    """Mean of the `(step, value)` pairs with `low <= step <= high`; NaN when there are none."""
    values = [value for step, value in series if low <= step <= high]
    return statistics.fmean(values) if values else math.nan


def run_endpoints(result: dict) -> dict[str, float]:
    """The plan's per-run numbers: MI proxies averaged over the diagnostics at steps 25-50, success over the last 10
    steps, the step-1 values, and the "collapsed" flag (1.0 or 0.0)."""
    series = result["series"]
    low, high = ENDPOINT_STEPS
    out = {name: series_mean(series.get(name, []), low, high) for name in ("mi_est", "retrieval_acc", "cond_entropy")}
    for name in ("success", "named_input"):  # named_input: the recall task's turn 1 names the input
        tail = [value for _, value in series.get(name, [])][-SUCCESS_LAST_STEPS:]
        out[name] = statistics.fmean(tail) if tail else math.nan
    for name in ("mi_est", "retrieval_acc", "cond_entropy"):
        first = series.get(name, [])
        out[f"{name}_step1"] = first[0][1] if first else math.nan
    out["collapsed"] = float(
        out["retrieval_acc"] <= out["retrieval_acc_step1"] - COLLAPSE_RETRIEVAL_DROP
        and out["cond_entropy"] >= out["cond_entropy_step1"]
    )
    return out


# ---------------------------------------------------------------------------------------------------------------
# Paired contrasts


@dataclass(frozen=True)
class Paired:
    """A paired difference over seeds: its mean, SD, t statistic, two-sided p and 95% / 90% t intervals."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    sd: float
    t: float
    p: float
    ci95: tuple[float, float]
    ci90: tuple[float, float]

    @property
    def n(self) -> int:
        return len(self.differences)


def paired(minuend: dict[int, float], subtrahend: dict[int, float]) -> Paired:
    """`minuend[s] - subtrahend[s]` over the seeds both have (NaN values dropped), with a paired t test."""
    seeds = tuple(s for s in sorted(set(minuend) & set(subtrahend)) if not math.isnan(minuend[s] - subtrahend[s]))
    diffs = tuple(minuend[s] - subtrahend[s] for s in seeds)
    n = len(diffs)
    if n == 0:
        return Paired(seeds, diffs, math.nan, math.nan, math.nan, math.nan, (math.nan,) * 2, (math.nan,) * 2)
    mean = statistics.fmean(diffs)
    if n < 2:
        return Paired(seeds, diffs, mean, math.nan, math.nan, math.nan, (math.nan,) * 2, (math.nan,) * 2)
    sd = statistics.stdev(diffs)
    se = sd / math.sqrt(n)
    if se == 0.0:
        t = math.inf if mean else 0.0
        p = 0.0 if mean else 1.0
    else:
        t = mean / se
        p = 2.0 * (1.0 - t_cdf(abs(t), n - 1))
    q95, q90 = t_quantile(0.975, n - 1), t_quantile(0.95, n - 1)
    return Paired(seeds, diffs, mean, sd, t, p, (mean - q95 * se, mean + q95 * se), (mean - q90 * se, mean + q90 * se))


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (each at most 1, never below an earlier one in the order)."""
    order = sorted(pvalues, key=lambda name: pvalues[name])
    adjusted, running = {}, 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * pvalues[name]))
        adjusted[name] = running
    return adjusted


def equivalent(contrast: Paired, margin: float = EQUIVALENCE_MARGIN) -> bool:
    """Two one-sided tests at 5%: the 90% interval lies strictly inside (-margin, +margin)."""
    low, high = contrast.ci90
    return -margin < low and high < margin


def non_inferior(contrast: Paired, margin: float = SUCCESS_MARGIN) -> bool:
    """One-sided 5% test: the lower end of the 90% interval is above -margin."""
    return contrast.ci90[0] > -margin


# ---------------------------------------------------------------------------------------------------------------
# The verdict


def verdict(contrasts: dict[str, Paired], success: Paired, alpha: float = ALPHA) -> tuple[str, str]:
    """The plan's verdict and the reason, from the three primary MI-Est contrasts and the success contrast
    (filtered - unfiltered). Evaluated in this order:

    1. *refutes*: filtered - unfiltered is equivalent to 0 within the margin (90% interval inside +-0.1);
    2. *partial*: skip_matched - unfiltered is significant and positive (Holm) and filtered - skip_matched is not
       significant (its 95% interval, from the same seeds, contains 0): skipping steps explains the gain;
    3. *confirms*: filtered - unfiltered and filtered - random_matched are both significant and positive (Holm),
       and success is non-inferior (filtered no lower than unfiltered - 0.05, one-sided 5%);
    4. *inconclusive*: none of these.
    """
    names = [name for name, _, _ in CONTRASTS]
    adjusted = holm({name: contrasts[name].p for name in names})  # over the three primary contrasts only
    f_u = contrasts[names[0]]

    def significant_positive(name: str) -> bool:
        return adjusted[name] < alpha and contrasts[name].mean > 0

    if equivalent(f_u):
        return "refutes", f"filtered - unfiltered 90% interval {_fmt(f_u.ci90)} lies inside +-{EQUIVALENCE_MARGIN}"
    f_minus_s = contrasts.get("filtered - skip_matched")
    if significant_positive(names[2]) and f_minus_s is not None and f_minus_s.ci95[0] <= 0 <= f_minus_s.ci95[1]:
        return "partial", (
            f"skip_matched - unfiltered is positive (Holm p = {adjusted[names[2]]:.3g}) and filtered - skip_matched "
            f"{_fmt(f_minus_s.ci95)} contains 0: skipping steps, not choosing groups, explains the gain"
        )
    if significant_positive(names[0]) and significant_positive(names[1]) and non_inferior(success):
        return "confirms", (
            f"filtered beats unfiltered (Holm p = {adjusted[names[0]]:.3g}) and random_matched (Holm p = "
            f"{adjusted[names[1]]:.3g}); success non-inferior (90% interval {_fmt(success.ci90)})"
        )
    return "inconclusive", (
        f"Holm p: {', '.join(f'{n} {adjusted[n]:.3g}' for n in names)}; filtered - unfiltered 90% interval "
        f"{_fmt(f_u.ci90)} is not inside +-{EQUIVALENCE_MARGIN}"
    )


def _fmt(interval: tuple[float, float]) -> str:
    return f"[{interval[0]:+.3f}, {interval[1]:+.3f}]"


# ---------------------------------------------------------------------------------------------------------------
# Power


def seeds_needed(sd: float, delta: float, alpha: float, power: float = POWER_TARGET) -> int:
    """Seeds for a two-sided paired t test at level `alpha` to reach `power` against a true difference `delta`,
    given the paired SD: the normal formula ((z_{1-alpha/2} + z_power) * sd / delta)^2 plus Guenther's t correction
    z_{1-alpha/2}^2 / 2, rounded up."""
    z_alpha, z_power = normal_quantile(1.0 - alpha / 2.0), normal_quantile(power)
    return math.ceil(((z_alpha + z_power) * sd / delta) ** 2 + z_alpha**2 / 2.0)


def power_at(n: int, sd: float, delta: float, alpha: float) -> float:
    """Approximate power of the two-sided paired t test with n seeds (the normal approximation with the t critical
    value: P(Z > t_{1-alpha/2, n-1} - delta * sqrt(n) / sd))."""
    if n < 2 or sd <= 0:
        return math.nan
    critical = t_quantile(1.0 - alpha / 2.0, n - 1)
    return 1.0 - statistics.NormalDist().cdf(critical - delta * math.sqrt(n) / sd)
