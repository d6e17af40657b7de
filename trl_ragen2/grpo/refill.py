"""`RefillMixin`: dynamic sampling for the SNR-filtered trainers (`reward_variance_refill`, `docs/dynamic_sampling.md`).

When the filter keeps fewer groups than the target, the trainer generates further rounds of prompt groups and
selects over the pool of every round (`trl_ragen2.filtering.refill`). This mixin owns that loop and its two pieces of
state:

- the prompt stream (`trl_ragen2.filtering.prompt_stream.PromptStream`): the training dataloader, wrapped so that a
  round draws the next generation batch of the training sampler, in order, and saved in every checkpoint;
- nothing else: each round is made by TRL's own `_generate_and_score_completions` (its generation, scoring passes,
  rewards and advantages), and the pooled batch goes through the trainer's usual record of the filter's choice
  (`SNRFilteredGRPOTrainer._keep_local_rows`), micro-step layout and loss.

The kept rows of a pool need not sit evenly over the processes (a process may hold most of them), so the pool is
gathered and every process takes a contiguous share of the kept rows, as the filter's exactness allows any split.
The MI diagnostics, the gradient report and the sample log see the first round's batch.
"""

from __future__ import annotations

import os
import time

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from ..filtering.advantages import used_advantages
from ..filtering.batch_utils import PROMPT_KEYS, ROW_INDEX_KEY, is_row_tensor, num_rows
from ..filtering.generation_state import ScoredGeneration, weighted_rewards
from ..filtering.prompt_stream import PromptStream
from ..filtering.refill import rows_in_pool_order, select_from_pool, share_of_rows
from ..filtering.reward_checks import EmptyStepCause
from ..filtering.rule import KeptRows
from ..runs import keys
from ..runs.checkpoints import atomic_write_json, read_json_state


PROMPT_STREAM_FILE = "prompt_stream.json"
# Padding of the completion-aligned tensors that is not 0: TRL pads `tool_mask` with 1, and a vLLM
# importance-sampling ratio of 1 on padding keeps `vespo`'s sum of its log exact.
PAD_VALUES = {"tool_mask": 1, "importance_sampling_ratio": 1.0}


class RefillMixin:
    """Dynamic sampling for `SNRFilteredGRPOTrainer` (and so `SNRFilteredPPOTrainer`): see the module docstring."""

    prompt_stream: PromptStream | None = None

    def _refill_on(self) -> bool:
        return self.args.reward_variance_filtering is not None and self.args.reward_variance_refill is not None

    # -----------------------------------------------------------------------------------------------------------
    # The prompt stream

    def get_train_dataloader(self):
        loader = super().get_train_dataloader()
        if not self._refill_on():
            return loader
        self.prompt_stream = PromptStream(loader, self.args.steps_per_generation * self.num_iterations)
        return self.prompt_stream

    def get_resumed_dataloader(self, train_dataloader, steps_trained_in_current_epoch):
        if isinstance(train_dataloader, PromptStream):
            return train_dataloader  # its position comes from the checkpoint (`load_ragen2_state`), not a count
        return super().get_resumed_dataloader(train_dataloader, steps_trained_in_current_epoch)

    def ragen2_state_files(self) -> list[str]:
        return [*super().ragen2_state_files(), *([PROMPT_STREAM_FILE] if self._refill_on() else [])]

    def save_ragen2_state(self, checkpoint_dir: str) -> None:
        super().save_ragen2_state(checkpoint_dir)
        if self.prompt_stream is not None:
            atomic_write_json(os.path.join(checkpoint_dir, PROMPT_STREAM_FILE), self.prompt_stream.state())

    def load_ragen2_state(self, checkpoint_dir: str) -> None:
        super().load_ragen2_state(checkpoint_dir)
        path = os.path.join(checkpoint_dir, PROMPT_STREAM_FILE)
        if self.prompt_stream is not None and self.resume_file_present(path):
            self.prompt_stream.restore(read_json_state(path, checkpoint_dir))

    # -----------------------------------------------------------------------------------------------------------
    # Rounds and the pooled selection

    def _refill_and_filter(self, inputs: list[dict], batch: dict) -> dict:
        """Generate rounds until the pool holds the target's worth of kept groups (or the round limit), then keep
        this process's share of the kept rows. `inputs` / `batch`: the first round, already made and scored."""
        args, G = self.args, self.num_generations
        target = args.reward_variance_refill_target_groups or args.generation_batch_size // G
        # per round: this process's dataset rows, its local batch, the gathered (N_global, F) rewards
        rounds = [(inputs, batch, self._scored.rewards_per_func)]
        seconds = 0.0
        while True:
            rewards_per_func = torch.cat([r for _, _, r in rounds])  # (R * N_global, F), round after round
            rewards = weighted_rewards(rewards_per_func, self.reward_weights)  # (R * N_global,)
            decision = self._filter_decision(rewards)
            rule = self._keep_rows(rewards, decision)
            keep_groups = select_from_pool(
                rewards,
                G,
                rule.keep_groups,
                refill=args.reward_variance_refill,
                target=target,
                metric=args.reward_variance_metric,
            )
            if int(keep_groups.sum()) >= target or len(rounds) == args.reward_variance_refill_max_rounds:
                break
            started = time.perf_counter()
            round_inputs = self.prompt_stream.draw()
            self._scored = ScoredGeneration(rows=round_inputs)
            round_batch = GRPOTrainer._generate_and_score_completions(self, round_inputs)  # TRL's, unfiltered
            rounds.append((round_inputs, round_batch, self._scored.rewards_per_func))
            seconds += time.perf_counter() - started
        self._scored.rewards_per_func = rewards_per_func  # the PPO trainer's returns read the pool's rewards

        short = int(keep_groups.sum()) < target
        cause = None
        if short and args.reward_variance_refill_at_limit == "skip":
            cause = EmptyStepCause(
                "refill_limit",
                f"{len(rounds)} generation rounds kept {int(keep_groups.sum())} of the {target} groups the refill "
                "targets, and reward_variance_refill_at_limit='skip'",
                "Raise reward_variance_refill_max_rounds, lower reward_variance_refill_target_groups, or set "
                "reward_variance_refill_at_limit='train'",
            )
            keep_groups = torch.zeros_like(keep_groups)
        keep_rows = keep_groups.repeat_interleave(G)  # (R * N_global,)
        pool = self._gather_pool([b for _, b, _ in rounds])
        used = used_advantages(
            keep_rows,
            pool["advantages"].float().cpu(),
            rewards_per_func,
            self.reward_weights,
            G,
            recompute=self._advantages_recomputed(),
            scale_rewards=self.scale_rewards,
            aggregation=self.multi_objective_aggregation,
        )
        pool["advantages"] = used.nan_to_num(0.0).to(pool["advantages"])
        self._show_used_advantages(used[-rounds[-1][2].size(0) :])  # TRL's table holds the last round
        tagged = ROW_INDEX_KEY in batch  # a trainer needs each kept row's place in the pool (the PPO trainer)
        if tagged:
            pool[ROW_INDEX_KEY] = torch.arange(keep_rows.numel(), device=pool["completion_ids"].device)
        share = share_of_rows(
            keep_rows.nonzero().squeeze(1), self.accelerator.num_processes, self.accelerator.process_index
        )
        kept = KeptRows(keep_groups, keep_rows, rule.guard_added, rule.rule_kept_groups)
        filtered = self._keep_local_rows(pool, share.to(pool["completion_ids"].device), rewards, kept, decision, cause)
        self._filtered.rounds = len(rounds)
        if tagged:
            self._filtered.pool_inputs = [row for rows, _, _ in rounds for row in self._gathered(rows)]
        self._log_refill(len(rounds), int(keep_groups.sum()), seconds)
        return filtered

    def _gather_pool(self, batches: list[dict]) -> dict:
        """Every process's rows of every round, in pool order (round after round, each in TRL's global order)."""
        rows = num_rows(batches[0])
        local = {}
        for key, value in batches[0].items():
            if key == ROW_INDEX_KEY:
                continue  # the pool gets its own index
            if not is_row_tensor(value, rows):
                local[key] = value
                continue
            parts = [batch[key] for batch in batches]
            if value.dim() > 1:
                parts = [self._padded(key, part, max(p.size(1) for p in parts)) for part in parts]
            local[key] = torch.cat(parts)  # (R * B, ...)
        if self.accelerator.num_processes == 1:
            return local
        order = rows_in_pool_order(self.accelerator.num_processes, len(batches), rows)
        pool = {}
        for key, value in local.items():
            if not is_row_tensor(value, rows * len(batches)):
                pool[key] = value
                continue
            if value.dim() > 1:
                width = int(self.accelerator.gather(torch.tensor([value.size(1)], device=value.device)).max())
                value = self._padded(key, value, width)
            pool[key] = self.accelerator.gather(value)[order.to(value.device)]  # (R * N_global, ...)
        return pool

    def _gathered(self, rows: list[dict]) -> list[dict]:
        """One round's dataset rows of every process, in TRL's global order."""
        return rows if self.accelerator.num_processes == 1 else gather_object(rows)

    def _padded(self, key: str, tensor: torch.Tensor, width: int) -> torch.Tensor:
        """`tensor` (B, L) padded to (B, width): prompts on the left, completion-aligned tensors on the right."""
        missing = width - tensor.size(1)
        if missing <= 0:
            return tensor
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)  # a processor holds one
        value = tokenizer.pad_token_id if key in ("prompt_ids", "completion_ids") else PAD_VALUES.get(key, 0)
        pad = torch.full((tensor.size(0), missing, *tensor.shape[2:]), value, dtype=tensor.dtype, device=tensor.device)
        return torch.cat([pad, tensor] if key in PROMPT_KEYS else [tensor, pad], dim=1)

    def _log_refill(self, rounds: int, kept_groups: int, seconds: float) -> None:
        prompts_per_round = self.args.generation_batch_size // self.num_generations
        metrics = self._metrics["train"]
        metrics[keys.FILTER_GENERATION_ROUNDS].append(float(rounds))
        per_kept = rounds * prompts_per_round / kept_groups if kept_groups else float("nan")  # NaN: none kept
        metrics[keys.FILTER_GROUPS_GENERATED_PER_KEPT].append(per_kept)
        metrics[keys.FILTER_PROMPTS_CONSUMED].append(float(self.prompt_stream.slots_started() * prompts_per_round))
        metrics[keys.FILTER_REFILL_SECONDS].append(seconds)
