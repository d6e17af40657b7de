"""The gradient SNR report during training: per reward-variance bucket, the norms of the task, KL and entropy
gradients (RAGEN-2's Figure 3), measured on the pre-filter batch without touching the training step.

Every `every_n_steps` optimizer steps (at step 1, then at multiples), right after generation and before the SNR
filter, [`GradientReport.on_batch`]:

1. splits the prompt groups of the whole generation batch (all processes) into reward-variance quantile buckets
   (`trl_ragen2.filtering.grad_snr.reward_variance_buckets`, the same on every process);
2. for each bucket and each term (task, KL when the batch has reference log-probabilities, entropy), runs forward
   passes of the policy on the bucket's rows of this process (in chunks of `per_device_train_batch_size`) and takes
   the gradient of the term with `torch.autograd.grad`, summed over chunks and, with several processes, over
   processes (an all-reduce);
3. logs `ragen2/grad/bucket_<i>/<term>` (the L2 norm over the trainable parameters), the bucket's mean reward
   variance, group, row and token counts, and the report's wall time.

No optimizer step is taken and no `.grad` buffer is written: `autograd.grad` returns the gradients instead of
accumulating them, so the update that follows is the one the trainer would take without the report. The random
state (CPU and CUDA) is saved before the passes and restored after, so dropout or sampling later draws the same
numbers. Cost per report: (2 or 3 terms) x (one forward and one backward over every row of the generation batch),
i.e. about 2-3 optimizer steps of compute on a batch trained in full, plus one float32 copy of the trainable
parameters (the gradient being summed). Sharded parameters (DeepSpeed ZeRO-3, FSDP) are not supported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..runs.keys import GRAD_TIME, grad_bucket_key
from .grad_snr import COMPONENTS, REPORTED_LOSS_TYPES, component_losses, global_norm, reward_variance_buckets


BUCKET_KEYS = (*COMPONENTS, "reward_variance", "num_groups", "num_rows", "num_tokens")


def check_report_settings(args, *, sharded: bool) -> None:
    """Raise a `ValueError` naming the setting and the fix when the report cannot run with these trainer args."""
    if args.grad_report_every_n_steps < 0:
        raise ValueError(
            f"grad_report_every_n_steps={args.grad_report_every_n_steps} is invalid; use 0 (off) or a number of "
            "optimizer steps (RAGEN reports every 50)"
        )
    if args.grad_report_num_buckets < 1:
        raise ValueError(
            f"grad_report_num_buckets={args.grad_report_num_buckets} is invalid; use an integer >= 1 (RAGEN: 6)"
        )
    if not args.grad_report_every_n_steps:
        return
    if args.loss_type not in REPORTED_LOSS_TYPES:
        raise ValueError(
            f"grad_report_every_n_steps={args.grad_report_every_n_steps} needs a clipped-ratio loss, but "
            f"loss_type={args.loss_type!r}; use one of {REPORTED_LOSS_TYPES} or grad_report_every_n_steps=0"
        )
    if getattr(args, "importance_sampling_level", "token") != "token":
        raise ValueError(
            f"grad_report_every_n_steps needs importance_sampling_level='token', got "
            f"{args.importance_sampling_level!r}; set grad_report_every_n_steps=0 to train at the sequence level"
        )
    if sharded:
        raise ValueError(
            "grad_report_every_n_steps needs unsharded parameters (not DeepSpeed ZeRO-3 or FSDP); set "
            "grad_report_every_n_steps=0"
        )


class GradientReport:
    """Runs the report on schedule for an `SNRFilteredGRPOTrainer` (see the module docstring)."""

    def __init__(self, every_n_steps: int, num_buckets: int = 6):
        self.every_n_steps = every_n_steps
        self.num_buckets = num_buckets
        self.next_step: int | None = None  # set at the first batch: step 1, or the next multiple after a resume

    def is_due(self, step: int) -> bool:
        """Whether the report runs at this 1-indexed optimizer step."""
        if self.every_n_steps <= 0:
            return False
        if self.next_step is None:
            n = self.every_n_steps
            self.next_step = 1 if step == 1 else step if step % n == 0 else (step // n + 1) * n
        return step >= self.next_step

    def on_batch(self, trainer, batch: dict, rewards: torch.Tensor) -> dict[str, float]:
        """Measure and log the bucket norms if due; `rewards` are the raw rewards of the whole batch (N_global,)."""
        step = trainer.state.global_step + 1
        if not trainer.model.training or not self.is_due(step):
            return {}
        self.next_step = (step // self.every_n_steps + 1) * self.every_n_steps
        began = time.perf_counter()
        devices = [trainer.accelerator.device] if trainer.accelerator.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            metrics = self.measure(trainer, batch, rewards)
        metrics[GRAD_TIME] = time.perf_counter() - began
        for key, value in metrics.items():
            trainer._metrics["train"][key].append(value)
        return metrics

    def measure(self, trainer, batch: dict, rewards: torch.Tensor) -> dict[str, float]:
        """The bucket norms of one batch, without the schedule (a collective with several processes)."""
        accelerator, generations = trainer.accelerator, trainer.num_generations
        mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        local_rows = mask.size(0)
        start = accelerator.process_index * local_rows
        row_tokens = accelerator.gather(mask.sum(1).long()).cpu()  # (N_global,) loss tokens per row
        variances = self._group_variances(rewards, generations)
        model = accelerator.unwrap_model(trainer.model)
        params = [p for p in model.parameters() if p.requires_grad]
        metrics = {}
        for number, groups in enumerate(reward_variance_buckets(rewards.cpu(), generations, self.num_buckets), 1):
            global_rows = [g * generations + k for g in groups for k in range(generations)]
            local = [row - start for row in global_rows if start <= row < start + local_rows]
            totals = dict(total_rows=len(global_rows), total_tokens=int(row_tokens[global_rows].sum()))
            values = {}
            for component in COMPONENTS:
                if component == "kl" and batch.get("ref_per_token_logps") is None:
                    values[component] = float("nan")  # no reference model (beta = 0): no KL term
                    continue
                values[component] = global_norm(
                    self._gradient(trainer, model, params, batch, local, component, totals)
                )
            values["reward_variance"] = sum(variances[g] for g in groups) / len(groups)
            values["num_groups"] = float(len(groups))
            values["num_rows"] = float(totals["total_rows"])
            values["num_tokens"] = float(totals["total_tokens"])
            metrics.update({grad_bucket_key(number, key): value for key, value in values.items()})
        return metrics

    @staticmethod
    def _group_variances(rewards: torch.Tensor, generations: int) -> list[float]:
        from ..filtering.selection import group_reward_scores

        return group_reward_scores(rewards.cpu(), generations, metric="variance").tolist()

    def _gradient(self, trainer, model, params, batch, local, component, totals) -> list[torch.Tensor]:
        """Sum over this process's chunks (and then over processes) of d(term)/d(params)."""
        from trl import GRPOTrainer

        args = trainer.args
        total = [torch.zeros_like(p, dtype=torch.float32) for p in params]
        chunk = args.per_device_train_batch_size
        for begin in range(0, len(local), chunk):
            index = torch.tensor(local[begin : begin + chunk], device=batch["completion_ids"].device)
            rows = {key: value[index] for key, value in batch.items() if torch.is_tensor(value) and value.dim() >= 1
                    and value.size(0) == batch["completion_ids"].size(0)}  # fmt: skip
            input_ids = torch.cat([rows["prompt_ids"], rows["completion_ids"]], dim=1)
            attention = torch.cat([rows["prompt_mask"], rows["completion_mask"]], dim=1)
            # TRL's own forward (the parent's, without the filter's scoring shortcuts): (B, T) logps and entropies
            logps, entropies, _ = GRPOTrainer._get_per_token_logps_and_entropies(
                trainer, model, input_ids, attention, rows["completion_ids"].size(1), compute_entropy=True
            )
            mask = rows["completion_mask"] * rows["tool_mask"] if "tool_mask" in rows else rows["completion_mask"]
            loss = component_losses(
                logps,
                entropies,
                mask,
                rows["advantages"],
                old_logps=rows.get("old_per_token_logps"),
                ref_logps=rows.get("ref_per_token_logps"),
                loss_type=args.loss_type,
                epsilon_low=trainer.epsilon_low,
                epsilon_high=trainer.epsilon_high,
                max_completion_length=args.max_completion_length,
                **totals,
            )[component]
            grads = torch.autograd.grad(loss, params, allow_unused=True)  # returned, never written into .grad
            for acc, grad in zip(total, grads, strict=True):
                if grad is not None:
                    acc += grad.float()
        if trainer.accelerator.num_processes > 1:
            total = [trainer.accelerator.reduce(acc, reduction="sum") for acc in total]
        return total


@dataclass
class GradientReportArguments:
    r"""
    The gradient SNR report (RAGEN-2's Figure 3): per reward-variance bucket of prompt groups, the gradient norms of
    the task, KL and entropy terms, from separate backward passes without an optimizer step (see
    `trl_ragen2.filtering.grad_report`). Off by default: each report costs about 2-3 optimizer steps of compute.

    Parameters:
        grad_report_every_n_steps (`int`, *optional*, defaults to `0`):
            Report at step 1 and then every this many optimizer steps; `0` turns the report off (RAGEN: 50).
        grad_report_num_buckets (`int`, *optional*, defaults to `6`):
            Reward-variance quantile buckets (RAGEN: 6); fewer when the batch has fewer prompt groups.
    """

    grad_report_every_n_steps: int = field(
        default=0, metadata={"help": "Gradient SNR report every N optimizer steps (0: off; RAGEN: 50)."}
    )
    grad_report_num_buckets: int = field(
        default=6, metadata={"help": "Reward-variance quantile buckets of the gradient report (RAGEN: 6)."}
    )
