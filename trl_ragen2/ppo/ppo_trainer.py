"""`SNRFilteredPPOTrainer`: RAGEN-2's PPO (a critic and per-token GAE) with SNR-aware filtering, on TRL's GRPO stack.

RAGEN-2 (arXiv 2604.06268) trains its main results with PPO: γ = λ = 1 GAE from a separate critic, the actor's
clipped objective (0.2 / 0.28), and the SNR filter applied before both updates, so the critic also trains only on
the kept prompt groups. TRL 1.16 has no PPOTrainer, so this class adds a critic to [`SNRFilteredGRPOTrainer`] and
keeps everything else of TRL's: generation (transformers or vLLM), multi-turn tool masks, the policy loss, the
clipping, the entropy bonus, logging and checkpoints. The overrides, each calling `super()`:

- `_before_filtering`: tags each row with its index, to find its return and turns after filtering;
- `_generate_and_score_completions`: after the filter, computes the critic's values for the kept rows, places
  the rewards on model tokens, runs GAE and replaces the `(B,)` group advantages with `(B, T)` GAE advantages
  (TRL's loss accepts both), adding the `returns` and `old_values` the critic trains on;
- `_prepare_inputs` / `training_step`: after the policy's backward on a micro-batch, the critic's clipped value
  loss on the same micro-batch, its optimizer stepped at the gradient-accumulation boundary;
- `_compute_loss`: with `kl_in_reward=True` the KL is a reward penalty, so TRL's KL loss term is turned off;
- `create_scheduler`, `save_model`, `save_ragen2_state` / `load_ragen2_state`: the critic's schedule, weights
  (`output_dir/critic`, `checkpoint-N/critic`), optimizer and scheduler state.

Metrics are logged under `ragen2/ppo/...`, next to the filter's `ragen2/filter/...`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os

import torch
from accelerate.utils import gather_object
from transformers import get_scheduler
from transformers.optimization import GreedyLR
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import disable_dropout_in_model

from ..filtering.batch_utils import ROW_INDEX_KEY
from ..grpo.grpo_trainer import SNRFilteredGRPOTrainer
from ..grpo.model_card import RAGEN2_PAPER
from ..runs import keys
from ..runs.checkpoints import atomic_torch_save, load_errors_named
from .critic import (
    CRITIC_DIR,
    CRITIC_OPTIMIZER_FILE,
    CRITIC_SCHEDULER_FILE,
    build_value_model,
    check_value_model,
    completion_values,
    load_value_model_weights,
    value_head_name,
)
from .gae import (
    clipped_value_loss,
    explained_variance_from_vars,
    kl_reward_penalty,
    masked_gae,
    masked_moments,
    moments_to_mean_var,
    place_rewards,
    whiten,
)
from .ppo_config import SNRFilteredPPOConfig


logger = logging.getLogger(__name__)


class SNRFilteredPPOTrainer(SNRFilteredGRPOTrainer):
    """PPO with a critic, per-token GAE and RAGEN-2 SNR-aware filtering (arXiv 2604.06268).

    Each generation step: rollouts are scored, the SNR filter keeps the prompt groups with the most reward
    variance (see [`SNRFilteredGRPOTrainer`]), the critic estimates V(s) on the kept rows, and GAE over the model
    tokens (feedback tokens of multi-turn rollouts are skipped) gives per-token advantages and return targets.
    Then, per micro-batch, the policy takes TRL's clipped-ratio loss with those advantages and the critic the
    clipped value loss, each with its own optimizer. Empty filter steps change neither.

    With `num_generations=1` (classic PPO) the filter has no groups and is disabled (see
    [`SNRFilteredPPOConfig`]).

    Example:

    ```python
    from trl_ragen2 import SNRFilteredPPOConfig, SNRFilteredPPOTrainer

    args = SNRFilteredPPOConfig(output_dir="out", num_generations=16, reward_variance_top_p=0.9)
    trainer = SNRFilteredPPOTrainer(model="Qwen/Qwen2.5-3B-Instruct", reward_funcs=my_reward, args=args,
                                    train_dataset=dataset)
    trainer.train()
    trainer.save_model()  # the policy in output_dir, the critic in output_dir/critic
    ```

    Args are those of [`~trl.GRPOTrainer`] (`args` is an [`SNRFilteredPPOConfig`]), plus:
        value_model (`PreTrainedModel`, *optional*):
            The critic: any model whose forward returns `.logits` of shape (B, L, 1), e.g. an
            `AutoModelForTokenClassification` with `num_labels=1`. Default: `args.critic_model_name_or_path`, else
            a copy of the policy's backbone with a new scalar head.
        critic_peft_config (`PeftConfig`, *optional*):
            Train the critic as a PEFT (e.g. LoRA) model; its value head is always trained in full.
    """

    _tag_names = ["trl", "ppo", "ragen2", "snr-filtering"]
    _name = "SNR-filtered PPO (RAGEN-2)"
    _paper = RAGEN2_PAPER

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: SNRFilteredPPOConfig | None = None,
        *pargs,
        value_model=None,
        critic_peft_config=None,
        **kwargs,
    ):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = SNRFilteredPPOConfig(f"{name.split('/')[-1] or 'model'}-SNR-PPO")
        if not isinstance(args, SNRFilteredPPOConfig):
            raise TypeError(
                f"args must be an SNRFilteredPPOConfig (it carries the critic and GAE fields), got "
                f"{type(args).__name__}; build it with SNRFilteredPPOConfig(**your_config.to_dict())"
            )
        # Built before GRPOTrainer wraps the policy (PEFT adapters, device placement), from its original weights.
        critic = self._build_critic(model, args, value_model)
        super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        if self.is_deepspeed_enabled:
            raise ValueError(
                "SNRFilteredPPOTrainer does not support DeepSpeed (the critic is a second trained model with its own "
                "optimizer); use DDP or FSDP, or SNRFilteredGRPOTrainer"
            )
        critic = self._prepare_critic_module(critic, critic_peft_config)
        self.critic = self.accelerator.prepare_model(critic)  # DDP-wrapped when distributed
        self._prepare_critic_optimizer(self._create_critic_optimizer(critic))
        self.critic_lr_scheduler = None  # created with the policy's scheduler, when the step count is known
        self._micro_batch: dict | None = None
        self.model_card_details["Advantage estimator"] = (
            f"GAE over model tokens (gamma={args.gamma}, lambda={args.lam}), separate critic (lr "
            f"{args.critic_learning_rate}, value clip {args.cliprange_value})"
        )

    # -----------------------------------------------------------------------------------------------------------
    # Critic construction

    @staticmethod
    def _build_critic(model, args: SNRFilteredPPOConfig, value_model):
        if value_model is not None:
            if args.critic_model_name_or_path is not None:
                raise ValueError(
                    f"got both value_model= and critic_model_name_or_path={args.critic_model_name_or_path!r}; "
                    "pass only one"
                )
            check_value_model(value_model)
            return value_model
        source = args.critic_model_name_or_path or model
        return build_value_model(source, seed=args.seed, model_init_kwargs=args.model_init_kwargs)

    def _prepare_critic_module(self, critic, critic_peft_config):
        if critic_peft_config is not None:
            from peft import get_peft_model

            peft_config = copy.deepcopy(critic_peft_config)
            head = value_head_name(critic)
            if head is not None:  # the head is new: train it in full, next to the adapters
                peft_config.modules_to_save = sorted({*(peft_config.modules_to_save or []), head})
            critic = get_peft_model(critic, peft_config)
        if self.args.gradient_checkpointing:
            kwargs = self.args.gradient_checkpointing_kwargs or {"use_reentrant": False}
            critic.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            if critic_peft_config is not None:
                critic.enable_input_require_grads()
        if self.args.disable_dropout:
            disable_dropout_in_model(critic)  # as TRL does for the policy
        return critic.train()

    def _create_critic_optimizer(self, critic) -> torch.optim.Optimizer:
        """The policy's optimizer type and settings (`optim`, betas, weight decay), at `critic_learning_rate`."""
        decay = set(self.get_decay_parameter_names(critic))
        trainable = [(name, p) for name, p in critic.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for name, p in trainable if name in decay], "weight_decay": self.args.weight_decay},
            {"params": [p for name, p in trainable if name not in decay], "weight_decay": 0.0},
        ]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, critic)
        return optimizer_cls(groups, **{**optimizer_kwargs, "lr": self.args.critic_learning_rate})

    def _prepare_critic_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Wrap the critic's optimizer with accelerate; under fp16, with a gradient scaler of its own.

        Sharing the policy's scaler would update it twice per step, and fail on steps where only one of the two
        models has gradients. The critic's scaler has the policy's settings and its own state.
        """
        policy_scaler = self.accelerator.scaler
        self.critic_scaler = copy.deepcopy(policy_scaler) if policy_scaler is not None else None
        self.accelerator.scaler = self.critic_scaler  # prepare_optimizer attaches accelerator.scaler
        try:
            self.critic_optimizer = self.accelerator.prepare_optimizer(optimizer)
        finally:
            self.accelerator.scaler = policy_scaler

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """Also creates the critic's scheduler, of the policy's type and warm-up, now that the step count is known."""
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        self.critic_lr_scheduler = get_scheduler(
            self.args.lr_scheduler_type,
            optimizer=self.critic_optimizer,
            num_warmup_steps=self.args.get_warmup_steps(num_training_steps),
            num_training_steps=num_training_steps,
            scheduler_specific_kwargs=self.args.lr_scheduler_kwargs,
        )
        return scheduler

    @property
    def unwrapped_critic(self):
        """The critic without the wrapper `accelerator.prepare_model` added (DDP when distributed)."""
        return self.accelerator.unwrap_model(self.critic)

    # -----------------------------------------------------------------------------------------------------------
    # Advantages: values on the kept rows, token rewards, GAE

    def _before_filtering(self, inputs, batch):
        super()._before_filtering(inputs, batch)
        batch[ROW_INDEX_KEY] = torch.arange(batch["completion_ids"].size(0), device=batch["completion_ids"].device)

    def _generate_and_score_completions(self, inputs):
        batch = super()._generate_and_score_completions(inputs)
        rows = batch.pop(ROW_INDEX_KEY, None)  # evaluation is never filtered, so it has no index
        if rows is None:
            rows = torch.arange(batch["completion_ids"].size(0))
        filtered = self.filtered_generation if self.model.training else None
        pool = filtered.pool_inputs if filtered is not None else None  # a refill's rounds, every process's rows
        # In place: with filtering, SNRFilteredGRPOTrainer re-splits this very dict into micro-batches.
        self._add_gae_advantages(batch, inputs if pool is None else pool, rows.tolist(), pooled=pool is not None)
        return batch

    def _add_gae_advantages(self, batch: dict, inputs: list[dict], rows: list[int], pooled: bool = False) -> None:
        """GAE advantages, returns and values of the kept rows `rows` of `inputs`: this process's dataset rows, or
        with `pooled` the rows of every process and round of a refill (then `rows` index the whole pool)."""
        args, device = self.args, batch["completion_ids"].device
        mode = "train" if self.model.training else "eval"
        mask = batch["completion_mask"].float()
        if "tool_mask" in batch:
            mask = mask * batch["tool_mask"]  # (B, T) 1 on model tokens only

        # Trajectory return of each kept row: this process's slice of the global raw rewards, as TRL slices them.
        start = 0 if pooled else self.accelerator.process_index * len(inputs)
        local_returns = self._raw_rewards()[start : start + len(inputs)]
        returns = local_returns[torch.tensor(rows, dtype=torch.long)].to(device)  # (B,)
        scored = torch.isfinite(returns).float()  # rows no reward function scored carry no signal
        mask = mask * scored.unsqueeze(1)

        values = self._rollout_values(batch, mode) * mask  # (B, T)
        spans, turn_rewards = self._turn_rewards(inputs, rows) if args.use_turn_rewards else (None, None)
        rewards = place_rewards(mask, returns, spans, turn_rewards).to(device)
        if args.kl_in_reward:
            rewards = rewards + self._kl_penalty(batch, mask, mode)
        advantages, targets = masked_gae(rewards, values, mask, gamma=args.gamma, lam=args.lam)
        raw_advantages = advantages
        if args.whiten_advantages:
            mean, variance = moments_to_mean_var(self._reduce(masked_moments(advantages, mask)))
            advantages = whiten(advantages, mask, mean, variance)

        batch["advantages"] = advantages  # (B, T), replaces GRPO's (B,) group advantage
        batch["returns"] = targets
        batch["old_values"] = values
        batch["rollout_scored"] = scored  # (B,) the critic loss mask is completion_mask * tool_mask * this
        self._log_rollout_metrics(mode, mask, values, targets, raw_advantages)
        self._show_gae_advantages(
            advantages, mask, rows, start, total_rows=len(inputs) * (1 if pooled else self.accelerator.num_processes)
        )

    def _show_gae_advantages(self, advantages, mask, rows: list[int], start: int, total_rows: int) -> None:
        """The completions table shows each row's mean GAE advantage over its model tokens (what the loss used);
        NaN marks the rows the filter dropped."""
        placeholder_only = (
            self.model.training
            and self.args.reward_variance_filtering is not None
            and not self.filtered_generation.local_kept_rows
        )
        real = 0 if placeholder_only else len(rows)
        row_means = ((advantages * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0))[:real].tolist()
        shown = gather_object([(start + row, value) for row, value in zip(rows[:real], row_means, strict=True)])
        table = [float("nan")] * total_rows
        for row, value in shown:
            table[row] = value
        history = list(self._logs["advantages"])
        history[-total_rows:] = table
        self._logs["advantages"].clear()
        self._logs["advantages"].extend(history)

    def _rollout_values(self, batch: dict, mode: str) -> torch.Tensor:
        critic = self.unwrapped_critic  # not the DDP wrapper: processes run different numbers of chunks here
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        was_training = critic.training
        critic.eval()
        try:
            with torch.no_grad(), self.accelerator.autocast():
                return completion_values(
                    critic,
                    batch["prompt_ids"],
                    batch["prompt_mask"],
                    batch["completion_ids"],
                    batch["completion_mask"],
                    batch_size=batch_size,
                )
        finally:
            critic.train(was_training)

    def _turn_rewards(self, inputs: list[dict], rows: list[int]):
        spans = [inputs[row].get("turn_spans") for row in rows]
        rewards = [inputs[row].get("turn_rewards") for row in rows]
        for row, span, reward in zip(rows, spans, rewards, strict=True):
            if (span is None) != (reward is None):
                raise ValueError(
                    f"row {row} carries only one of turn_spans / turn_rewards; use_turn_rewards=True needs both "
                    "(one (start, end) span and one reward per assistant turn)"
                )
        return spans, rewards

    def _kl_penalty(self, batch: dict, mask: torch.Tensor, mode: str) -> torch.Tensor:
        logps = batch.get("old_per_token_logps")
        if logps is None:  # TRL skips the old-logp pass when the batch is trained on-policy; KL-in-reward needs it
            input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
            batch_size = (
                self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
            )
            with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, batch["completion_ids"].size(1), batch_size=batch_size
                )
        penalty = kl_reward_penalty(logps, batch["ref_per_token_logps"], mask, self.beta)
        mean, _ = moments_to_mean_var(self._reduce(masked_moments(-penalty / self.beta, mask)))
        self._metrics[mode][keys.PPO_KL].append(mean)
        return penalty

    # -----------------------------------------------------------------------------------------------------------
    # Critic update, after the policy's backward on the same micro-batch

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:
            self._micro_batch = inputs
        return inputs

    def training_step(self, model, inputs, num_items_in_batch):
        """Also updates the critic on the same micro-batch, after the policy's backward."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._critic_training_step(self._micro_batch)
        self._micro_batch = None
        return loss

    def _critic_training_step(self, batch: dict) -> None:
        args = self.args
        mask = batch["completion_mask"].float() * batch["rollout_scored"].unsqueeze(1)
        if "tool_mask" in batch:
            mask = mask * batch["tool_mask"]  # zero-loss placeholder rows have both masks zeroed: no contribution
        boundary = self.accelerator.sync_gradients
        # Accumulate locally and all-reduce only on the boundary micro-step, like the policy.
        sync_context = contextlib.nullcontext() if boundary else self.accelerator.no_sync(self.critic)
        with sync_context:
            with self.accelerator.autocast():
                values = completion_values(
                    self.critic,
                    batch["prompt_ids"],
                    batch["prompt_mask"],
                    batch["completion_ids"],
                    batch["completion_mask"],
                )
            per_token_loss, clipped = clipped_value_loss(
                values, batch["old_values"], batch["returns"], mask, args.cliprange_value
            )
            loss = args.vf_coef * per_token_loss.sum() / self._critic_normaliser(batch)
            self._critic_backward(loss)

        step = self._micro_step
        if step is None or step.global_real_rows:  # a micro-step without kept rows logs no value statistics
            metrics = self._metrics["train"]
            totals = self._reduce(torch.stack([per_token_loss.detach().sum(), clipped.sum(), mask.sum()]).double())
            tokens = max(float(totals[2]), 1.0)
            metrics[keys.PPO_VALUE_LOSS].append(float(totals[0]) / tokens)
            metrics[keys.PPO_VALUE_CLIPFRAC].append(float(totals[1]) / tokens)
        if boundary:
            self._critic_optimizer_step()

    def _critic_normaliser(self, batch: dict) -> float:
        """Divisor of the micro-batch's summed value loss: after the DDP mean and the sum over micro-steps, the
        critic loss is the token mean over the optimizer step's kept rows (see `trl_ragen2.filtering.micro_steps`)."""
        step = self._micro_step
        if step is not None:  # filtered: the unit's own token count, weighted by the unit's share of the step
            if not step.unit_tokens:
                return float("inf")  # no kept token in this unit: a zero loss
            return step.unit_tokens / (step.unit_weight * self.accelerator.num_processes)
        # Unfiltered: TRL's dapo normaliser, the generation's token count per optimizer step and process.
        normaliser = batch["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        return float(normaliser * self.current_gradient_accumulation_steps / self.args.steps_per_generation)

    def _critic_backward(self, loss: torch.Tensor) -> None:
        """Backward of the critic loss, scaled by the critic's own gradient scaler under fp16."""
        if self.critic_scaler is not None:
            self.critic_scaler.scale(loss).backward()
        else:
            self.accelerator.backward(loss)

    def _critic_optimizer_step(self) -> None:
        metrics = self._metrics["train"]
        if self.args.reward_variance_filtering is not None and not self.empty_step_guard.step_has_kept_rows:
            # No kept row in this optimizer step: nothing is stepped (no update, no weight decay, no moment or
            # scaler change), like the policy's empty steps; the schedule still advances with the policy's.
            self.critic_optimizer.zero_grad(set_to_none=True)
            self._step_critic_scheduler()
            return
        parameters = [p for p in self.critic.parameters() if p.requires_grad]
        grad_norm = 0.0
        if self.args.max_grad_norm is not None and self.args.max_grad_norm > 0:
            if self.critic_scaler is not None:
                self.critic_scaler.unscale_(self.critic_optimizer.optimizer)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters, self.args.max_grad_norm))
        metrics[keys.PPO_CRITIC_LEARNING_RATE].append(self.critic_optimizer.param_groups[0]["lr"])
        self.critic_optimizer.step()  # with fp16, the critic's scaler steps and updates here
        self._step_critic_scheduler()
        self.critic_optimizer.zero_grad(set_to_none=True)
        metrics[keys.PPO_CRITIC_GRAD_NORM].append(grad_norm)

    def _step_critic_scheduler(self) -> None:
        # Metric-based schedules (ReduceLROnPlateau) step after evaluation instead, with the policy's metric.
        if self.critic_lr_scheduler is not None and not self._critic_scheduler_needs_metric():
            self.critic_lr_scheduler.step()

    def _critic_scheduler_needs_metric(self) -> bool:
        return isinstance(self.critic_lr_scheduler, (torch.optim.lr_scheduler.ReduceLROnPlateau, GreedyLR))

    def _evaluate(self, trial, ignore_keys_for_eval, skip_scheduler=False):
        """Also steps a metric-based critic schedule with the metric the policy's schedule steps on."""
        metrics = super()._evaluate(trial, ignore_keys_for_eval, skip_scheduler=skip_scheduler)
        if self._critic_scheduler_needs_metric() and not skip_scheduler:
            key = self.args.metric_for_best_model
            self.critic_lr_scheduler.step(metrics[key if key.startswith("eval_") else f"eval_{key}"])
        return metrics

    def _compute_loss(self, model, inputs):
        if not self.args.kl_in_reward:
            return super()._compute_loss(model, inputs)
        # The KL is already in the rewards: keep TRL from adding beta * KL to the loss as well.
        beta, self.beta = self.beta, 0.0
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self.beta = beta

    # -----------------------------------------------------------------------------------------------------------
    # Metrics

    def _reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum a small tensor over processes (the same result on every process)."""
        return self.accelerator.reduce(tensor.to(self.accelerator.device), reduction="sum").cpu()

    def _global_stats(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
        mean, variance = moments_to_mean_var(self._reduce(masked_moments(x, mask)))
        valid = mask.bool()
        inf = torch.tensor(float("inf"), device=x.device)
        local = torch.stack(
            [x[valid].min() if valid.any() else inf, -x[valid].max() if valid.any() else inf]
        ).float()  # (2,): min and -max, so that one min-reduction gives both
        extremes = self.accelerator.gather(local.to(self.accelerator.device)).view(-1, 2).min(dim=0).values.tolist()
        finite = [v if v != float("inf") else float("nan") for v in extremes]
        return {"mean": mean, "std": variance**0.5, "min": finite[0], "max": -finite[1]}

    def _log_rollout_metrics(self, mode, mask, values, returns, advantages) -> None:
        metrics = self._metrics[mode]
        for name, tensor in (("returns", returns), ("advantages", advantages)):
            for stat, value in self._global_stats(tensor, mask).items():
                metrics[keys.ppo_stat_key(name, stat)].append(value)
        value_mean, _ = moments_to_mean_var(self._reduce(masked_moments(values, mask)))
        metrics[keys.PPO_VALUES_MEAN].append(value_mean)
        _, residual = moments_to_mean_var(self._reduce(masked_moments(returns - values, mask)))
        _, target = moments_to_mean_var(self._reduce(masked_moments(returns, mask)))
        metrics[keys.PPO_EXPLAINED_VARIANCE].append(explained_variance_from_vars(residual, target))
        if mode == "eval":  # no critic update in evaluation: the value loss is 0.5 * the squared error of these values
            _, squares, tokens = self._reduce(masked_moments(returns - values, mask)).tolist()
            metrics[keys.PPO_VALUE_LOSS].append(0.5 * squares / tokens if tokens else float("nan"))

    # -----------------------------------------------------------------------------------------------------------
    # Saving and restoring the critic

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save the policy to `output_dir` (as TRL does) and the critic beside it, in `output_dir/critic`."""
        output_dir = output_dir or self.args.output_dir
        # Every process takes part (a sharded critic is gathered); the main one writes. First, so that a
        # push_to_hub inside TRL's save_model uploads the critic too.
        state_dict = self.accelerator.get_state_dict(self.critic)
        if self.args.should_save:
            self.unwrapped_critic.save_pretrained(os.path.join(output_dir, CRITIC_DIR), state_dict=state_dict)
        super().save_model(output_dir, _internal_call)

    def save_ragen2_state(self, checkpoint_dir: str) -> None:
        """Also saves the critic's optimizer and scheduler under `critic/` (not with `save_only_model`), each
        through a temporary name and a rename."""
        super().save_ragen2_state(checkpoint_dir)  # the critic's weights are already there (save_model)
        if self.args.save_only_model:
            return
        critic_dir = os.path.join(checkpoint_dir, CRITIC_DIR)
        os.makedirs(critic_dir, exist_ok=True)
        atomic_torch_save(self.critic_optimizer.state_dict(), os.path.join(critic_dir, CRITIC_OPTIMIZER_FILE))
        if self.critic_lr_scheduler is not None:
            atomic_torch_save(self.critic_lr_scheduler.state_dict(), os.path.join(critic_dir, CRITIC_SCHEDULER_FILE))

    def resume_state_files(self) -> list[str]:
        """Also the critic's weights, and its optimizer and scheduler (not with `save_only_model`)."""
        files = [*super().resume_state_files(), CRITIC_DIR]  # weights: config.json, or a LoRA adapter
        if not self.args.save_only_model:
            files += [f"{CRITIC_DIR}/{CRITIC_OPTIMIZER_FILE}", f"{CRITIC_DIR}/{CRITIC_SCHEDULER_FILE}"]
        return files

    def load_ragen2_state(self, checkpoint_dir: str) -> None:
        """Also restores the critic's weights, optimizer and scheduler from `critic/`. A missing file is an error
        naming it (a warning with `resume_allow_missing_state=True`, and that part starts fresh)."""
        super().load_ragen2_state(checkpoint_dir)
        critic_dir = os.path.join(checkpoint_dir, CRITIC_DIR)
        if not self.resume_file_present(critic_dir):
            return
        with load_errors_named(checkpoint_dir, "the critic's weights"):
            load_value_model_weights(self.unwrapped_critic, critic_dir)
        optimizer_path = os.path.join(critic_dir, CRITIC_OPTIMIZER_FILE)
        if self.resume_file_present(optimizer_path):
            with load_errors_named(checkpoint_dir, "the critic's optimizer"):
                state = torch.load(optimizer_path, map_location=self.accelerator.device)
            self.critic_optimizer.load_state_dict(state)
        scheduler_path = os.path.join(critic_dir, CRITIC_SCHEDULER_FILE)
        if self.critic_lr_scheduler is not None and self.resume_file_present(scheduler_path):
            with load_errors_named(checkpoint_dir, "the critic's scheduler"):
                state = torch.load(scheduler_path)
            self.critic_lr_scheduler.load_state_dict(state)
