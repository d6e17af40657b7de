"""`trl-ragen2 diagnose`, the trainer-free core: has this policy's reasoning collapsed into a template?

Given rollouts (N prompts x G samples, as [`~rollout_file.RolloutRow`]s, from a model this library rolled out or
from a file another framework dumped) and the policy that scores them, [`diagnose_rollouts`] runs the same MI
diagnostics a trainer runs ([`~diagnostics.MIDiagnostics.compute`]: the same pair sampling, scorers, proxies,
permutation test, bootstrap intervals and text metrics) on that one batch, and reads the result:

- the Table 1 proxies (Retrieval-Acc and its chance level, MI-Est, MI-ZScore, H(Z|X), H(Z)) per scope: the first
  turn always, the trajectory when some rollout has several turns;
- the regime of RAGEN-2's Figure 1 ([`~mi.reasoning_regime`] on MI-Est and H(Z|X), thresholds reported with it);
- one line a person can act on ([`action_line`]).

[`paired_differences`] compares two diagnoses of the same prompts (two checkpoints): the difference of each proxy
with a cluster-bootstrap interval whose resamples draw the same prompts for both, so the prompts' own difficulty
cancels. [`format_report`] is the terminal table. Loading models and rolling them out is the entry point's job
(`trl_ragen2.diagnose`); this module only scores.

```python
from trl_ragen2.collapse.diagnose import diagnose_rollouts
from trl_ragen2.collapse.rollout_file import read_rollouts
from trl_ragen2.collapse.scoring import TransformersCrossScorer

report = diagnose_rollouts(list(read_rollouts("rollouts.jsonl")), tokenizer, TransformersCrossScorer(model))
report.regime, report.action
```
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..runs.keys import MI_SCOPES, mi_key, text_key
from .diagnostics import MIDiagnostics, MIDiagnosticsConfig
from .mi import (
    COMPRESSED_REASONING,
    DEFAULT_ENTROPY_THRESHOLD,
    DEFAULT_MI_THRESHOLD,
    DIVERSE_REASONING,
    LOW_ENTROPY_COLLAPSE,
    TEMPLATE_COLLAPSE,
    reasoning_regime,
)
from .mi_uncertainty import chain_terms, resampled_proxies, small_sample_factor
from .rollout_file import RolloutFileError, RolloutRow
from .text_metrics import TEXT_KEYS


# The Table 1 proxies, in the order of the report; the ones with a bootstrap interval and the paired comparison's
TABLE_KEYS = ("retrieval_acc", "retrieval_chance", "mi_est", "mi_zscore", "cond_entropy", "marginal_entropy")
PAIRED_KEYS = ("retrieval_acc", "mi_est", "mi_zscore", "cond_entropy")
LABELS = {
    "retrieval_acc": "Retrieval-Acc",
    "retrieval_chance": "  chance",
    "mi_est": "MI-Est",
    "mi_zscore": "MI z-score",
    "cond_entropy": "H(Z|X)",
    "marginal_entropy": "H(Z)",
}


@dataclass
class ScopeReport:
    """One scope of a diagnosis: its metrics (`mi_metrics` keys, intervals, test, counts), regime and matrix."""

    scope: str
    metrics: dict[str, float]
    regime: str
    logp: torch.Tensor  # (N, C) summed log-probabilities of chain n under column c
    lengths: torch.Tensor  # (N,) reasoning tokens of each chain
    target: torch.Tensor  # (N,) each chain's own column
    same: torch.Tensor | None  # (N, C) columns holding the chain's own context
    groups: list[str]  # (N,) the prompt group of each chain
    chains: list[str]  # (N,) the decoded reasoning
    columns: list[str]  # (C,) the decoded contexts

    def to_json(self, with_matrix: bool = True) -> dict:
        out = {"metrics": self.metrics, "regime": self.regime}
        if with_matrix:
            out.update(
                logp=self.logp.tolist(),
                lengths=self.lengths.tolist(),
                target=self.target.tolist(),
                groups=self.groups,
                chains=self.chains,
                columns=self.columns,
            )
        return out


@dataclass
class Diagnosis:
    """The diagnosis of one policy on one set of rollouts."""

    name: str
    num_rollouts: int
    num_prompts: int
    scopes: dict[str, ScopeReport]
    text: dict[str, float]
    mi_threshold: float
    entropy_threshold: float
    engine: dict[str, str] = field(default_factory=dict)  # scope -> engine that scored it
    rewards: list[float | None] = field(default_factory=list)

    @property
    def regime(self) -> str:
        """The regime of the first-turn scope (the paper's headline scope)."""
        return self.scopes["first_turn"].regime

    @property
    def action(self) -> str:
        return action_line(self.scopes["first_turn"].metrics, self.regime, self.mi_threshold)

    def to_json(self, with_matrix: bool = False) -> dict:
        return {
            "name": self.name,
            "num_rollouts": self.num_rollouts,
            "num_prompts": self.num_prompts,
            "regime": self.regime,
            "action": self.action,
            "thresholds": {"mi_est": self.mi_threshold, "cond_entropy": self.entropy_threshold},
            "engine": self.engine,
            "scopes": {scope: report.to_json(with_matrix) for scope, report in self.scopes.items()},
            "text": self.text,
        }


# ---------------------------------------------------------------------------------------------------------------
# Rollouts -> the batch the diagnostics read


def prompt_text(prompt: str | list[dict], tokenizer) -> str:
    """The text a row's prompt stands for: itself, or its messages rendered with the generation prompt."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def rollouts_batch(rows: Sequence[RolloutRow], tokenizer, max_length: int | None, source: str = "rollouts"):
    """`(batch, turn_rows)` in the layout of a TRL GRPO batch, with each row's assistant turns as `turn_spans`.

    A row whose prompt and completion together exceed `max_length` tokens (the model's context) raises a
    `RolloutFileError` naming it.
    """
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompts, completions, turn_rows = [], [], []
    for number, row in enumerate(rows, start=1):
        ids, spans = [], []
        for role, text in row.completion:
            piece = encode(text)
            if role == "assistant" and piece:
                spans.append((len(ids), len(ids) + len(piece)))
            ids += piece
        prompt = encode(prompt_text(row.prompt, tokenizer))
        if max_length is not None and len(prompt) + len(ids) > max_length:
            where = f"{source} line {row.line}" if row.line else f"{source} row {number}"
            raise RolloutFileError(
                f"{where}: prompt + completion are {len(prompt) + len(ids)} tokens, longer than the model's context "
                f"({max_length}); the model cannot score it, so drop or truncate the row"
            )
        prompts.append(prompt)
        completions.append(ids)
        turn_rows.append({"turn_spans": spans})
    width_p = max(len(p) for p in prompts)
    width_c = max(len(c) for c in completions)
    batch = {
        "prompt_ids": torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts]),  # (B, Lp) left-padded
        "prompt_mask": torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) for p in prompts]),
        "completion_ids": torch.tensor([c + [pad] * (width_c - len(c)) for c in completions]),  # (B, Lc)
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (width_c - len(c)) for c in completions]),
    }
    return batch, turn_rows


# ---------------------------------------------------------------------------------------------------------------
# Diagnosis


def diagnose_rollouts(
    rows: Sequence[RolloutRow],
    tokenizer,
    scorer,
    *,
    name: str = "policy",
    config: MIDiagnosticsConfig | None = None,
    max_length: int | None = None,
    mi_threshold: float = DEFAULT_MI_THRESHOLD,
    entropy_threshold: float = DEFAULT_ENTROPY_THRESHOLD,
    engines=None,
    extractor=None,
    source: str = "rollouts",
) -> Diagnosis:
    """Diagnose one policy on `rows` (all of them in one batch), scoring with `scorer`.

    Args:
        rows: the rollouts, at least two prompts (see `trl_ragen2.collapse.rollout_file`).
        tokenizer: the policy's tokenizer.
        scorer: a cross-scorer (`TransformersCrossScorer`, `VLLMCrossScorer`), or `{"transformers": ...,
            "vllm": ...}` for the measured per-scope choice of `engines` (an `EngineSelector`).
        config: the diagnostics' settings; `num_samples` defaults to every rollout and `scopes` to the first turn,
            plus the trajectory when a rollout has several turns.
        max_length: the model's context in tokens; longer rows raise an error naming them.
        mi_threshold, entropy_threshold: the regime's thresholds on MI-Est and H(Z|X) (nats per token).
    """
    rows = list(rows)
    multi_turn = any(sum(role == "assistant" for role, _ in row.completion) > 1 for row in rows)
    scopes = MI_SCOPES if multi_turn else ("first_turn",)
    config = config or MIDiagnosticsConfig(num_samples=len(rows))
    config = dataclasses.replace(config, scopes=scopes, every_n_steps=1)
    batch, turn_rows = rollouts_batch(rows, tokenizer, max_length, source)
    diagnostics = MIDiagnostics(config, extractor=extractor, scorer=scorer)
    if engines is not None:
        diagnostics.engines = engines  # one selector over a series of checkpoints: the choice is measured once
    metrics = diagnostics.compute(batch, turn_rows, tokenizer=tokenizer, scorer=scorer)
    decode = getattr(tokenizer, "tokenizer", tokenizer).decode
    reports, engine = {}, {}
    for scope in scopes:
        result = diagnostics.last_results[scope]
        if result.error is not None:
            raise ValueError(f"{name}: the {scope} scope could not be computed: {result.error}")
        values = {key: metrics[mi_key(scope, key)] for key in diagnostics.metric_keys}
        engine[scope] = "vllm" if values["vllm_engine"] == 1.0 else "transformers"
        reports[scope] = ScopeReport(
            scope=scope,
            metrics=values,
            regime=reasoning_regime(
                values["mi_est"],
                values["cond_entropy"],
                mi_threshold=mi_threshold,
                entropy_threshold=entropy_threshold,
            ),
            logp=result.logp,
            lengths=result.lengths,
            target=result.target,
            same=result.same,
            groups=[rows[row].group for row in result.rows],
            chains=[decode(chain, skip_special_tokens=True) for chain in result.chains],
            columns=[decode(result.contexts[c], skip_special_tokens=False) for c in result.column_context],
        )
    return Diagnosis(
        name=name,
        num_rollouts=len(rows),
        num_prompts=len({row.group for row in rows}),
        scopes=reports,
        text={key: metrics[text_key(key)] for key in TEXT_KEYS},
        mi_threshold=mi_threshold,
        entropy_threshold=entropy_threshold,
        engine=engine,
        rewards=[row.reward for row in rows],
    )


def action_line(metrics: dict[str, float], regime: str, mi_threshold: float) -> str:
    """One sentence a person can act on, from a scope's metrics and regime."""
    low, high = metrics.get("mi_est_ci_low", math.nan), metrics.get("mi_est_ci_high", math.nan)
    evidence = (
        f"MI-Est {metrics['mi_est']:.3g} [{low:.3g}, {high:.3g}], Retrieval-Acc {metrics['retrieval_acc']:.2f} vs "
        f"chance {metrics['retrieval_chance']:.2f} (p={metrics.get('retrieval_pvalue', math.nan):.3g})"
    )
    uncertain = not (low >= mi_threshold or high < mi_threshold)  # the interval straddles the threshold
    if uncertain:
        return (
            f"Undecided ({evidence}): the interval crosses the MI threshold {mi_threshold:g}; diagnose more prompts "
            "(--num-prompts) or samples (--group-size) before acting."
        )
    if regime == TEMPLATE_COLLAPSE:
        return (
            f"Template collapse ({evidence}): reasoning varies but ignores the input. Roll back to the last "
            "checkpoint whose MI is above the threshold and train with SNR-aware filtering "
            "(reward_variance_filtering), which keeps the prompts whose rewards still tell samples apart."
        )
    if regime == LOW_ENTROPY_COLLAPSE:
        return (
            f"Low-entropy collapse ({evidence}): one fixed output whatever the input. Roll back, and raise the "
            "sampling temperature or the entropy bonus before training on."
        )
    if regime == COMPRESSED_REASONING:
        return (
            f"Compressed reasoning ({evidence}): input-specific but near-deterministic; fine for evaluation, "
            "but exploration is low: watch H(Z|X) if you keep training."
        )
    assert regime == DIVERSE_REASONING
    return f"Healthy ({evidence}): reasoning depends on the input; keep training and re-check the next checkpoint."


# ---------------------------------------------------------------------------------------------------------------
# Two checkpoints


def paired_differences(
    before: Diagnosis,
    after: Diagnosis,
    *,
    scope: str = "first_turn",
    num_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, tuple[float, float, float]]:
    """`{key: (after - before, low, high)}` for the [`PAIRED_KEYS`], with a paired cluster-bootstrap interval.

    Each resample draws the prompts (groups) common to both diagnoses with replacement and weights every chain of
    a drawn prompt, in both, by how often it was drawn; the interval is the percentile interval of the differences,
    widened for few prompts as the diagnostics' own intervals are (`mi_uncertainty.small_sample_factor`).
    """
    a, b = before.scopes[scope], after.scopes[scope]
    common = sorted(set(a.groups) & set(b.groups))
    if len(common) < 2:
        raise ValueError(
            f"{before.name} and {after.name} share {len(common)} prompt(s) in the {scope} scope; a paired "
            "comparison needs the same prompts (at least 2) in both: roll both out on the same task and seed"
        )
    index = {group: i for i, group in enumerate(common)}
    generator = torch.Generator().manual_seed(seed)
    drawn = torch.randint(len(common), (num_resamples, len(common)), generator=generator)  # (B, J)
    counts = torch.zeros(num_resamples, len(common), dtype=torch.float64)
    counts.scatter_add_(1, drawn, torch.ones_like(drawn, dtype=torch.float64))

    def proxies(report: ScopeReport, counts: torch.Tensor) -> dict[str, torch.Tensor]:
        terms = chain_terms(report.logp, report.lengths, report.target, report.same)
        cluster = torch.tensor([index.get(group, -1) for group in report.groups])  # (N,) -1: prompt not shared
        weights = torch.where(cluster >= 0, counts[:, cluster.clamp(min=0)], torch.zeros(()))  # (B, N)
        return resampled_proxies(terms, weights)

    ones = torch.ones(1, len(common), dtype=torch.float64)
    resampled_a, resampled_b = proxies(a, counts), proxies(b, counts)
    point_a, point_b = proxies(a, ones), proxies(b, ones)
    factor = small_sample_factor(len(common), level)
    quantiles = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    out = {}
    for key in PAIRED_KEYS:
        diff = resampled_b[key] - resampled_a[key]  # (B,)
        estimate = (point_b[key] - point_a[key]).item()
        low, high = torch.nanquantile(diff, quantiles).tolist()
        out[key] = (estimate, estimate - factor * (estimate - low), estimate + factor * (high - estimate))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Terminal table


def _cell(metrics: dict[str, float], key: str) -> str:
    value = metrics[key]
    low, high = metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
    if low is None or math.isnan(low):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def format_report(diagnoses: Sequence[Diagnosis], comparisons: Sequence[dict] = ()) -> str:
    """The terminal report: per scope a table of the proxies (one column per diagnosis), the text metrics, the
    regimes with their thresholds, the paired differences between consecutive diagnoses, and the action line."""
    lines = []
    width = max(28, *(len(d.name) + 2 for d in diagnoses))
    for scope in MI_SCOPES:
        present = [d for d in diagnoses if scope in d.scopes]
        if not present:
            continue
        first = present[0].scopes[scope].metrics
        lines.append(
            f"{scope}: {int(first['num_pairs'])} chains x {int(first['num_columns'])} contexts "
            f"(95% bootstrap intervals over prompts)"
        )
        lines.append(f"{'':<18}" + "".join(f"{d.name:>{width}}" for d in present))
        for key in TABLE_KEYS:
            lines.append(
                f"{LABELS[key]:<18}" + "".join(f"{_cell(d.scopes[scope].metrics, key):>{width}}" for d in present)
            )
        pvalues = "".join(f"{d.scopes[scope].metrics['retrieval_pvalue']:>{width}.3g}" for d in present)
        lines.append(f"{'permutation p':<18}" + pvalues)
        lines.append(f"{'regime':<18}" + "".join(f"{d.scopes[scope].regime:>{width}}" for d in present))
        lines.append("")
    lines.append("text template metrics of the reasoning")
    for key in TEXT_KEYS[:-1]:
        lines.append(f"{key:<22}" + "".join(f"{d.text[key]:>{width}.3f}" for d in diagnoses))
    lines.append("")
    for comparison in comparisons:
        lines.append(f"{comparison['after']} - {comparison['before']} (first_turn, paired over the same prompts)")
        for key, (diff, low, high) in comparison["differences"].items():
            lines.append(f"  {LABELS[key].strip():<16}{diff:+.3f} [{low:+.3f}, {high:+.3f}]")
        lines.append("")
    last = diagnoses[-1]
    lines.append(
        f"regime thresholds: MI-Est {last.mi_threshold:g} nats/token, H(Z|X) {last.entropy_threshold:g} nats/token"
    )
    for diagnosis in diagnoses:
        lines.append(f"{diagnosis.name}: {diagnosis.action}")
    return "\n".join(lines)
