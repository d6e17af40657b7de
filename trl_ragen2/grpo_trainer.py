"""`SNRFilteredGRPOTrainer`: TRL's `GRPOTrainer` that updates only on the prompt groups with the most reward variance.

RAGEN-2 (arXiv 2604.06268) §3.3. The trainer is thin: it wires the pure functions of `trl_ragen2.filtering` into
GRPOTrainer at these override points, each calling `super()`:

- `_calculate_rewards`: keeps the gathered (global) raw rewards, identical on every process;
- `_generate_and_score_completions`: selects groups from those rewards and drops the other rows;
- `_prepare_inputs`: re-splits the filtered batch into micro-batches unevenly instead of dropping rows;
- `_compute_loss`: optional loss scaling by the kept fraction;
- `_save_checkpoint` / `_load_optimizer_and_scheduler`: the empty-step counter and the MI EMA survive resume.

The MI diagnostics (`trl_ragen2.diagnostics`) run on the pre-filter batch, between generation and filtering.
"""

from __future__ import annotations

import json
import logging
import math
import os
import textwrap
from dataclasses import asdict, dataclass

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict

from .batch_utils import (
    aligned_chunk_sizes,
    loss_token_count,
    select_rows,
    split_rows_unevenly,
    trim_padding,
    zero_loss_rows,
)
from .diagnostics import MIDiagnostics
from .filtering import filter_stats, group_reward_scores, select_groups
from .grpo_config import SNRFilteredGRPOConfig


logger = logging.getLogger(__name__)

FILTER_STATE_FILE = "ragen2_filter_state.json"

RAGEN2_PAPER = {
    "title": "RAGEN-2: Reasoning Collapse in Agentic RL",
    "id": "2604.06268",
    # docstyle-ignore
    "citation": textwrap.dedent("""\
        @article{wang2026ragen2,
            title        = {{RAGEN-2: Reasoning Collapse in Agentic RL}},
            author       = {Zihan Wang and Chi Gui and Xing Jin and Qineng Wang and Licheng Liu and others},
            year         = 2026,
            eprint       = {arXiv:2604.06268},
        }"""),
}


@dataclass
class FilterState:
    """Counters of the SNR filter, saved with every checkpoint."""

    empty_steps: int = 0  # generation steps in which no group was kept, in total
    consecutive_empty_steps: int = 0
    filtered_steps: int = 0  # generation steps the filter has seen


class _EmptyStepGuard(TrainerCallback):
    """Makes an empty filter step change no parameter, and stops training after too many in a row.

    When no group is kept, every micro-batch is a zero-loss placeholder. Dropping the (zero) gradients before the
    optimizer step makes torch optimizers skip every parameter: no update, no weight decay, no moment change.
    """

    def __init__(self, trainer: SNRFilteredGRPOTrainer):
        self.trainer = trainer
        self.stop_reported = False

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.trainer._generation_is_empty and model is not None:
            for param in model.parameters():
                param.grad = None

    def on_step_end(self, args, state, control, **kwargs):
        patience = self.trainer.args.reward_variance_empty_patience
        consecutive = self.trainer.filter_state.consecutive_empty_steps
        if patience and consecutive >= patience:
            control.should_training_stop = True
            if not self.stop_reported:
                self.stop_reported = True
                logger.warning(
                    "SNR filter kept no prompt group for %d consecutive steps: every group's rollouts earned the same "
                    "reward, so there is no learning signal left and training stops at step %d. To continue, give "
                    "the filter variance to work with: raise num_generations, sample at a higher temperature, use a "
                    "denser reward, set reward_variance_include_zero=True with reward_variance_top_p_mode='softmax', "
                    "or set reward_variance_empty_patience=0 to never stop.",
                    consecutive,
                    state.global_step,
                )
        return control


class SNRFilteredGRPOTrainer(GRPOTrainer):
    """GRPO with RAGEN-2 SNR-aware filtering (arXiv 2604.06268).

    Before each policy update, prompt groups are scored by the variance of their rollouts' raw rewards (the weighted
    sum of the reward functions, before any normalisation), computed on the whole generation batch gathered across
    processes, so every process makes the same selection even when a group spans two processes. Only the kept
    groups' rows stay in the batch: no forward or backward pass is spent on the others, and the token normaliser
    is recomputed so the loss (for the default `loss_type="dapo"`) equals the loss GRPOTrainer would compute on a
    batch holding only the kept groups. Micro-batches are split unevenly rather than dropping rows.

    When no group is kept, the step changes no parameter and is counted; after
    `reward_variance_empty_patience` consecutive empty steps training stops with a message. Evaluation is never
    filtered, and `reward_variance_filtering=None` behaves exactly like `GRPOTrainer`.

    Metrics are logged under `ragen2/filter/...`.

    Example:

    ```python
    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer

    args = SNRFilteredGRPOConfig(output_dir="out", num_generations=8, reward_variance_top_p=0.9)
    trainer = SNRFilteredGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=my_reward, args=args,
                                     train_dataset=dataset)
    trainer.train()
    ```

    Args are those of [`~trl.GRPOTrainer`]; `args` is an [`SNRFilteredGRPOConfig`].
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
        super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        self.filter_state = FilterState()
        self._global_rewards_per_func: torch.Tensor | None = None
        self.current_rows: list[dict] | None = None
        self._filtered_batch: dict | None = None
        self._kept_rows_per_process: list[int] = []
        self._generation_is_empty = False
        self._loss_scale = 1.0
        # Extra lines for the model card, e.g. {"Catalogue": "webshop-small-1k"}; recipes fill it.
        self.model_card_details: dict[str, str] = {}
        self.add_callback(_EmptyStepGuard(self))
        self.mi_diagnostics = MIDiagnostics(args.mi_diagnostics_config()) if args.mi_diagnostics else None

    # ----------------------------------------------------------------------------------------------------------
    # Rewards and selection
    # ----------------------------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._global_rewards_per_func = rewards_per_func  # (N_global, num_funcs), the same on every process
        return rewards_per_func

    def _raw_rewards(self) -> torch.Tensor:
        """Weighted sum of the reward functions per rollout, (N_global,); NaN where no function scored it."""
        per_func = self._global_rewards_per_func
        rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        return rewards

    def select_groups_from_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """Apply the configured selection to raw rewards (N_global,) in group order; returns the kept groups (P,)."""
        args = self.args
        scores = group_reward_scores(rewards, self.num_generations, metric=args.reward_variance_metric)
        return select_groups(
            scores,
            strategy=args.reward_variance_filtering,
            top_p=args.reward_variance_top_p,
            top_k=args.reward_variance_top_k,
            min_p=args.reward_variance_min_p,
            top_p_mode=args.reward_variance_top_p_mode,
            include_zero=args.reward_variance_include_zero,
            selection_eps=args.reward_variance_selection_eps,
            largest=args.reward_variance_largest,
        )

    def _before_filtering(self, inputs: list[dict], batch: dict) -> None:
        """Work on the whole (pre-filter) batch: the MI diagnostics, at step 1 and every `mi_every_n_steps`."""
        if self.mi_diagnostics is not None:
            self.mi_diagnostics.on_batch(self, inputs, batch)

    def _generate_and_score_completions(self, inputs):
        # The dataset rows of this generation batch, for a rollout_func that needs more than the prompts
        # (trl_ragen2.RagenRollout reads env, seed and env_config from them).
        self.current_rows = inputs
        batch = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return batch  # evaluation is never filtered
        self._before_filtering(inputs, batch)
        if self.args.reward_variance_filtering is None:
            return batch
        return self._filter_batch(batch)

    def _filter_batch(self, batch: dict) -> dict:
        rewards = self._raw_rewards()  # (N_global,)
        keep_groups = self.select_groups_from_rewards(rewards)  # (P,)
        keep_rows = keep_groups.repeat_interleave(self.num_generations)  # (N_global,)
        local_rows = batch["completion_ids"].size(0)
        start = self.accelerator.process_index * local_rows
        local_keep = keep_rows[start : start + local_rows].to(batch["completion_ids"].device)  # (B,)

        index = local_keep.nonzero().squeeze(1)
        if index.numel():
            filtered = trim_padding(select_rows(batch, index))
        else:
            # This process keeps nothing: one zero-loss placeholder row keeps every process stepping in lockstep.
            filtered = zero_loss_rows(select_rows(batch, torch.zeros(1, dtype=torch.long)))
        # The dapo/cispo/vespo normaliser is a global token count: recount it over the kept rows of all processes.
        filtered["num_items_in_batch"] = self.accelerator.gather(loss_token_count(filtered)).sum()

        # Rows each process keeps, known everywhere without communication: the selection is global.
        self._kept_rows_per_process = keep_rows.view(self.accelerator.num_processes, local_rows).sum(dim=1).tolist()
        empty = not bool(keep_groups.any())
        self._update_filter_state(empty)
        kept_fraction = keep_groups.float().mean().item()
        scaling = self.args.reward_variance_loss_scaling
        self._loss_scale = {"none": 1.0, "linear": kept_fraction, "sqrt": math.sqrt(kept_fraction)}[scaling]
        self._log_filter_metrics(rewards, keep_groups, keep_rows)

        self._filtered_batch = filtered
        return filtered

    def _update_filter_state(self, empty: bool) -> None:
        state = self.filter_state
        state.filtered_steps += 1
        state.empty_steps += int(empty)
        state.consecutive_empty_steps = state.consecutive_empty_steps + 1 if empty else 0
        self._generation_is_empty = empty

    def _log_filter_metrics(self, rewards: torch.Tensor, keep_groups: torch.Tensor, keep_rows: torch.Tensor) -> None:
        stats = filter_stats(rewards.cpu(), self.num_generations, keep_groups.cpu())
        metrics = self._metrics["train"]
        for key, value in stats.items():
            metrics[f"ragen2/filter/{key}"].append(value)
        metrics["ragen2/filter/kept_rows"].append(float(keep_rows.sum().item()))
        metrics["ragen2/filter/empty"].append(float(self._generation_is_empty))
        metrics["ragen2/filter/empty_steps"].append(float(self.filter_state.empty_steps))
        metrics["ragen2/filter/consecutive_empty_steps"].append(float(self.filter_state.consecutive_empty_steps))
        metrics["ragen2/filter/loss_scale"].append(self._loss_scale)

    # ----------------------------------------------------------------------------------------------------------
    # Micro-batching and loss
    # ----------------------------------------------------------------------------------------------------------

    def _prepare_inputs(self, generation_batch):
        self._filtered_batch = None
        inputs = super()._prepare_inputs(generation_batch)
        if self._filtered_batch is not None:
            # GRPOTrainer just generated and split the filtered batch with a floor division that drops the
            # remainder rows; re-split it so that every kept row is trained on.
            shuffled = shuffle_sequence_dict(self._filtered_batch)
            steps = self.args.steps_per_generation
            pad_to = aligned_chunk_sizes(self._kept_rows_per_process, steps)
            self._buffered_inputs = split_rows_unevenly(shuffled, steps, pad_to=pad_to)
            inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]
            self._filtered_batch = None
        return inputs

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        if self.model.training and self._loss_scale != 1.0:
            loss = loss * self._loss_scale
        return loss

    # ----------------------------------------------------------------------------------------------------------
    # Checkpoints and model card
    # ----------------------------------------------------------------------------------------------------------

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            checkpoint_dir = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            self.save_ragen2_state(checkpoint_dir)

    def save_ragen2_state(self, checkpoint_dir: str) -> None:
        """Write the trainer's RAGEN-2 state (filter counters, MI EMA) into a checkpoint folder."""
        with open(os.path.join(checkpoint_dir, FILTER_STATE_FILE), "w") as f:
            json.dump(asdict(self.filter_state), f)
        if self.mi_diagnostics is not None:
            self.mi_diagnostics.save(checkpoint_dir)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_ragen2_state(checkpoint)

    def load_ragen2_state(self, checkpoint_dir: str) -> None:
        """Restore the state [`save_ragen2_state`] wrote, when the checkpoint has it."""
        path = os.path.join(checkpoint_dir, FILTER_STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self.filter_state = FilterState(**json.load(f))
        if self.mi_diagnostics is not None:
            self.mi_diagnostics.load(checkpoint_dir)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's card plus a "RAGEN-2 training details" section (filter settings and counts,
        `model_card_details`), appended on the main process."""
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        args = self.args
        lines = ["", "## RAGEN-2 training details", ""]
        if args.reward_variance_filtering is None:
            lines.append("- SNR-aware filtering: off")
        else:
            lines.append(
                f"- SNR-aware filtering: `{args.reward_variance_filtering}` on the within-prompt reward "
                f"`{args.reward_variance_metric}` (top_p={args.reward_variance_top_p}, "
                f"mode={args.reward_variance_top_p_mode}, include_zero={args.reward_variance_include_zero})"
            )
            lines.append(f"- Filter steps: {self.filter_state.filtered_steps}, empty: {self.filter_state.empty_steps}")
        lines += [f"- {key}: {value}" for key, value in self.model_card_details.items()]
        with open(os.path.join(args.output_dir, "README.md"), "a") as f:
            f.write("\n".join(lines) + "\n")
