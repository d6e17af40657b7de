"""`SNRFilteredGRPOTrainer`: TRL's `GRPOTrainer` that updates only on the prompt groups with the most reward variance.

RAGEN-2 (arXiv 2604.06268) §3.3. The trainer is thin: it wires the pure functions of `trl_ragen2.filtering.selection`,
`trl_ragen2.filtering.micro_steps` and `trl_ragen2.filtering.advantages` into GRPOTrainer at these override points,
each calling `super()`:

- `_generate`: when the rollout returned the rewards (`rollout_field`), selects the groups before TRL's scoring
  passes; `_get_per_token_logps_and_entropies` then scores only the kept rows in those passes (and, in the loss,
  hands the entropies to the normalisation below);
- `_calculate_rewards`: keeps the gathered (global) raw rewards, identical on every process;
- `_generate_and_score_completions`: selects groups from those rewards and drops the other rows (with
  `reward_variance_refill`, over further rounds of groups: `trl_ragen2.grpo.refill`); before that, the MI diagnostics
  and, when on, the gradient SNR report of `trl_ragen2.filtering.grad_report` see the whole (first) batch; after it,
  the sample log of `trl_ragen2.grpo.sample_log` records a few groups and the filter's choice;
- `_prepare_inputs`: lays the kept rows out over the micro-steps (full mini-batches, fewer updates);
- `_compute_loss`: renormalises TRL's micro-batch loss so each optimizer step is plain GRPOTrainer's step on its
  kept rows, and keeps TRL's per-row metrics to the kept rows;
- `_save_checkpoint` / `_load_optimizer_and_scheduler`: the filter counters, the auto switch and the MI EMA survive
  resume.

What one override learns and a later one needs goes through two objects of `trl_ragen2.filtering.generation_state`:
the batch being scored (`ScoredGeneration`: its rows, the early selection, the gathered rewards) and what the filter
kept of it (`FilteredGeneration`: the kept groups, the micro-step plan, the loss scale, why a step was empty).

The keep rate in force at each generation (a rho schedule, a warm-up, the auto switch, the exploration guard) comes
from `trl_ragen2.filtering.keep_rate`.

The MI diagnostics (`trl_ragen2.collapse.diagnostics`) run on the pre-filter batch, between generation and filtering.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import asdict, fields
from typing import Any, NamedTuple

import torch
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict

from ..collapse.diagnostics import STATE_FILE as MI_STATE_FILE
from ..collapse.diagnostics import MIDiagnostics, _is_sharded
from ..filtering import micro_steps
from ..filtering.advantages import batch_dependent, used_advantages
from ..filtering.batch_utils import (
    MULTIMODAL_KEYS,
    loss_token_count,
    micro_batches,
    num_rows,
    row_loss_tokens,
    select_rows,
    trim_completion_padding,
    zero_loss_rows,
)
from ..filtering.empty_steps import FILTER_STATE_FILE, EmptyStepGuard, FilterState
from ..filtering.generation_state import FilteredGeneration, ScoredGeneration, weighted_rewards
from ..filtering.grad_report import GradientReport, check_report_settings
from ..filtering.group_metrics import ENTROPY_METRICS, ROW_METRICS, row_mean_entropy
from ..filtering.keep_rate import FilterDecision, GuardedSelection
from ..filtering.micro_steps import MicroStep
from ..filtering.reward_checks import check_finite_rewards, filter_empty_cause, reward_function_error
from ..filtering.rule import FilterRule, KeptRows
from ..filtering.step_metrics import filter_step_metrics
from ..models.vllm_cpu import engine_options, use_cpu_weight_sync, vllm_platform_is_cpu
from ..runs import keys
from ..runs.checkpoints import (
    CheckpointError,
    atomic_write_json,
    load_errors_named,
    read_json_state,
)
from ..runs.run_folder import RunFolderMixin
from .grpo_config import WITHIN_GROUP, SNRFilteredGRPOConfig
from .model_card import RAGEN2_PAPER, training_details
from .refill import RefillMixin
from .sample_log import SampleRecorder


logger = logging.getLogger(__name__)

ENTROPY_STATE_FILE = "entropy_ctrl_state.json"  # TRL's adaptive entropy controller (GRPOTrainer._save_checkpoint)


class TRLGeneration(NamedTuple):
    """What TRL 1.16's `GRPOTrainer._generate` returns, by name (a change in its arity fails loudly here)."""

    prompt_ids: list
    completion_ids: list
    tool_mask: Any
    completions: list
    logprobs: Any
    extra_fields: dict | None  # the rollout_func's extra per-row fields
    images: Any
    tool_images: Any


class SNRFilteredGRPOTrainer(RefillMixin, RunFolderMixin, GRPOTrainer):
    """GRPO with RAGEN-2 SNR-aware filtering (arXiv 2604.06268).

    Before each policy update, prompt groups are scored by the variance of their rollouts' raw rewards (the weighted
    sum of the reward functions, before any normalisation), computed on the whole generation batch gathered across
    processes, so every process makes the same selection even when a group spans two processes. Only the kept
    groups' rows stay in the batch: no forward or backward pass of the loss is spent on the others. The kept rows
    fill the generation's optimizer steps in order, each up to its usual mini-batch (RAGEN's choice: full
    mini-batches, fewer updates), and each optimizer step's gradient equals plain GRPOTrainer's gradient on a batch
    holding only that step's kept rows, for every TRL loss type, with or without the entropy bonus and the KL term,
    whatever the split over micro-batches and processes (see `docs/filtering.md`, "Exactness").

    An optimizer step left without a kept row changes no parameter and no optimizer state; after
    `reward_variance_empty_patience` consecutive empty generations training stops with a message. Evaluation is
    never filtered, and `reward_variance_filtering=None` behaves exactly like `GRPOTrainer`.

    Metrics are logged under `ragen2/filter/...`.

    Args are those of [`~trl.GRPOTrainer`]; `args` is an [`SNRFilteredGRPOConfig`] (the README shows a run).
    """

    _tag_names = ["trl", "grpo", "ragen2", "snr-filtering"]
    _name = "SNR-filtered GRPO (RAGEN-2)"
    _paper = RAGEN2_PAPER

    def __init__(self, model, reward_funcs=None, args: SNRFilteredGRPOConfig | None = None, *pargs, **kwargs):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = SNRFilteredGRPOConfig(f"{name.split('/')[-1] or 'model'}-SNR-GRPO")
        if not hasattr(args, "reward_variance_filtering"):
            raise TypeError(
                f"args must be an SNRFilteredGRPOConfig (it carries the reward_variance_* fields), got "
                f"{type(args).__name__}; build it with SNRFilteredGRPOConfig(**your_grpo_config.to_dict())"
            )
        with engine_options(args):  # the colocate engine's dtype, and a CPU memory error that names the fix
            super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        if self.use_vllm and vllm_platform_is_cpu():
            use_cpu_weight_sync(self.vllm_generation)  # TRL's load_weights cannot reach CPU-packed layers
        self.filter_state = FilterState()  # the filter's counters and auto switch, saved with every checkpoint
        self.filter_rule = FilterRule(args, self.num_generations)  # what the filter keeps of a batch
        self._scored: ScoredGeneration | None = None  # the batch being made and scored (training or evaluation)
        self._filtered: FilteredGeneration | None = None  # what the filter kept of the last training batch
        self._micro_step: MicroStep | None = None  # the micro-step being trained (None: not filtering)
        self._loss_forward: list | None = None  # the loss forward's outputs, inside `_capturing_loss_forward` only
        self.model_card_details: dict[str, str] = {}  # extra model card lines (e.g. the WebShop catalogue), by recipes
        self.empty_step_guard = EmptyStepGuard(self)
        self.add_callback(self.empty_step_guard)
        self.mi_diagnostics = MIDiagnostics(args.mi_diagnostics_config()) if args.mi_diagnostics else None
        check_report_settings(args, sharded=args.grad_report_every_n_steps > 0 and _is_sharded(self))
        self.gradient_report = (
            GradientReport(args.grad_report_every_n_steps, args.grad_report_num_buckets)
            if args.grad_report_every_n_steps
            else None
        )
        settings = args.sample_log_settings()  # what samples.jsonl keeps (`trl_ragen2.grpo.sample_log`)
        self.sample_recorder = SampleRecorder(settings, args.output_dir) if settings.groups else None

    @property
    def generation_rows(self) -> list[dict] | None:
        """The dataset rows (this process's) of the generation batch being made, or of the last one made, for a
        `rollout_func` that needs more than the prompts (`RagenRollout` reads each row's env, seed and env_config);
        None before the first batch."""
        return self._scored.rows if self._scored is not None else None

    @property
    def filtered_generation(self) -> FilteredGeneration | None:
        """What the filter kept of the last training generation batch, and how its rows train; None before one."""
        return self._filtered

    @property
    def micro_step(self) -> MicroStep | None:
        """The micro-step being trained: its rows and loss factors (`trl_ragen2.filtering.micro_steps`); None in
        evaluation or without filtering."""
        return self._micro_step

    # -----------------------------------------------------------------------------------------------------------
    # Rewards and selection

    def _generate(self, prompts):
        result = super()._generate(prompts)
        early = self.args.reward_variance_filtering is not None and not self._refill_on()  # refill selects over rounds
        if self.model.training and early and self._scoring_passes_run():
            extra_fields = TRLGeneration(*result).extra_fields
            self._scored.early_keep = self._selection_from_rollout(extra_fields, len(prompts))
        return result

    def _scoring_passes_run(self) -> bool:
        """Whether TRL runs old-log-prob, importance-sampling or reference passes over the generation batch."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        old_logps = self.args.gradient_accumulation_steps % generate_every != 0
        return old_logps or (self.use_vllm and self.vllm_importance_sampling_correction) or self.beta != 0.0

    def _selection_from_rollout(self, extra_fields: dict | None, local_rows: int) -> torch.Tensor | None:
        """The filter's selection (B,) before TRL's scoring passes, when the rollout already returned the rewards.

        Possible when every reward function names, as its `rollout_field` attribute, the `rollout_func` output
        field holding its reward (as `env_return` does). `None` otherwise.
        """
        fields = [getattr(func, "rollout_field", None) for func in self.reward_funcs]
        if not extra_fields or any(field is None or field not in extra_fields for field in fields):
            return None
        if self.args.reward_variance_metric in ROW_METRICS:
            return None  # the group scores need the rollouts' tokens, known only after the scoring passes
        device = self.accelerator.device
        values = [[float("nan") if v is None else float(v) for v in extra_fields[field]] for field in fields]
        local = torch.tensor(values, dtype=torch.float32, device=device).T  # (B, num_funcs)
        per_func = self.accelerator.gather(local)  # (N_global, num_funcs), as TRL gathers the rewards
        rewards = weighted_rewards(per_func, self.reward_weights)
        keep_rows = self.select_rows_from_rewards(rewards)
        start = self.accelerator.process_index * local_rows
        return keep_rows[start : start + local_rows].to(device)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._scored.scoring_passes_done = True
        try:
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        except Exception as error:
            named = reward_function_error(error, self.reward_funcs, self.reward_func_names)
            if named is None:
                raise
            raise named from error
        check_finite_rewards(rewards_per_func, self.reward_func_names)
        self._scored.rewards_per_func = rewards_per_func  # (N_global, num_funcs), the same on every process
        return rewards_per_func

    def _raw_rewards(self) -> torch.Tensor:
        """Weighted sum of the reward functions per rollout, (N_global,); NaN where no function scored it."""
        return self._scored.raw_rewards(self.reward_weights)

    def select_groups_from_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """Apply the configured selection (and control arm) to raw rewards (N_global,) in group order; returns the
        kept groups (P,)."""
        return self._keep_rows(rewards, self._filter_decision(rewards)).keep_groups

    def select_rows_from_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """Apply the configured selection to raw rewards (N_global,) in group order; returns the kept rows (N_global,)
        (whole groups, or with `"within_group"` some rollouts of every group)."""
        return self._keep_rows(rewards, self._filter_decision(rewards)).keep_rows

    def _keep_rows(self, rewards: torch.Tensor, decision: FilterDecision) -> KeptRows:
        generation_index = self.filter_state.filtered_steps  # batches filtered before this one
        return self.filter_rule.keep(rewards, decision, generation_index=generation_index, select=self._select_groups)

    def _filter_decision(self, rewards: torch.Tensor) -> FilterDecision:
        return self.filter_rule.decide(rewards, self.state.global_step, self.filter_state)

    def _select_groups(self, rewards: torch.Tensor, decision: FilterDecision) -> GuardedSelection:
        return self.filter_rule.select_groups(rewards, decision, self._row_values())

    def _row_values(self) -> dict[str, torch.Tensor]:
        """The per-rollout values of the batch being filtered that a row ranking metric needs (`{}` otherwise)."""
        return self._scored.row_values if self._scored is not None else {}

    def _ranking_row_values(self, batch: dict) -> dict[str, torch.Tensor]:
        """The per-rollout values a row metric ranks by, gathered over processes: `row_lengths` (`"length"`) or
        `row_entropies` (`"entropy"`, `"entropy_variance"`; one forward pass over the pre-filter batch); `{}` for the
        reward metrics."""
        metric = self.args.reward_variance_metric
        if metric not in ROW_METRICS:
            return {}
        mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        if metric not in ENTROPY_METRICS:
            return {"row_lengths": self.accelerator.gather(mask.sum(dim=1).float()).cpu()}  # (N_global,)
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, Lp + Lc)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            # TRL's own forward (the parent's, without the filter's scoring shortcuts): (B, Lc) token entropies
            _, entropies, _ = GRPOTrainer._get_per_token_logps_and_entropies(
                self,
                self.model,
                input_ids,
                attention_mask,
                batch["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
                compute_entropy=True,
            )
        return {"row_entropies": self.accelerator.gather(row_mean_entropy(entropies, mask)).cpu()}  # (N_global,)

    def _before_filtering(self, inputs: list[dict], batch: dict) -> None:
        """Work on the whole (pre-filter) batch: the MI diagnostics, at step 1 and every `mi_every_n_steps`."""
        if self.mi_diagnostics is not None:
            self.mi_diagnostics.on_batch(self, inputs, batch)
        if self.gradient_report is not None:  # norms per reward-variance bucket, no optimizer step
            self.gradient_report.on_batch(self, batch, self._raw_rewards())

    def _generate_and_score_completions(self, inputs):
        self._scored = ScoredGeneration(rows=inputs)  # a rollout_func reads the rows (`generation_rows`)
        batch = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return batch  # evaluation is never filtered
        self._before_filtering(inputs, batch)
        if self.args.reward_variance_filtering is None:
            self._record_samples(inputs, batch, None, None)
            return batch
        filtered = self._refill_and_filter(inputs, batch) if self._refill_on() else self._filter_batch(batch)
        self._record_samples(inputs, batch, self._filtered.keep_groups, self._filtered.keep_rows)  # a pool's, refilled
        return filtered

    def _record_samples(self, inputs: list[dict], batch: dict, keep_groups, keep_rows) -> None:
        """The sample log (`trl_ragen2.grpo.sample_log`): the pre-filter batch, and the groups (`(P,)`) and rollouts
        (`(N_global,)`) the filter kept (None: no filter)."""
        if self.sample_recorder is not None:
            self.sample_recorder.on_batch(self, inputs, batch, keep_groups, keep_rows)

    def _filter_batch(self, batch: dict) -> dict:
        """Drop the rows of the groups the filter does not keep, and record what it kept (`FilteredGeneration`)."""
        rewards = self._raw_rewards()  # (N_global,)
        decision = self._filter_decision(rewards)
        self._scored.row_values = self._ranking_row_values(batch)
        kept = self._keep_rows(rewards, decision)  # (P,) groups, (N_global,) rows
        local_rows = num_rows(batch)
        start = self.accelerator.process_index * local_rows
        device = batch["completion_ids"].device
        local_keep = kept.keep_rows[start : start + local_rows].to(device)  # (B,)
        self._check_early_selection(local_keep)

        used_advantages = self._kept_advantages(kept.keep_rows)  # (N_global,), NaN on filtered rows
        if self._advantages_recomputed():
            batch["advantages"] = used_advantages[start : start + local_rows].to(device)
        self._show_used_advantages(used_advantages)
        return self._keep_local_rows(batch, local_keep.nonzero().squeeze(1), rewards, kept, decision)

    def _keep_local_rows(
        self, batch: dict, index: torch.Tensor, rewards: torch.Tensor, kept: KeptRows, decision, empty_cause=None
    ) -> dict:
        """This process's rows `index` of `batch` (a placeholder row when it keeps none), and the record of the
        filter's choice: `FilteredGeneration` and the `ragen2/filter/*` metrics. `rewards` (N,) and `kept` cover the
        whole batch the filter chose from; `empty_cause` overrides the computed one (a refill that gave up)."""
        keep_groups, keep_rows, guard_added, rule_kept_groups = kept
        if index.numel():
            filtered = trim_completion_padding(select_rows(batch, index), self.pad_to_multiple_of)
        else:
            # This process keeps nothing: a zero-loss row is the source of the placeholders it trains on.
            filtered = zero_loss_rows(select_rows(batch, torch.zeros(1, dtype=torch.long)))
        # The dapo/cispo/vespo normaliser is a global token count: recount it over the kept rows of all processes.
        filtered["num_items_in_batch"] = self.accelerator.gather(loss_token_count(filtered)).sum()

        empty = not bool(keep_rows.any())
        if empty and empty_cause is None:
            empty_cause = filter_empty_cause(self.args, rewards, self.num_generations, decision)
        rollout_rule = self.args.reward_variance_filtering == WITHIN_GROUP  # keeps rollouts, not groups
        kept_fraction = (keep_rows if rollout_rule else keep_groups).float().mean().item()
        scaling = self.args.reward_variance_loss_scaling
        self._filtered = FilteredGeneration(
            keep_groups=keep_groups,
            local_kept_rows=index.numel(),
            empty=empty,
            empty_cause=empty_cause if empty else None,
            loss_scale={"none": 1.0, "linear": kept_fraction, "sqrt": math.sqrt(kept_fraction)}[scaling],
            batch=filtered,  # laid out over the micro-steps by _prepare_inputs
            keep_rows=keep_rows,
        )
        self.filter_state.record(empty, decision)
        logged = filter_step_metrics(
            rewards,
            self.num_generations,
            keep_groups,
            keep_rows,
            empty=empty,
            loss_scale=self._filtered.loss_scale,
            state=self.filter_state,
            decision=decision,
            guard_added=guard_added,
            rule_kept_groups=rule_kept_groups,
            args=self.args,
        )
        for key, value in logged.items():
            self._metrics["train"][key].append(value)
        return filtered

    def _advantages_recomputed(self) -> bool:
        """Whether the loss's advantages differ from TRL's: options TRL defines over the batch, or groups that
        keep only some of their rollouts (their statistics are taken over the kept rollouts, as RAGEN does)."""
        return self.args.reward_variance_filtering == WITHIN_GROUP or batch_dependent(
            self.scale_rewards, self.multi_objective_aggregation
        )

    def _check_early_selection(self, local_keep: torch.Tensor) -> None:
        early = self._scored.early_keep
        skipped = torch.tensor(float(self._scored.scoring_rows_skipped), device=self.accelerator.device)
        skipped = self.accelerator.reduce(skipped, reduction="sum").item()  # over all processes
        self._metrics["train"][keys.FILTER_SCORING_ROWS_SKIPPED].append(skipped)
        if early is not None and bool((local_keep & ~early).any()):
            names = [getattr(func, "__name__", repr(func)) for func in self.reward_funcs]
            raise RuntimeError(
                f"the reward functions {names} declare a `rollout_field`, but the rewards they returned select "
                "other groups than the rollout's fields did, so some kept rows were never scored; make each "
                "function return exactly float(row[rollout_field]), or remove its rollout_field attribute"
            )

    def _kept_advantages(self, keep_rows: torch.Tensor) -> torch.Tensor:
        """The advantage the loss uses for each row of the generation batch (N_global,); NaN for filtered rows."""
        logged = torch.tensor(list(self._logs["advantages"])[-keep_rows.numel() :], dtype=torch.float32)
        return used_advantages(
            keep_rows,
            logged,
            self._scored.rewards_per_func,
            self.reward_weights,
            self.num_generations,
            recompute=self._advantages_recomputed(),
            scale_rewards=self.scale_rewards,
            aggregation=self.multi_objective_aggregation,
        )

    def _show_used_advantages(self, used: torch.Tensor) -> None:
        """The completions table shows the advantage the loss used; NaN marks the rows the filter dropped."""
        history = list(self._logs["advantages"])
        history[-used.numel() :] = used.tolist()
        self._logs["advantages"].clear()
        self._logs["advantages"].extend(history)

    # -----------------------------------------------------------------------------------------------------------
    # Micro-batching and loss

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if not self.model.training or self.args.reward_variance_filtering is None:
            self._micro_step = None
            return inputs
        filtered = self._filtered
        if filtered.batch is not None:
            # GRPOTrainer just generated and split the filtered batch with a floor division that drops the
            # remainder rows; lay it out again so that every kept row is trained on, in full mini-batches.
            self._buffered_inputs, filtered.micro_steps = self._lay_out(filtered.batch, filtered.local_kept_rows)
            filtered.batch = None
        self._micro_step = filtered.micro_steps[self._step % len(filtered.micro_steps)]
        self.empty_step_guard.on_micro_step(has_kept_rows=self._micro_step.unit_rows > 0)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _lay_out(self, batch: dict, kept_rows: int) -> tuple[list[dict], list[MicroStep]]:
        """Shuffle the filtered batch and cut its `kept_rows` rows into this generation's micro-batches (see
        `trl_ragen2.filtering.micro_steps`)."""
        args = self.args
        steps = args.steps_per_generation
        shuffled = shuffle_sequence_dict(batch)
        windows = micro_steps.chunk_windows(self._step, steps, args.gradient_accumulation_steps)
        sizes = micro_steps.fill_chunks(kept_rows, windows, args.per_device_train_batch_size)
        row_tokens = row_loss_tokens(shuffled)[:kept_rows]
        tokens = [int(chunk.sum()) for chunk in row_tokens.split(sizes)]
        local = torch.tensor([sizes, tokens], dtype=torch.long, device=self.accelerator.device).T  # (S, 2)
        gathered = self.accelerator.gather(local.unsqueeze(0)).cpu()  # (P, S, 2)
        plan = micro_steps.plan_micro_steps(
            gathered[..., 0].tolist(),
            gathered[..., 1].tolist(),
            self._step,
            args.gradient_accumulation_steps,
            self.num_iterations,
        )[self.accelerator.process_index]
        aligned = [plan[i].rows for i in range(steps)]
        return micro_batches(shuffled, sizes, aligned, self.pad_to_multiple_of), plan

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        keep = self._scored.scoring_keep() if self._scored is not None else None
        multimodal = any(
            kwargs.get(key) is not None for key in (*MULTIMODAL_KEYS, "token_type_ids", "mm_token_type_ids")
        )
        if keep is not None and not multimodal and keep.numel() == input_ids.size(0) and not keep.all():
            # A scoring pass over the generation batch whose selection is already known: score the kept rows only.
            # The others get NaN, which TRL's importance-sampling step turns into a ratio of 1; they are dropped.
            index = keep.nonzero().squeeze(1)
            logps = torch.full((input_ids.size(0), logits_to_keep), float("nan"), device=input_ids.device)
            if index.numel():
                kept, _, _ = super()._get_per_token_logps_and_entropies(
                    model, input_ids[index], attention_mask[index], logits_to_keep, **kwargs
                )
                logps = logps.to(kept.dtype)
                logps[index] = kept
            self._scored.scoring_rows_skipped += int((~keep).sum())
            return logps, None, None
        result = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs)
        if self._loss_forward is not None:
            self._loss_forward.append(result)  # (logps (B, T), entropies (B, T) or None, aux loss or None)
        return result

    @contextlib.contextmanager
    def _capturing_loss_forward(self):
        """Within the block, the outputs of the forwards TRL's loss runs are appended to the list it yields."""
        self._loss_forward = captured = []
        try:
            yield captured
        finally:
            self._loss_forward = None

    def _compute_loss(self, model, inputs):
        step = self._micro_step if self.model.training else None
        if step is None:
            loss = super()._compute_loss(model, inputs)
            scale = self._filtered.loss_scale if self._filtered is not None else 1.0
            return loss * scale if self.model.training and scale != 1.0 else loss

        entropy_coef = self._entropy_coef_in_force()  # read before TRL's adaptive controller updates it
        lengths = {key: len(values) for key, values in self._metrics["train"].items()}
        with self._capturing_loss_forward() as forwards:
            loss = super()._compute_loss(model, inputs)
        _, entropies, aux_loss = forwards[-1]

        mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
        accumulation = self.current_gradient_accumulation_steps
        policy_factor, entropy_factor = micro_steps.loss_factors(
            self.loss_type,
            step,
            rows=mask.size(0),
            tokens=int(mask.sum()),
            num_processes=self.accelerator.num_processes,
            accumulation_steps=accumulation,
            steps_per_generation=self.args.steps_per_generation,
            num_items_in_batch=float(inputs["num_items_in_batch"]),
        )
        # TRL's loss: policy - coef * entropy_bonus (+ aux). Rescale the terms by their own factors.
        entropy_bonus = torch.zeros((), device=loss.device)
        if entropy_coef and entropies is not None:
            entropy_bonus = (entropies * mask).sum() / mask.sum().clamp(min=1.0) / accumulation
        policy_loss = loss + entropy_coef * entropy_bonus
        aux_term = torch.zeros((), device=loss.device)
        if self.aux_loss_enabled and aux_loss is not None:
            aux_term = self.router_aux_loss_coef * aux_loss / accumulation
            policy_loss = policy_loss - aux_term
        if self.top_entropy_quantile < 1.0:
            entropy_factor = policy_factor  # TRL picks the entropy tokens per micro-batch: no exact reference
        corrected = policy_factor * policy_loss - entropy_factor * entropy_coef * entropy_bonus
        if step.real_rows:  # MoE aux loss: TRL's per-micro-batch term, none for placeholder-only micro-batches
            corrected = corrected + aux_term
        self._correct_metrics(lengths, step, policy_factor * policy_loss.detach())
        return corrected * self._filtered.loss_scale

    def _entropy_coef_in_force(self) -> float:
        """The entropy-bonus coefficient TRL's `_compute_loss` applies to this micro-batch."""
        if not self._entropy_bonus_enabled:
            return 0.0
        if self.use_adaptive_entropy and self._last_world_entropy > self.args.entropy_target:
            return 0.0
        return self.entropy_coef

    def _correct_metrics(self, lengths: dict[str, int], step: MicroStep, policy_contribution: torch.Tensor) -> None:
        """Replace what TRL's `_compute_loss` just logged by its value over the kept rows (nothing without any)."""
        metrics = self._metrics["train"]
        appended = {
            key: values[lengths.get(key, 0) :] for key, values in metrics.items() if len(values) > lengths.get(key, 0)
        }
        if "policy_loss" in appended:
            # The micro-step's share of the unit's policy loss, scaled so the mean over the unit's micro-steps is it.
            share = self.accelerator.reduce(policy_contribution.reshape(1), reduction="mean").item()
            appended["policy_loss"] = [share * self.args.gradient_accumulation_steps] if step.unit_rows else []
        sequence_level = self.importance_sampling_level == "sequence"
        corrected = micro_steps.correct_trl_metrics(appended, step, self.accelerator.num_processes, sequence_level)
        for key in appended:
            kept = metrics[key][: lengths.get(key, 0)] + corrected.get(key, [])
            if kept:
                metrics[key] = kept
            else:
                del metrics[key]

    # -----------------------------------------------------------------------------------------------------------
    # The trainer's checkpoint state (the run folder's lifecycle is `trl_ragen2.runs.run_folder`) and model card

    def ragen2_state_files(self) -> list[str]:
        """The trainer's own state files of a checkpoint (`trl_ragen2.runs.run_folder`): the filter counters, the MI
        state when the diagnostics run, and TRL's adaptive entropy controller when it runs."""
        files = [*super().ragen2_state_files(), FILTER_STATE_FILE]
        if self.mi_diagnostics is not None:
            files.append(MI_STATE_FILE)
        if self.use_adaptive_entropy:
            files.append(ENTROPY_STATE_FILE)
        return files

    def save_ragen2_state(self, checkpoint_dir: str) -> None:
        """Write the trainer's RAGEN-2 state (filter counters and auto switch, MI EMA) into a checkpoint folder, each
        file through a temporary name and a rename."""
        super().save_ragen2_state(checkpoint_dir)
        atomic_write_json(os.path.join(checkpoint_dir, FILTER_STATE_FILE), asdict(self.filter_state))
        if self.mi_diagnostics is not None:
            self.mi_diagnostics.save(checkpoint_dir)

    def load_ragen2_state(self, checkpoint_dir: str) -> None:
        """Restore the state [`save_ragen2_state`] wrote. A missing file is an error naming it, or a warning with
        `resume_allow_missing_state=True`; a damaged one is an error naming it."""
        super().load_ragen2_state(checkpoint_dir)
        path = os.path.join(checkpoint_dir, FILTER_STATE_FILE)
        if self.resume_file_present(path):
            state = read_json_state(path, checkpoint_dir)
            unknown = sorted(set(state) - {f.name for f in fields(FilterState)}) if isinstance(state, dict) else None
            if unknown or not isinstance(state, dict):
                raise CheckpointError(
                    f"{path} is not a filter state of this trl-ragen2 version (unknown keys: {unknown}); resume "
                    "with the trl-ragen2 version that wrote it, or from another checkpoint"
                )
            self.filter_state = FilterState(**state)
        if self.mi_diagnostics is not None and self.resume_file_present(os.path.join(checkpoint_dir, MI_STATE_FILE)):
            with load_errors_named(checkpoint_dir, MI_STATE_FILE):
                self.mi_diagnostics.load(checkpoint_dir)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's card plus a "RAGEN-2 training details" section (`trl_ragen2.grpo.model_card`), appended on the main
        process."""
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        section = training_details(self.args, self.filter_state, self.model_card_details)
        with open(os.path.join(self.args.output_dir, "README.md"), "a") as f:
            f.write(section)
