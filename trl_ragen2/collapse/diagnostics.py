"""RAGEN-2 MI diagnostics during TRL training: a config, a runner for trainers, and a callback for `GRPOTrainer`.

Right after a GRPO trainer generates and scores a batch (before any filtering), [`MIDiagnostics.on_batch`] samples
(context, reasoning) pairs in two scopes, cross-scores every sampled chain under every context with the current
policy, and appends the MI proxies of `trl_ragen2.collapse.mi` to the trainer's metrics, which TRL averages and logs:

- `ragen2/mi/first_turn/<key>` and `ragen2/mi/trajectory/<key>` for every key of [`~mi.mi_metrics`] plus
  `mi_zscore_ema(_seq)` / `marginal_std_ema(_seq)`,
- `ragen2/mi/<scope>/num_pairs` (chains in the estimate), `num_dropped_empty` (draws whose reasoning was empty),
  `num_unscored` (pairs the engine could not score), `scored_tokens` (the prefill tokens of the pairs scored, the
  cost model's unit), `time_s` (wall time, the largest over processes) and
  `vllm_engine` (1 when vLLM scored the scope, 0 for transformers),
- the permutation p-value and bootstrap intervals of each scope's proxies (`trl_ragen2.collapse.mi_uncertainty`), and
  the text template metrics of the whole batch's reasoning, `ragen2/text/<key>`
  (`trl_ragen2.collapse.text_diagnostics`).

Schedule: at the first optimizer step (logged as step 1) and then at every step that is a multiple of
`every_n_steps` (5, 10, ...), in train mode only, as in RAGEN; a due step without a generated batch (with
`steps_per_generation` > `gradient_accumulation_steps`) runs at the next one. A scope that cannot be computed logs
NaN for all its keys (TRL reports a logging window of NaNs as `None`) and a warning with the reason (once per reason).
With several processes the pairs are drawn identically everywhere, each process scores its own chains against all
contexts, and every process logs the same numbers. The two scopes of a batch share scores of identical
(context, chain) pairs, so single-turn batches pay for the trajectory scope only where its draws differ.

Cost: each run scores about `num_samples` chains under every context of each scope (8 prompts -> 8 columns for the
first turn; up to `num_samples` distinct histories for multi-turn trajectories), forward passes only.
`num_negatives` bounds it at `num_samples x (num_negatives + 1)` pairs per scope, at the price of a biased estimate.

Plain `trl.GRPOTrainer`:

```python
from trl_ragen2.collapse.diagnostics import MIDiagnosticsCallback, MIDiagnosticsConfig

trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)
MIDiagnosticsCallback(MIDiagnosticsConfig(every_n_steps=5)).attach(trainer)
trainer.train()
```

The EMA state is saved into each `checkpoint-{step}` folder (`mi_diagnostics_state.json`) and restored on resume.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, asdict, dataclass, field

from transformers import TrainerCallback

from ..runs.checkpoints import CheckpointError, atomic_write_json, read_json_state
from ..runs.keys import MI_SCOPES, MI_TIME, mi_key, text_key
from .mi import DEFAULT_KS, EMA_KEYS, MARGINAL_MODES, MIZScoreEMA, mi_metric_keys, mi_metrics
from .mi_uncertainty import DEFAULT_BOOTSTRAP, DEFAULT_LEVEL, DEFAULT_PERMUTATIONS, scope_uncertainty, uncertainty_keys
from .scoring.collective import ProcessGroup
from .scoring.engine_choice import TRANSFORMERS, VLLM, EngineProbe, EngineSelector
from .scoring.pairs import NEGATIVE_SAMPLING, PairBuilder
from .scoring.reasoning import ReasoningExtractor
from .scoring.scopes import LocalRollouts, ScopeResult, ScoreMemo, gather_rows, score_scope
from .scoring.transformers_scorer import DEFAULT_PACK_TOKENS
from .scoring.vllm_scorer import VLLMCrossScorer
from .text_diagnostics import batch_text_metrics


logger = logging.getLogger(__name__)

ENGINES = ("auto", "transformers", "vllm")
DEFAULT_TRAJECTORY_CHAINS = 16
STATE_FILE = "mi_diagnostics_state.json"
COUNT_KEYS = ("num_pairs", "num_dropped_empty", "num_unscored", "scored_tokens", "time_s", "vllm_engine")


@dataclass
class MIDiagnosticsConfig:
    """Settings of the RAGEN-2 MI diagnostics, the one definition of them: a trainer config's `mi_*` fields are made
    from these fields, with their defaults and help texts (`trl_ragen2.grpo.grpo_config.MIDiagnosticsArguments`).

    Parameters:
        enabled (`bool`, defaults to `True`): run the diagnostics at all.
        every_n_steps (`int`, defaults to `5`): run at step 1 and every multiple of this (RAGEN's `compute_freq`).
        num_samples (`int`, defaults to `64`): sampled pairs per scope (RAGEN's `num_samples`).
        trajectory_chains (`int` or `None`, defaults to `16`): chains of the trajectory scope that are scored, a
            uniform subset of its kept draws, each under every drawn context (all of them are still the columns).
            Every proxy is a mean over chains of a term that depends on the chain's whole row, so the estimate is
            unbiased for the full matrix's; the bootstrap interval, which resamples chains, widens to say so. The
            trajectory scope costs chains x columns pairs, so this divides its cost by about columns / chains.
            `None` scores every draw's chain (RAGEN).
        scopes (`tuple[str, ...]`, defaults to `("first_turn", "trajectory")`): which scopes to compute:
            `first_turn`, the initial prompt against the first turn's reasoning; `trajectory`, the history up to a
            turn against that turn's reasoning.
        engine (`str`, defaults to `"auto"`): `"transformers"` (exact, KV-cache reuse), `"vllm"` (the trainer's vLLM
            prompt logprobs), or `"auto"`: transformers without vLLM; with vLLM, each scope is scored by the engine
            measured faster on it (`trl_ragen2.collapse.scoring.engine_choice`).
        max_tokens_per_chunk (`int`, defaults to `16384`): token budget of one scoring forward (transformers).
        pack_tokens (`int` or `None`, defaults to `128`): lane width for packing chains side by side (transformers);
            `None` scores one chain per row. The scores are the same; only the time changes.
        num_negatives (`int` or `None`, defaults to `None`): score each chain against its own context and this many
            negatives instead of all columns: cheaper, but a biased estimate (random negatives: InfoNCE, biased low,
            at most log(K+1); similar negatives: MI overestimated).
        negative_sampling (`str`, defaults to `"random"`): `"random"` or `"similar"` (token-set Jaccard).
        marginal (`str`, defaults to `"ragen"`): per-token marginal of MI-Est, `"ragen"` (RAGEN's code, the paper's
            curves) or `"paper"` (the paper's Eq. 1).
        ema_alpha (`float`, defaults to `0.9`): decay of the MI-ZScore-EMA sigma.
        ks (`tuple[int, ...]`, defaults to `(2, 4, 8)`): Recall@k.
        seed (`int`, defaults to `0`): seed of the pair sampling (combined with the step and scope).
        num_permutations (`int`, defaults to `1000`): label shuffles of the permutation test of retrieval above
            chance (`retrieval_pvalue`); 0 switches it off.
        num_bootstrap (`int`, defaults to `1000`): bootstrap resamples of the intervals (`<key>_ci_low/high`); 0
            switches them off.
        confidence_level (`float`, defaults to `0.95`): level of the intervals and of `retrieval_null_high`.
        text_metrics (`bool`, defaults to `True`): also log the text template metrics of the batch's reasoning
            (`ragen2/text/...`, see `trl_ragen2.collapse.text_metrics`) at the same steps.
        field_names (`Mapping[str, str]`, *optional*): how the errors name a field, e.g. `{"every_n_steps":
            "mi_every_n_steps"}` for a trainer config that sets it; `MIDiagnosticsConfig.<field>` otherwise. Not
            stored.
    """

    enabled: bool = field(default=True, metadata={"help": "Run the RAGEN-2 MI collapse diagnostics."})
    every_n_steps: int = field(default=5, metadata={"help": "Run at step 1, then every N steps (RAGEN: 5)."})
    num_samples: int = field(default=64, metadata={"help": "Pairs sampled per scope (RAGEN: 64)."})
    trajectory_chains: int | None = field(
        default=DEFAULT_TRAJECTORY_CHAINS,
        metadata={"help": "Trajectory chains scored, a uniform subset, against every context (None: all, RAGEN)."},
    )
    scopes: tuple[str, ...] = field(default=MI_SCOPES, metadata={"help": "Scopes: first_turn and/or trajectory."})
    engine: str = field(
        default="auto", metadata={"help": "'transformers', 'vllm' or 'auto' (with vLLM: the faster per scope)."}
    )
    max_tokens_per_chunk: int = field(default=16384, metadata={"help": "Token budget of one scoring forward."})
    pack_tokens: int | None = field(
        default=DEFAULT_PACK_TOKENS,
        metadata={"help": "Lane width for packing chains side by side in scoring (None: one per row)."},
    )
    num_negatives: int | None = field(
        default=None, metadata={"help": "Negatives per chain instead of all prompts (biased, cheaper)."}
    )
    negative_sampling: str = field(default="random", metadata={"help": "'random' or 'similar' negatives."})
    marginal: str = field(default="ragen", metadata={"help": "'ragen' (plotted curves) or 'paper' (Eq. 1)."})
    ema_alpha: float = field(default=0.9, metadata={"help": "EMA decay of MI-ZScore-EMA's sigma (paper: 0.9)."})
    ks: tuple[int, ...] = field(default=DEFAULT_KS, metadata={"help": "Recall@k cut-offs."})
    seed: int = field(default=0, metadata={"help": "Seed of the pair sampling (with the step and the scope)."})
    num_permutations: int = field(
        default=DEFAULT_PERMUTATIONS, metadata={"help": "Label shuffles of the retrieval permutation test (0: off)."}
    )
    num_bootstrap: int = field(
        default=DEFAULT_BOOTSTRAP, metadata={"help": "Bootstrap resamples of the intervals (0: off)."}
    )
    confidence_level: float = field(default=DEFAULT_LEVEL, metadata={"help": "Level of the MI confidence intervals."})
    text_metrics: bool = field(
        default=True, metadata={"help": "Also log distinct-n, self-BLEU and n-gram overlap of the reasoning."}
    )
    field_names: InitVar[Mapping[str, str] | None] = None

    def __post_init__(self, field_names: Mapping[str, str] | None):
        def named(name: str) -> str:
            return (field_names or {}).get(name, f"MIDiagnosticsConfig.{name}")

        self.scopes = (self.scopes,) if isinstance(self.scopes, str) else tuple(self.scopes)
        self.ks = tuple(self.ks)
        checks = [
            ("every_n_steps", self.every_n_steps, self.every_n_steps >= 1, "use an integer >= 1 (RAGEN uses 5)"),
            ("num_samples", self.num_samples, self.num_samples >= 1, "use an integer >= 1 (RAGEN uses 64)"),
            (
                "trajectory_chains",
                self.trajectory_chains,
                self.trajectory_chains is None or self.trajectory_chains >= 2,
                "use an integer >= 2, or None to score every chain (RAGEN)",
            ),
            (
                "scopes",
                self.scopes,
                bool(self.scopes) and set(self.scopes) <= set(MI_SCOPES),
                f"choose from {MI_SCOPES}, or set {named('enabled')}=False",
            ),
            ("engine", self.engine, self.engine in ENGINES, f"choose one of {ENGINES}"),
            ("max_tokens_per_chunk", self.max_tokens_per_chunk, self.max_tokens_per_chunk >= 1, "use an integer >= 1"),
            (
                "pack_tokens",
                self.pack_tokens,
                self.pack_tokens is None or self.pack_tokens >= 1,
                "use an integer >= 1, or None for one chain per row",
            ),
            (
                "num_negatives",
                self.num_negatives,
                self.num_negatives is None or self.num_negatives >= 1,
                "use None (score all columns) or an integer >= 1",
            ),
            (
                "negative_sampling",
                self.negative_sampling,
                self.negative_sampling in NEGATIVE_SAMPLING,
                f"choose one of {NEGATIVE_SAMPLING}",
            ),
            ("marginal", self.marginal, self.marginal in MARGINAL_MODES, f"choose one of {MARGINAL_MODES}"),
            ("ema_alpha", self.ema_alpha, 0.0 <= self.ema_alpha < 1.0, "use a value in [0, 1) (RAGEN uses 0.9)"),
            (
                "ks",
                self.ks,
                all(isinstance(k, int) and k >= 1 for k in self.ks),
                "use positive integers, e.g. (2, 4, 8)",
            ),
            ("num_permutations", self.num_permutations, self.num_permutations >= 0, "use 0 (off) or e.g. 1000"),
            ("num_bootstrap", self.num_bootstrap, self.num_bootstrap >= 0, "use 0 (off) or e.g. 1000"),
            ("confidence_level", self.confidence_level, 0 < self.confidence_level < 1, "use a level in (0, 1)"),
        ]
        for name, value, ok, fix in checks:
            if not ok:
                raise ValueError(f"{named(name)}={value!r} is invalid; {fix}")
        if len(set(self.scopes)) != len(self.scopes):
            raise ValueError(f"{named('scopes')}={self.scopes!r} repeats a scope; list each scope once")


class MIDiagnostics:
    """Runs the MI diagnostics on GRPO batches and keeps their EMA state.

    Args:
        config (`MIDiagnosticsConfig`, *optional*): defaults to `MIDiagnosticsConfig()`.
        extractor (`Callable[[str], str]`, *optional*): turn text -> reasoning text; `<think> ... </think>` by default.
        scorer (*optional*): a ready cross-scorer (`score(contexts, chains, mask)`); built from the trainer otherwise.
    """

    def __init__(
        self, config: MIDiagnosticsConfig | None = None, *, extractor: ReasoningExtractor | None = None, scorer=None
    ):
        self.config = config if config is not None else MIDiagnosticsConfig()
        self.extractor = extractor
        self.scorer = scorer
        self.engines = EngineSelector()  # `engine="auto"` with a vLLM trainer: the measured choice per scope
        self.ema = {scope: MIZScoreEMA(self.config.ema_alpha) for scope in self.config.scopes}
        self.next_step = 1  # 1-indexed optimizer step at which the diagnostics run next
        # The matrices of the last run, for the sample log (`trl_ragen2.grpo.sample_log`); replaced at each run
        self.last_step: int | None = None
        self.last_results: dict[str, ScopeResult] = {}
        self._warned: set[str] = set()
        self.metric_keys = (*mi_metric_keys(self.config.ks), *EMA_KEYS, *COUNT_KEYS, *uncertainty_keys(self.config.ks))

    # -----------------------------------------------------------------------------------------------------------
    # Schedule

    def is_due(self, step: int) -> bool:
        """Whether the diagnostics run at this 1-indexed optimizer step (`trainer.state.global_step + 1`)."""
        return self.config.enabled and step >= self.next_step

    def _advance(self, step: int) -> None:
        n = self.config.every_n_steps
        self.next_step = (step // n + 1) * n

    # -----------------------------------------------------------------------------------------------------------
    # Trainer entry point

    def on_batch(self, trainer, rows: Sequence[dict] | None, batch: dict) -> dict[str, float]:
        """Compute and log the diagnostics if due; call right after `_generate_and_score_completions`.

        Every process must call it for every generated batch (it runs collectives when due). Returns the logged
        values (`{}` when not due or in eval mode); a scope that fails is logged as NaN with a warning.
        """
        if not trainer.model.training:
            return {}
        step = trainer.state.global_step + 1
        if not self.is_due(step):
            return {}
        self._advance(step)
        tokenizer = trainer.processing_class
        group = ProcessGroup(trainer.accelerator)
        metrics = self.compute(
            batch,
            rows,
            tokenizer=tokenizer,
            scorer=self._scorer_for(trainer),
            group=group,
            step=step,
            sync_forwards=_is_sharded(trainer),
        )
        for key, value in metrics.items():
            trainer._metrics["train"][key].append(value)
        return metrics

    def _scorer_for(self, trainer):
        """The scorer, or with `engine="auto"` on a vLLM trainer `{engine: scorer}` for the per-scope choice."""
        if self.scorer is not None:
            return self.scorer
        engine = self.config.engine
        if engine == "auto" and getattr(trainer, "use_vllm", False):
            self.scorer = {
                TRANSFORMERS: self._build_scorer(trainer, TRANSFORMERS),
                VLLM: self._build_scorer(trainer, VLLM),
            }
        else:
            self.scorer = self._build_scorer(trainer, VLLM if engine == VLLM else TRANSFORMERS)
        return self.scorer

    def _build_scorer(self, trainer, engine: str):
        if engine == VLLM:
            return VLLMCrossScorer.from_trainer(trainer)
        from .scoring.transformers_scorer import TransformersCrossScorer

        return TransformersCrossScorer(
            trainer.model,
            max_tokens_per_chunk=self.config.max_tokens_per_chunk,
            pack_tokens=self.config.pack_tokens,
            accelerator=trainer.accelerator,
            show_progress=trainer.accelerator.is_main_process and not trainer.args.disable_tqdm,
        )

    # -----------------------------------------------------------------------------------------------------------
    # Trainer-free core

    def compute(
        self,
        batch: dict,
        rows: Sequence[dict] | None,
        *,
        tokenizer,
        scorer,
        group: ProcessGroup | None = None,
        step: int = 1,
        sync_forwards: bool = False,
    ) -> dict[str, float]:
        """All scopes on one batch: `{"ragen2/mi/<scope>/<key>": value}`; a collective with several processes."""
        began = time.perf_counter()
        group = group if group is not None else ProcessGroup()
        builder = PairBuilder(tokenizer, self.extractor)
        pad_token_id = getattr(getattr(tokenizer, "tokenizer", tokenizer), "pad_token_id", None)
        local, error = None, None
        try:
            local = LocalRollouts.from_batch(batch, rows, pad_token_id)
        except Exception as exc:  # reported below on every process, never raised mid-collective
            error = f"reading the batch failed: {exc!r}"
        infos, offset, errors = gather_rows(local, error, group)
        memo = ScoreMemo()  # scores shared by the scopes of this batch
        metrics = {}
        self.last_step, self.last_results = step, {}
        if self.config.text_metrics:  # ragen2/text/...: text template metrics of the same batch
            text, text_error = batch_text_metrics(local, builder, group, error)
            metrics.update({text_key(key): value for key, value in text.items()})
            if text_error:
                self._warn_once("text", text_error)
        for scope in self.config.scopes:
            engine, probe, scope_scorer = None, None, scorer
            if isinstance(scorer, dict):  # `engine="auto"` with vLLM: the scope's measured engine, or a probe for it
                engine = self.engines.engine_for(scope)
                scope_scorer = scorer[engine] if engine is not None else (probe := EngineProbe(scorer, group))
            if errors:
                result = ScopeResult(error="; ".join(errors))
            else:
                result = score_scope(
                    scope,
                    local=local,
                    infos=infos,
                    offset=offset,
                    group=group,
                    builder=builder,
                    scorer=scope_scorer,
                    num_samples=self.config.num_samples,
                    num_chains=self.config.trajectory_chains if scope == "trajectory" else None,
                    seed=self.config.seed,
                    step=step,
                    num_negatives=self.config.num_negatives,
                    negative_sampling=self.config.negative_sampling,
                    sync_forwards=sync_forwards,
                    memo=memo,
                )
            self.last_results[scope] = result
            if probe is not None:  # every process holds the same gathered probe times
                engine = probe.chosen or TRANSFORMERS  # nothing probed (every pair already scored): not decided
                if probe.chosen is not None and result.error is None:
                    self.engines.record(scope, probe.seconds, probe.tokens)
            scope_values = self._scope_metrics(scope, result, step)
            vllm = engine == VLLM if engine is not None else isinstance(scorer, VLLMCrossScorer)
            scope_values["vllm_engine"] = float(vllm)
            metrics.update({mi_key(scope, key): value for key, value in scope_values.items()})
        metrics[MI_TIME] = max(group.all_gather(time.perf_counter() - began))
        return metrics

    def _scope_metrics(self, scope: str, result: ScopeResult, step: int = 1) -> dict[str, float]:
        values = dict.fromkeys(self.metric_keys, math.nan)
        if result.error is None:
            values.update(
                mi_metrics(
                    result.logp,
                    result.lengths,
                    result.target,
                    result.same,
                    ks=self.config.ks,
                    marginal=self.config.marginal,
                )
            )
            ema_state = self.ema[scope].state_dict()  # before this batch, for the intervals of MI-ZScore-EMA
            values.update(self.ema[scope].update(values))
            values.update(scope_uncertainty(result, self.config, scope=scope, step=step, ema_state=ema_state))
        else:
            self._warn_once(scope, result.error)
        num_pairs = 0 if result.logp is None else result.logp.shape[0]
        values.update(
            num_pairs=float(num_pairs),
            num_dropped_empty=float(result.num_dropped_empty),
            num_unscored=float(result.num_unscored),
            scored_tokens=float(result.scored_tokens),
            time_s=result.time_s,
        )
        return values

    def _warn_once(self, scope: str, reason: str) -> None:
        if (scope, reason) not in self._warned:
            self._warned.add((scope, reason))
            logger.warning(
                "MI diagnostics: scope %r could not be computed (%s); its keys are logged as NaN", scope, reason
            )

    # -----------------------------------------------------------------------------------------------------------
    # State

    def state_dict(self) -> dict:
        """The resumable state (next diagnostics step, EMA per scope) and the config, as JSON-ready data."""
        return {
            "next_step": self.next_step,
            "ema": {scope: ema.state_dict() for scope, ema in self.ema.items()},
            "engines": self.engines.state_dict(),
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a `state_dict()`; EMA states of scopes this instance does not track are ignored."""
        if "ema" not in state or "next_step" not in state:
            raise ValueError("MIDiagnostics state must hold 'ema' and 'next_step'; pass a dict from state_dict()")
        self.next_step = int(state["next_step"])
        self.engines.load_state_dict(state.get("engines", {}))  # absent in states saved before the per-scope choice
        for scope, ema_state in state["ema"].items():
            if scope in self.ema:
                self.ema[scope].load_state_dict(ema_state)

    def save(self, checkpoint_dir: str | os.PathLike) -> str:
        """Write the state into `checkpoint_dir/mi_diagnostics_state.json` (through a temporary name and a rename,
        so the file is whole or absent); returns the file path."""
        path = os.path.join(checkpoint_dir, STATE_FILE)
        atomic_write_json(path, self.state_dict(), indent=2)
        return path

    def load(self, checkpoint_dir: str | os.PathLike) -> bool:
        """Restore the state saved in `checkpoint_dir`; False (and the state untouched, with a warning) if there is
        none. A file that does not parse raises `trl_ragen2.runs.checkpoints.CheckpointError` naming it."""
        path = os.path.join(checkpoint_dir, STATE_FILE)
        if not os.path.exists(path):
            logger.warning(
                "no %s in %s; MI diagnostics start with a fresh EMA and schedule", STATE_FILE, checkpoint_dir
            )
            return False
        state = read_json_state(path, checkpoint_dir)
        try:
            self.load_state_dict(state)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise CheckpointError(
                f"{path} is not an MI diagnostics state ({error}); resume from another checkpoint"
            ) from error
        return True


def _is_sharded(trainer) -> bool:
    """ZeRO-3 or FSDP: every forward is a collective, so processes must run the same number of them."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    if getattr(trainer, "is_deepspeed_enabled", False):
        plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
        return getattr(plugin, "zero_stage", 0) == 3
    return False


class MIDiagnosticsCallback(TrainerCallback):
    """Adds the RAGEN-2 MI diagnostics to any TRL GRPO-style trainer (`trl.GRPOTrainer` included).

    `TrainerCallback` events never see the generated batch, so [`attach`] wraps the trainer instance's
    `_generate_and_score_completions` (to run [`MIDiagnostics.on_batch`] on its rows and output) and
    `_load_optimizer_and_scheduler` (called by the Trainer on resume, to restore the EMA state); the callback's
    `on_save` writes the state into each checkpoint.

    ```python
    callback = MIDiagnosticsCallback(MIDiagnosticsConfig(every_n_steps=5))
    callback.attach(trainer)  # also registers the callback
    trainer.train()           # or trainer.train(resume_from_checkpoint=True)
    ```
    """

    def __init__(self, config: MIDiagnosticsConfig | None = None, *, extractor: ReasoningExtractor | None = None):
        self.diagnostics = MIDiagnostics(config, extractor=extractor)

    def attach(self, trainer):
        """Hook the diagnostics into `trainer` (once) and register this callback; returns the trainer."""
        if getattr(trainer, "_ragen2_mi_diagnostics", None) is not None:
            raise ValueError("MI diagnostics are already attached to this trainer; attach one callback per trainer")
        for name in ("_generate_and_score_completions", "_load_optimizer_and_scheduler"):
            if not callable(getattr(trainer, name, None)):
                raise ValueError(f"{type(trainer).__name__} has no {name}(); attach to a TRL GRPO-style trainer")
        generate = trainer._generate_and_score_completions
        load_optimizer = trainer._load_optimizer_and_scheduler
        diagnostics = self.diagnostics

        def generate_and_score_with_diagnostics(inputs):
            batch = generate(inputs)
            diagnostics.on_batch(trainer, inputs, batch)
            return batch

        def load_optimizer_and_diagnostics(checkpoint):
            load_optimizer(checkpoint)
            if checkpoint is not None:
                diagnostics.load(checkpoint)

        trainer._generate_and_score_completions = generate_and_score_with_diagnostics
        trainer._load_optimizer_and_scheduler = load_optimizer_and_diagnostics
        trainer._ragen2_mi_diagnostics = diagnostics
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        return trainer

    def on_save(self, args, state, control, **kwargs):
        checkpoint_dir = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if args.should_save and os.path.isdir(checkpoint_dir):
            self.diagnostics.save(checkpoint_dir)
