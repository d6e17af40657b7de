"""Mutual-information proxies for template collapse, computed from an in-batch cross-scoring matrix.

Every reasoning chain z_n of a batch is scored, teacher-forced, under every candidate prompt x_m of the batch:
``logp[n, m] = sum_t log p(z_n,t | x_m, z_n,<t)``. A chain's own prompt is column ``target[n]``. If the reasoning
depends on its input, the own column stands out (high retrieval accuracy, MI-Est well above 0); under *template
collapse* every column scores the chain alike, so retrieval falls to chance and MI-Est to 0, even while the
conditional entropy H(Z|X) stays high. The six proxies of RAGEN-2 (arXiv 2604.06268, Table 1) are

| proxy | key |
|---|---|
| Retrieval-Acc | ``retrieval_acc`` (vs ``retrieval_chance``) |
| Recall@k | ``recall@{k}`` (vs ``recall@{k}_chance``) |
| MI-Est | ``mi_est`` = ``matched`` - ``marginal`` (per token) |
| MI-Seq-Est | ``mi_seq_est`` (whole-sequence log-probabilities) |
| MI-ZScore | ``mi_zscore`` (``mi_zscore_seq``) |
| MI-ZScore-EMA | ``mi_zscore_ema`` (``_seq``), from [`MIZScoreEMA`] |

plus the entropy estimates ``cond_entropy`` = H(Z|X) and ``marginal_entropy`` = H(Z), so that
``mi_est == marginal_entropy - cond_entropy``. [`reasoning_regime`] places a run in the four regimes of the
paper's Figure 1. Everything here is pure torch on small tensors; the matrix itself comes from
`trl_ragen2.collapse.scoring`.

```python
from trl_ragen2.collapse.mi import mi_metrics

metrics = mi_metrics(logp, lengths, target)  # logp (N, M), lengths (N,), target (N,)
metrics["mi_est"], metrics["retrieval_acc"], metrics["retrieval_chance"]
```
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


MARGINAL_MODES = ("ragen", "paper")
DEFAULT_KS = (2, 4, 8)
ZSCORE_EPS = 1e-3  # RAGEN-2's std_eps

# The four regimes of RAGEN-2 Figure 1, on the (MI, H(Z|X)) plane.
DIVERSE_REASONING = "diverse reasoning"  # high MI, high H(Z|X): input-specific and varied (healthy)
TEMPLATE_COLLAPSE = "template collapse"  # low MI, high H(Z|X): varied-looking but input-agnostic
COMPRESSED_REASONING = "compressed reasoning"  # high MI, low H(Z|X): input-specific but near-deterministic
LOW_ENTROPY_COLLAPSE = "low-entropy collapse"  # low MI, low H(Z|X): one fixed output for every input
REGIMES = (DIVERSE_REASONING, TEMPLATE_COLLAPSE, COMPRESSED_REASONING, LOW_ENTROPY_COLLAPSE)

# The keys of `mi_metrics` after the retrieval ones (`mi_metric_keys` lists them all), and those `MIZScoreEMA` adds.
ESTIMATE_KEYS = (
    "matched",
    "marginal",
    "mi_est",
    "cond_entropy",
    "marginal_entropy",
    "marginal_std",
    "mi_zscore",
    "matched_seq",
    "marginal_seq",
    "mi_seq_est",
    "cond_entropy_seq",
    "marginal_entropy_seq",
    "marginal_std_seq",
    "mi_zscore_seq",
    "mi_upper_bound",
    "num_chains",
    "num_columns",
)
EMA_KEYS = ("marginal_std_ema", "marginal_std_ema_seq", "mi_zscore_ema", "mi_zscore_ema_seq")

# Heuristic defaults of `reasoning_regime`, in nats per reasoning token (the units of `mi_est` and `cond_entropy`).
DEFAULT_MI_THRESHOLD = 0.05
DEFAULT_ENTROPY_THRESHOLD = 0.5


def _validate(logp, lengths, target, same) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    logp = torch.as_tensor(logp)
    lengths = torch.as_tensor(lengths)
    target = torch.as_tensor(target)
    if logp.dim() != 2:
        raise ValueError(f"logp must be a 2-D (num_chains, num_columns) tensor, got shape {tuple(logp.shape)}")
    num_chains, num_columns = logp.shape
    if num_chains == 0 or num_columns == 0:
        raise ValueError(
            f"logp is empty (shape {tuple(logp.shape)}); score at least one chain under at least one prompt"
        )
    if not logp.is_floating_point():
        raise ValueError(f"logp must hold floating-point log-probabilities, got dtype {logp.dtype}")
    if torch.isnan(logp).any():
        rows = torch.isnan(logp).any(1).nonzero().flatten().tolist()
        raise ValueError(f"logp contains NaN in rows {rows[:10]}; drop the chains that could not be scored")
    if (logp == math.inf).any():
        raise ValueError("logp contains +inf; log-probabilities must be <= 0 or -inf")
    if lengths.shape != (num_chains,):
        raise ValueError(f"lengths must have shape ({num_chains},) to match logp, got {tuple(lengths.shape)}")
    if torch.isnan(lengths.double()).any() or (lengths <= 0).any():
        bad = (torch.isnan(lengths.double()) | (lengths <= 0)).nonzero().flatten().tolist()
        raise ValueError(f"lengths must be > 0 (token count of each chain), got non-positive values at {bad[:10]}")
    if target.shape != (num_chains,):
        raise ValueError(f"target must have shape ({num_chains},) to match logp, got {tuple(target.shape)}")
    if target.is_floating_point() or target.dtype == torch.bool:
        raise ValueError(f"target must hold integer column indices, got dtype {target.dtype}")
    if (target < 0).any() or (target >= num_columns).any():
        bad = ((target < 0) | (target >= num_columns)).nonzero().flatten().tolist()
        raise ValueError(f"target must be in [0, {num_columns}) (a column of logp), out of range at rows {bad[:10]}")
    own = logp[torch.arange(num_chains), target.long()]
    if (own == -math.inf).any():
        bad = (own == -math.inf).nonzero().flatten().tolist()
        raise ValueError(f"the own-prompt score logp[n, target[n]] is -inf at rows {bad[:10]}; drop those chains")
    if same is not None:
        same = torch.as_tensor(same)
        if same.shape != logp.shape:
            raise ValueError(f"same must have the shape of logp {tuple(logp.shape)}, got {tuple(same.shape)}")
        if same.dtype != torch.bool:
            raise ValueError(f"same must be a bool tensor, got dtype {same.dtype}")
    return logp.double(), lengths.double(), target.long(), same


def _hit_probability(num_better: int, num_tied: int, num_tied_correct: int, k: int) -> float:
    """P(a correct column is in the top k) when tied columns are ordered uniformly at random.

    `num_better` columns score strictly above the best correct column; `num_tied` columns (of which
    `num_tied_correct` are correct) share its score. The tied block fills ranks num_better+1.. in random order, so the
    top k miss every correct column with the hypergeometric probability C(tied-correct, slots) / C(tied, slots).
    """
    slots = k - num_better
    if slots <= 0:
        return 0.0
    if slots >= num_tied:
        return 1.0
    return 1.0 - math.comb(num_tied - num_tied_correct, slots) / math.comb(num_tied, slots)


def _retrieval(logp: torch.Tensor, correct: torch.Tensor, ks: Sequence[int]) -> dict[str, float]:
    num_chains, num_columns = logp.shape
    best_correct = logp.masked_fill(~correct, -math.inf).max(1, keepdim=True).values  # (N, 1)
    num_better = (logp > best_correct).sum(1).tolist()
    tied = logp == best_correct
    num_tied = tied.sum(1).tolist()
    num_tied_correct = (tied & correct).sum(1).tolist()
    num_correct = correct.sum(1).tolist()
    metrics = {}
    for k in (1, *ks):
        k_eff = min(k, num_columns)
        hits = [_hit_probability(num_better[n], num_tied[n], num_tied_correct[n], k_eff) for n in range(num_chains)]
        # chance: the same top-k hit probability when every column ties (a chain that carries no information)
        chance = [_hit_probability(0, num_columns, num_correct[n], k_eff) for n in range(num_chains)]
        name = "retrieval" if k == 1 else f"recall@{k}"
        metrics[f"{name}_acc" if k == 1 else name] = sum(hits) / num_chains
        metrics[f"{name}_chance"] = sum(chance) / num_chains
    metrics["retrieval_above_chance"] = metrics["retrieval_acc"] - metrics["retrieval_chance"]
    return metrics


def mi_metric_keys(ks: Sequence[int] = DEFAULT_KS) -> tuple[str, ...]:
    """The keys [`mi_metrics`] returns for these `ks`, in its order (k = 1 is `retrieval_acc` itself)."""
    recall = [key for k in dict.fromkeys(ks) if k != 1 for key in (f"recall@{k}", f"recall@{k}_chance")]
    return ("retrieval_acc", "retrieval_chance", *recall, "retrieval_above_chance", *ESTIMATE_KEYS)


def mi_metrics(
    logp,
    lengths,
    target,
    same=None,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    marginal: str = "ragen",
) -> dict[str, float]:
    """MI proxies of RAGEN-2 from a cross-scoring matrix.

    Args:
        logp (`torch.Tensor` of shape `(N, M)`):
            `logp[n, m]` = sum over the tokens of chain n of log p(token | prompt m, earlier tokens). `-inf` is
            allowed off the target column; NaN and `+inf` are not.
        lengths (`torch.Tensor` of shape `(N,)`):
            Token count of each chain (> 0), for the per-token quantities.
        target (`torch.Tensor` of shape `(N,)`):
            Column of each chain's own prompt.
        same (`torch.Tensor` of shape `(N, M)`, dtype bool, *optional*):
            Columns whose prompt is identical to chain n's own (e.g. two draws of the same context). They count as
            correct for retrieval and for its chance level; the target column always does.
        ks (`Sequence[int]`, defaults to `(2, 4, 8)`):
            k of the `recall@{k}` keys. A k above M is capped at M (so `recall@8` with 4 columns is 1.0), but the key
            keeps the requested k.
        marginal (`str`, defaults to `"ragen"`):
            Per-token marginal. `"ragen"`: logsumexp_m(logp[n, m] / len_n) - log M, the log-mean-exp of per-token
            means that RAGEN's code logs and the paper's curves show. `"paper"`: (logsumexp_m logp[n, m] - log M) /
            len_n, the paper's Eq. 1. The "ragen" marginal is <= the "paper" one, so its `mi_est` is >= (both are 0
            when all columns agree). Sequence-level keys are the same in both modes.

    Returns:
        `dict[str, float]` with
        - retrieval: `retrieval_acc`, `retrieval_chance`, `retrieval_above_chance`, and per k `recall@{k}` and
          `recall@{k}_chance`. Ties are broken uniformly at random *in expectation*: if the best correct column
          shares its score with t columns of which c are correct, the chain counts c/t at k=1 (generally the
          hypergeometric probability that a correct column lands in the top k). A chain whose columns all tie
          therefore scores exactly chance. Chance = mean over chains of (#correct columns)/M at k=1.
        - per token (nats/token): `matched` = mean_n logp[n, target_n]/len_n, `marginal`, `mi_est` = matched -
          marginal, `cond_entropy` = -matched (H(Z|X)), `marginal_entropy` = -marginal (H(Z)), `marginal_std` =
          population std over chains of marginal_n, `mi_zscore` = mi_est / (marginal_std + 1e-3).
        - per sequence (nats): `matched_seq`, `marginal_seq` (logsumexp_m logp[n, m] - log M), `mi_seq_est`,
          `cond_entropy_seq`, `marginal_entropy_seq`, `marginal_std_seq`, `mi_zscore_seq`.
        - `mi_upper_bound` = log M, `num_chains` = N, `num_columns` = M.

    Raises:
        ValueError: on a shape mismatch, an empty matrix, a non-positive length, a target out of range, NaN or
            `+inf` in `logp`, or a `-inf` own-prompt score; the message names the argument.
    """
    if marginal not in MARGINAL_MODES:
        raise ValueError(f"marginal must be one of {MARGINAL_MODES}, got {marginal!r}")
    ks = tuple(ks)
    if any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {ks}")
    logp, lengths, target, same = _validate(logp, lengths, target, same)
    num_chains, num_columns = logp.shape
    rows = torch.arange(num_chains)
    log_m = math.log(num_columns)

    correct = torch.zeros_like(logp, dtype=torch.bool)
    correct[rows, target] = True
    if same is not None:
        correct |= same
    metrics = _retrieval(logp, correct, ks)

    matched_seq = logp[rows, target]  # (N,)
    marginal_seq = torch.logsumexp(logp, dim=1) - log_m  # (N,)
    matched = matched_seq / lengths
    if marginal == "ragen":
        marginal_tok = torch.logsumexp(logp / lengths[:, None], dim=1) - log_m
    else:
        marginal_tok = marginal_seq / lengths

    marginal_std = marginal_tok.std(unbiased=False).item()
    marginal_std_seq = marginal_seq.std(unbiased=False).item()
    mi_est = (matched - marginal_tok).mean().item()
    mi_seq_est = (matched_seq - marginal_seq).mean().item()
    metrics.update(
        matched=matched.mean().item(),
        marginal=marginal_tok.mean().item(),
        mi_est=mi_est,
        cond_entropy=-matched.mean().item(),
        marginal_entropy=-marginal_tok.mean().item(),
        marginal_std=marginal_std,
        mi_zscore=mi_est / (marginal_std + ZSCORE_EPS),
        matched_seq=matched_seq.mean().item(),
        marginal_seq=marginal_seq.mean().item(),
        mi_seq_est=mi_seq_est,
        cond_entropy_seq=-matched_seq.mean().item(),
        marginal_entropy_seq=-marginal_seq.mean().item(),
        marginal_std_seq=marginal_std_seq,
        mi_zscore_seq=mi_seq_est / (marginal_std_seq + ZSCORE_EPS),
        mi_upper_bound=log_m,
        num_chains=float(num_chains),
        num_columns=float(num_columns),
    )
    return metrics


class MIZScoreEMA:
    """MI-ZScore-EMA of RAGEN-2: MI divided by an exponential moving average of the marginal's spread.

    sigma_ema <- alpha * sigma_ema + (1 - alpha) * sigma_batch, initialised with the first sigma_batch, and updated only
    when metrics are computed. Keep one instance per scope (the per-token and sequence sigmas are tracked inside).

    ```python
    ema = MIZScoreEMA()
    metrics.update(ema.update(metrics))  # adds mi_zscore_ema(_seq) and marginal_std_ema(_seq)
    ```
    """

    def __init__(self, alpha: float = 0.9, eps: float = ZSCORE_EPS):
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {alpha}; 0.9 is RAGEN-2's value")
        if eps <= 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.alpha = alpha
        self.eps = eps
        self.sigma: float | None = None
        self.sigma_seq: float | None = None

    def _step(self, previous: float | None, current: float) -> float:
        return current if previous is None else self.alpha * previous + (1.0 - self.alpha) * current

    def update(self, metrics: dict[str, float]) -> dict[str, float]:
        """Fold in one batch's `marginal_std(_seq)` and return the EMA keys for that batch.

        Batches whose sigma is NaN (a scope that could not be computed) leave the state unchanged and give NaN.
        """
        sigma, sigma_seq = metrics["marginal_std"], metrics["marginal_std_seq"]
        if math.isnan(sigma) or math.isnan(sigma_seq):
            return dict.fromkeys(EMA_KEYS, math.nan)
        self.sigma = self._step(self.sigma, sigma)
        self.sigma_seq = self._step(self.sigma_seq, sigma_seq)
        return {
            "marginal_std_ema": self.sigma,
            "marginal_std_ema_seq": self.sigma_seq,
            "mi_zscore_ema": metrics["mi_est"] / (self.sigma + self.eps),
            "mi_zscore_ema_seq": metrics["mi_seq_est"] / (self.sigma_seq + self.eps),
        }

    def state_dict(self) -> dict[str, float | None]:
        """The settings and the EMA sigmas (None before the first update), as JSON-ready data."""
        return {"alpha": self.alpha, "eps": self.eps, "sigma": self.sigma, "sigma_seq": self.sigma_seq}

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        """Restore the sigmas of a `state_dict()`; `alpha` and `eps` keep this instance's values."""
        missing = {"sigma", "sigma_seq"} - set(state)
        if missing:
            raise ValueError(f"MIZScoreEMA state is missing {sorted(missing)}; pass a dict from state_dict()")
        self.sigma = None if state["sigma"] is None else float(state["sigma"])
        self.sigma_seq = None if state["sigma_seq"] is None else float(state["sigma_seq"])


def reasoning_regime(
    mi: float,
    cond_entropy: float,
    *,
    mi_threshold: float = DEFAULT_MI_THRESHOLD,
    entropy_threshold: float = DEFAULT_ENTROPY_THRESHOLD,
) -> str:
    """Place a run in one of the four regimes of RAGEN-2 Figure 1 (MI on one axis, conditional entropy on the other).

    | | H(Z|X) >= entropy_threshold | H(Z|X) < entropy_threshold |
    |---|---|---|
    | MI >= mi_threshold | `"diverse reasoning"` (healthy) | `"compressed reasoning"` |
    | MI < mi_threshold | `"template collapse"` | `"low-entropy collapse"` |

    Template collapse is the quadrant that entropy alone cannot see: reasoning still varies, but no longer depends
    on the input.

    Args:
        mi (`float`):
            An MI estimate, by default in nats per token (`mi_metrics(...)["mi_est"]`).
        cond_entropy (`float`):
            H(Z|X) in the same units (`mi_metrics(...)["cond_entropy"]`).
        mi_threshold (`float`, defaults to `0.05`):
            MI at or above which reasoning counts as input-dependent. The default (nats/token) is a heuristic starting
            point, not a number from the paper; calibrate it on the first diagnostics of a healthy run, or pass
            thresholds in the units of another proxy (e.g. `mi_seq_est` in nats, whose ceiling is `log M`).
        entropy_threshold (`float`, defaults to `0.5`):
            H(Z|X) below which sampling counts as near-deterministic; also a heuristic default (nats/token).

    Returns:
        One of [`REGIMES`].
    """
    for name, value in (("mi", mi), ("cond_entropy", cond_entropy)):
        if value is None or math.isnan(value):
            raise ValueError(f"{name} must be a number, got {value!r}; the MI diagnostics did not run on this step")
    high_mi = mi >= mi_threshold
    high_entropy = cond_entropy >= entropy_threshold
    if high_mi:
        return DIVERSE_REASONING if high_entropy else COMPRESSED_REASONING
    return TEMPLATE_COLLAPSE if high_entropy else LOW_ENTROPY_COLLAPSE
