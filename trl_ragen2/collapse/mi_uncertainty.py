"""How sure an MI diagnostic is: a permutation test for retrieval above chance and bootstrap intervals for every proxy.

Both resample the cross-scoring matrix the diagnostics already computed; no model is run again.

- **Permutation test** ([`retrieval_permutation_test`]). Under the null hypothesis that reasoning carries no
  information about its input, which chain was written for which context is arbitrary, so shuffling the chains'
  context labels (the rows of the "correct column" mask) leaves the distribution of Retrieval-Acc unchanged. The
  p-value is `(1 + #{shuffles scoring >= the observed accuracy}) / (1 + num_permutations)`, the smallest value being
  `1 / (1 + num_permutations)`. The shuffles also give the accuracy that chance alone reaches with probability
  `level` (`retrieval_null_high`): retrieval above it is significant at `1 - level`.
- **Bootstrap intervals** ([`bootstrap_intervals`]). Chains are resampled with replacement by cluster: the chains
  whose correct columns coincide (for the first-turn scope: the chains of one prompt) are drawn together, since
  they share their context. Every proxy is a mean over chains of per-chain terms ([`chain_terms`]), or a ratio of
  such means (the z-scores), so a resample is a weighted mean with multinomial weights. The interval is the
  percentile interval of the resampled values at `level`, widened around the estimate by the small-sample factor
  `sqrt(J / (J - 1)) * t_{J-1} / z` for J clusters ([`small_sample_factor`]): with 8 prompts the plain percentile
  interval covers the truth only about 90% of the time at `level` 0.95, the widened one about 95% (measured in
  `tests/test_mi_uncertainty.py`). It describes the variability due to which chains were sampled, for the batch's
  fixed set of contexts (the columns are not resampled).

Everything is seeded by the caller and uses its own `torch.Generator`: the same matrix and seed give the same
numbers on every process, and the global random state is not touched.

```python
from trl_ragen2.collapse.mi_uncertainty import mi_uncertainty

extra = mi_uncertainty(logp, lengths, target, same, seed=step)
extra["retrieval_pvalue"], extra["mi_est_ci_low"], extra["mi_est_ci_high"]
```
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .mi import DEFAULT_KS, MARGINAL_MODES, ZSCORE_EPS


DEFAULT_PERMUTATIONS = 1000
DEFAULT_BOOTSTRAP = 1000
DEFAULT_LEVEL = 0.95
PERMUTATION_BUDGET = 2_000_000  # matrix entries evaluated at once: shuffles per chunk x N x M
TIE_TOLERANCE = 1e-12  # a shuffle "reaches" the observed accuracy up to float rounding

# Proxies that get `<key>_ci_low` / `<key>_ci_high` (recall@k are added per k).
INTERVAL_KEYS = (
    "retrieval_acc",
    "retrieval_above_chance",
    "mi_est",
    "mi_seq_est",
    "mi_zscore",
    "mi_zscore_seq",
    "mi_zscore_ema",
    "mi_zscore_ema_seq",
    "cond_entropy",
)
TEST_KEYS = ("retrieval_pvalue", "retrieval_null_high")


def interval_keys(ks: Sequence[int] = DEFAULT_KS) -> tuple[str, ...]:
    """The proxies with a bootstrap interval, for Recall@k at these k."""
    return (*INTERVAL_KEYS[:2], *(f"recall@{k}" for k in ks), *INTERVAL_KEYS[2:])


def uncertainty_keys(ks: Sequence[int] = DEFAULT_KS) -> tuple[str, ...]:
    """Every key [`mi_uncertainty`] returns."""
    return (*TEST_KEYS, *(f"{key}_{end}" for key in interval_keys(ks) for end in ("ci_low", "ci_high")))


def correct_columns(num_columns: int, target: torch.Tensor, same: torch.Tensor | None) -> torch.Tensor:
    """`(N, M)` bool: the own column of each chain and every column holding an identical context."""
    correct = torch.zeros(target.numel(), num_columns, dtype=torch.bool)
    correct[torch.arange(target.numel()), target] = True
    return correct | same if same is not None else correct


def _hit(num_better: int, num_tied: int, num_tied_correct: int, k: int) -> float:
    """P(a correct column in the top k) with ties ordered at random (the rule of `trl_ragen2.collapse.mi`)."""
    slots = k - num_better
    if slots <= 0:
        return 0.0
    if slots >= num_tied:
        return 1.0
    return 1.0 - math.comb(num_tied - num_tied_correct, slots) / math.comb(num_tied, slots)


@dataclass
class ChainTerms:
    """Per-chain terms whose means over chains are the MI proxies of `trl_ragen2.collapse.mi.mi_metrics`.

    `hits[name]` (N,) for `retrieval_acc` and `recall@k`; `chance` (N,) the top-1 chance of each chain;
    `matched`, `marginal` (N,) per token; `matched_seq`, `marginal_seq` (N,) per chain; `certain` the hit keys that
    are 1 for any matrix of this width (k at least the number of columns).
    """

    hits: dict[str, torch.Tensor]
    chance: torch.Tensor
    matched: torch.Tensor
    marginal: torch.Tensor
    matched_seq: torch.Tensor
    marginal_seq: torch.Tensor
    certain: frozenset[str] = frozenset()


def chain_terms(logp, lengths, target, same=None, *, ks=DEFAULT_KS, marginal: str = "ragen") -> ChainTerms:
    """The per-chain terms behind `mi_metrics(logp, lengths, target, same, ks=ks, marginal=marginal)`."""
    if marginal not in MARGINAL_MODES:
        raise ValueError(f"marginal must be one of {MARGINAL_MODES}, got {marginal!r}")
    logp = torch.as_tensor(logp, dtype=torch.float64)
    lengths = torch.as_tensor(lengths, dtype=torch.float64)
    target = torch.as_tensor(target, dtype=torch.long)
    num_chains, num_columns = logp.shape
    correct = correct_columns(num_columns, target, None if same is None else torch.as_tensor(same))
    best = logp.masked_fill(~correct, -math.inf).max(1, keepdim=True).values  # (N, 1)
    better = (logp > best).sum(1).tolist()
    tied = logp == best
    num_tied, num_tied_correct = tied.sum(1).tolist(), (tied & correct).sum(1).tolist()
    num_correct = correct.sum(1).tolist()
    hits, certain = {}, set()
    for k in (1, *ks):
        k_eff = min(k, num_columns)
        if k_eff >= num_columns:
            certain.add("retrieval_acc" if k == 1 else f"recall@{k}")
        values = [_hit(better[n], num_tied[n], num_tied_correct[n], k_eff) for n in range(num_chains)]
        hits["retrieval_acc" if k == 1 else f"recall@{k}"] = torch.tensor(values, dtype=torch.float64)
    chance = torch.tensor([c / num_columns for c in num_correct], dtype=torch.float64)
    rows = torch.arange(num_chains)
    log_m = math.log(num_columns)
    matched_seq = logp[rows, target]
    marginal_seq = torch.logsumexp(logp, dim=1) - log_m
    if marginal == "ragen":
        marginal_tok = torch.logsumexp(logp / lengths[:, None], dim=1) - log_m
    else:
        marginal_tok = marginal_seq / lengths
    return ChainTerms(
        hits, chance, matched_seq / lengths, marginal_tok, matched_seq, marginal_seq, certain=frozenset(certain)
    )


# ---------------------------------------------------------------------------------------------------------------
# Permutation test


def _top1_accuracy(logp: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """Retrieval-Acc for a batch of correct masks: logp (N, M), correct (B, N, M) -> (B,)."""
    scores = logp.unsqueeze(0)  # (1, N, M)
    best = scores.masked_fill(~correct, -math.inf).amax(-1, keepdim=True)  # (B, N, 1)
    tied = scores == best
    num_better = (scores > best).sum(-1)
    hit = (tied & correct).sum(-1) / tied.sum(-1).clamp(min=1)
    return torch.where(num_better == 0, hit, torch.zeros_like(hit)).mean(-1)


def retrieval_permutation_test(
    logp,
    target,
    same=None,
    *,
    num_permutations: int = DEFAULT_PERMUTATIONS,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """`(p-value, null quantile)` of Retrieval-Acc against shuffled context labels.

    Args:
        logp, target, same: as for `trl_ragen2.collapse.mi.mi_metrics` (one row per chain, a column per context).
        num_permutations: shuffles of the chains' labels (rows of the correct-column mask).
        level: the quantile of the shuffled accuracies returned second (chance's reach at that level).
        seed: seed of the shuffles.

    Returns:
        The one-sided p-value `(1 + #{shuffle >= observed}) / (1 + num_permutations)`, and the `level` quantile of
        the shuffled Retrieval-Acc values.
    """
    if num_permutations < 1:
        raise ValueError(f"num_permutations must be >= 1, got {num_permutations}")
    logp = torch.as_tensor(logp, dtype=torch.float64)
    target = torch.as_tensor(target, dtype=torch.long)
    num_chains, num_columns = logp.shape
    correct = correct_columns(num_columns, target, None if same is None else torch.as_tensor(same))
    observed = _top1_accuracy(logp, correct.unsqueeze(0)).item()
    generator = torch.Generator().manual_seed(seed)
    shuffled = []
    chunk = max(1, PERMUTATION_BUDGET // (num_chains * num_columns))
    for start in range(0, num_permutations, chunk):
        size = min(chunk, num_permutations - start)
        order = torch.rand(size, num_chains, generator=generator, dtype=torch.float64).argsort(dim=1)  # (b, N)
        shuffled.append(_top1_accuracy(logp, correct[order]))
    null = torch.cat(shuffled)
    pvalue = (1 + int((null >= observed - TIE_TOLERANCE).sum())) / (1 + num_permutations)
    return pvalue, torch.quantile(null, level).item()


# ---------------------------------------------------------------------------------------------------------------
# Bootstrap


def cluster_ids(correct: torch.Tensor) -> torch.Tensor:
    """(N,) cluster of each chain: chains whose rows of the correct-column mask coincide share one."""
    return torch.unique(correct, dim=0, return_inverse=True)[1]


def bootstrap_weights(clusters: torch.Tensor, num_resamples: int, generator: torch.Generator) -> torch.Tensor:
    """(B, N) multinomial weights: each resample draws as many clusters as there are, with replacement."""
    num_clusters = int(clusters.max()) + 1
    drawn = torch.randint(num_clusters, (num_resamples, num_clusters), generator=generator)  # (B, J)
    counts = torch.zeros(num_resamples, num_clusters, dtype=torch.float64)
    counts.scatter_add_(1, drawn, torch.ones_like(drawn, dtype=torch.float64))
    return counts[:, clusters]  # (B, N): a chain counts as often as its cluster was drawn


def resampled_proxies(
    terms: ChainTerms,
    weights: torch.Tensor,
    *,
    ema_alpha: float = 0.9,
    ema_sigma: float | None = None,
    ema_sigma_seq: float | None = None,
) -> dict[str, torch.Tensor]:
    """Every proxy of [`interval_keys`] on each resample (weights (B, N)): `{key: (B,)}`.

    `ema_sigma(_seq)` is the MI-ZScore-EMA state *before* this batch (None on the first diagnostic), so each
    resample folds its own batch spread into the EMA as the diagnostics do.
    """
    total = weights.sum(1)  # (B,)

    def mean(x):
        return weights @ x / total

    def std(x):  # population std, as mi_metrics
        return (mean(x * x) - mean(x) ** 2).clamp(min=0.0).sqrt()

    def ema(previous, sigma):
        return sigma if previous is None else ema_alpha * previous + (1.0 - ema_alpha) * sigma

    out = {key: mean(hit) for key, hit in terms.hits.items()}
    out["retrieval_above_chance"] = mean(terms.hits["retrieval_acc"] - terms.chance)
    mi = mean(terms.matched - terms.marginal)
    mi_seq = mean(terms.matched_seq - terms.marginal_seq)
    sigma, sigma_seq = std(terms.marginal), std(terms.marginal_seq)
    out.update(
        mi_est=mi,
        mi_seq_est=mi_seq,
        mi_zscore=mi / (sigma + ZSCORE_EPS),
        mi_zscore_seq=mi_seq / (sigma_seq + ZSCORE_EPS),
        mi_zscore_ema=mi / (ema(ema_sigma, sigma) + ZSCORE_EPS),
        mi_zscore_ema_seq=mi_seq / (ema(ema_sigma_seq, sigma_seq) + ZSCORE_EPS),
        cond_entropy=-mean(terms.matched),
    )
    return out


# keys whose values live in a bounded range; widened interval ends are clipped to it
BOUNDS = {"retrieval_acc": (0.0, 1.0), "retrieval_above_chance": (-1.0, 1.0), "cond_entropy": (0.0, math.inf)}


def student_t_quantile(q: float, dof: int) -> float:
    """The q-quantile of Student's t with `dof` degrees of freedom (exact for 1 and 2, Cornish-Fisher above).

    The four-term expansion is within 0.7% of the exact quantile at dof = 3 and q = 0.975, and closer beyond.
    """
    if dof == 1:
        return math.tan(math.pi * (q - 0.5))
    if dof == 2:
        return (2 * q - 1) / math.sqrt(2 * q * (1 - q))
    z = torch.special.ndtri(torch.tensor(q, dtype=torch.float64)).item()
    return (
        z
        + (z**3 + z) / (4 * dof)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * dof**3)
    )


def small_sample_factor(num_clusters: int, level: float) -> float:
    """How much to widen a percentile interval drawn from `num_clusters` clusters: sqrt(J/(J-1)) * t_{J-1} / z.

    The bootstrap variance of a mean over J clusters is (J - 1) / J times the unbiased one, and with few clusters the
    normal quantile z understates the spread of the estimate, which follows Student's t with J - 1 degrees of
    freedom. 1 for a single cluster (the interval is then a point).
    """
    if num_clusters < 2:
        return 1.0
    q = (1.0 + level) / 2
    z = torch.special.ndtri(torch.tensor(q, dtype=torch.float64)).item()
    return math.sqrt(num_clusters / (num_clusters - 1)) * student_t_quantile(q, num_clusters - 1) / z


def wilson_interval(rate: float, num: int, level: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion `rate` observed over `num` independent units, at `level`."""
    z = torch.special.ndtri(torch.tensor((1.0 + level) / 2, dtype=torch.float64)).item()
    scale = 1.0 + z * z / num
    centre = (rate + z * z / (2 * num)) / scale
    half = z / scale * math.sqrt(max(rate * (1.0 - rate), 0.0) / num + z * z / (4 * num * num))
    return max(centre - half, 0.0), min(centre + half, 1.0)


def bootstrap_intervals(
    terms: ChainTerms,
    clusters: torch.Tensor,
    *,
    num_resamples: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    ema_alpha: float = 0.9,
    ema_sigma: float | None = None,
    ema_sigma_seq: float | None = None,
    widen: bool = True,
) -> dict[str, tuple[float, float]]:
    """Intervals `{key: (low, high)}` of every proxy at `level`, from cluster-bootstrap resamples.

    The percentile interval of the resamples, widened around the estimate by [`small_sample_factor`] (pass
    `widen=False` for the plain percentile interval) and clipped to the range of bounded keys ([`BOUNDS`]). With
    `widen`, a hit rate (Retrieval-Acc, Recall@k, and Retrieval-Acc above chance) also spans the Wilson interval
    of its estimate over the N chains: with a few chains whose hits are all 0 or all 1 the resamples are all equal
    and the bootstrap alone gives a point. With many chains the (cluster) bootstrap interval is the wider one. Hit
    rates that are 1 by construction (`terms.certain`) keep theirs.
    """
    if num_resamples < 1:
        raise ValueError(f"num_resamples must be >= 1, got {num_resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    clusters = torch.as_tensor(clusters, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    weights = bootstrap_weights(clusters, num_resamples, generator)
    ema = dict(ema_alpha=ema_alpha, ema_sigma=ema_sigma, ema_sigma_seq=ema_sigma_seq)
    values = resampled_proxies(terms, weights, **ema)
    estimates = resampled_proxies(terms, torch.ones(1, clusters.numel(), dtype=torch.float64), **ema)
    factor = small_sample_factor(int(clusters.max()) + 1, level) if widen else 1.0
    quantiles = torch.tensor([(1.0 - level) / 2, (1.0 + level) / 2], dtype=torch.float64)
    intervals = {}
    for key, resampled in values.items():
        low, high = torch.quantile(resampled, quantiles).tolist()
        estimate = estimates[key].item()
        low, high = estimate - factor * (estimate - low), estimate + factor * (high - estimate)
        floor, ceiling = BOUNDS.get(key, (0.0, 1.0) if key.startswith("recall@") else (-math.inf, math.inf))
        intervals[key] = (max(low, floor), min(high, ceiling))
    if widen and int(clusters.max()) >= 1:  # one cluster keeps its point
        num_chains = clusters.numel()
        for key in [*terms.hits, "retrieval_above_chance"]:
            hit_key = "retrieval_acc" if key == "retrieval_above_chance" else key
            if hit_key in terms.certain:
                continue
            low, high = wilson_interval(estimates[hit_key].item(), num_chains, level)
            if key == "retrieval_above_chance":  # the chance level is fixed by the columns
                shift = estimates[key].item() - estimates[hit_key].item()
                low, high = low + shift, high + shift
            intervals[key] = (min(intervals[key][0], low), max(intervals[key][1], high))
    return intervals


# ---------------------------------------------------------------------------------------------------------------
# Together


def mi_uncertainty(
    logp,
    lengths,
    target,
    same=None,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    marginal: str = "ragen",
    num_permutations: int = DEFAULT_PERMUTATIONS,
    num_bootstrap: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    shared_columns: bool = True,
    ema_alpha: float = 0.9,
    ema_sigma: float | None = None,
    ema_sigma_seq: float | None = None,
) -> dict[str, float]:
    """The permutation test and the bootstrap intervals of one scoring matrix, as flat metric keys.

    Returns `retrieval_pvalue`, `retrieval_null_high` and `<key>_ci_low` / `<key>_ci_high` for every key of
    [`interval_keys`]. With `shared_columns=False` (the cheap mode's matrix: each row holds its own chain's context
    and negatives, not a common set of contexts) the labels cannot be shuffled: the test keys are NaN and the
    bootstrap draws single chains.
    """
    terms = chain_terms(logp, lengths, target, same, ks=ks, marginal=marginal)
    num_chains, num_columns = torch.as_tensor(logp).shape
    target = torch.as_tensor(target, dtype=torch.long)
    out = dict.fromkeys(TEST_KEYS, math.nan)
    if shared_columns:
        correct = correct_columns(num_columns, target, None if same is None else torch.as_tensor(same))
        clusters = cluster_ids(correct)
        pvalue, null_high = retrieval_permutation_test(
            logp, target, same, num_permutations=num_permutations, level=level, seed=seed
        )
        out.update(retrieval_pvalue=pvalue, retrieval_null_high=null_high)
    else:
        clusters = torch.arange(num_chains)
    intervals = bootstrap_intervals(
        terms,
        clusters,
        num_resamples=num_bootstrap,
        level=level,
        seed=seed + 1,
        ema_alpha=ema_alpha,
        ema_sigma=ema_sigma,
        ema_sigma_seq=ema_sigma_seq,
    )
    for key in interval_keys(ks):
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = intervals[key]
    return out


def scope_uncertainty(result, config, *, scope: str, step: int, ema_state: dict) -> dict[str, float]:
    """[`mi_uncertainty`] of one computed scope of the MI diagnostics (`trl_ragen2.collapse.diagnostics`).

    `result` is the scope's `ScopeResult`, `config` the `MIDiagnosticsConfig` (`num_permutations`, `num_bootstrap`,
    `confidence_level`, `ks`, `marginal`, `num_negatives`, `seed`, `ema_alpha`), `ema_state` the scope's
    `MIZScoreEMA.state_dict()` before this batch. The seed depends on the config's seed, the step and the scope
    only, so every process gets the same numbers. A resampling switched off (0) leaves its keys NaN.
    """
    from .scoring.pairs import scope_generator

    out = dict.fromkeys(uncertainty_keys(config.ks), math.nan)
    if config.num_permutations == 0 and config.num_bootstrap == 0:
        return out
    values = mi_uncertainty(
        result.logp,
        result.lengths,
        result.target,
        result.same,
        ks=config.ks,
        marginal=config.marginal,
        num_permutations=max(config.num_permutations, 1),
        num_bootstrap=max(config.num_bootstrap, 1),
        level=config.confidence_level,
        seed=scope_generator(config.seed, step, scope).initial_seed(),
        shared_columns=config.num_negatives is None,
        ema_alpha=config.ema_alpha,
        ema_sigma=ema_state["sigma"],
        ema_sigma_seq=ema_state["sigma_seq"],
    )
    for key in out:
        is_test = key in TEST_KEYS
        if (config.num_permutations if is_test else config.num_bootstrap) > 0:
            out[key] = values[key]
    return out
