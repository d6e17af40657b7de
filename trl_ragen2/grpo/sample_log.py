"""The trainers' side of the sample log: turn a generation batch, the filter's choice and the MI matrices into records.

`SNRFilteredGRPOTrainer._generate_and_score_completions` calls [`SampleRecorder.on_batch`] once per training
generation batch, after the filter (the PPO trainer inherits it). On a logged step (`SampleLogSettings.is_due`) the
record holds at most `groups` prompt groups of the batch, picked across the reward-variance ranking
(`runs.samples.pick_groups`); on a step the MI diagnostics ran, the matrices they scored, with each chain's and
each context's text. The recorder owns only its writer; what it reads (the gathered rewards, the kept groups, the MI
results) stays owned by the trainer and its `MIDiagnostics`. The file format is `trl_ragen2.runs.samples`'.

With several processes, the main process writes: rewards and kept marks are of the whole batch, texts of the
groups whose rollouts are all on the main process.
"""

from __future__ import annotations

import os

import torch

from ..collapse.scoring.reasoning import ThinkTagExtractor, turn_spans
from ..filtering.selection import group_reward_scores
from ..runs import keys
from ..runs.samples import SampleLogSettings, SampleLogWriter, clip_text, pick_groups


class SampleRecorder:
    """Writes the sample log of one trainer: `settings` bound it, `path` defaults to `<output_dir>/samples.jsonl`."""

    def __init__(self, settings: SampleLogSettings, output_dir: str | os.PathLike, extractor=None):
        self.settings = settings
        self.writer = SampleLogWriter(os.path.join(output_dir, keys.SAMPLES_FILE))
        self.extractor = extractor if extractor is not None else ThinkTagExtractor()

    def on_batch(
        self, trainer, inputs: list[dict], batch: dict, keep_groups: torch.Tensor | None, keep_rows=None
    ) -> dict | None:
        """Write the record of this training batch if the step is logged or was MI-diagnosed; returns it.

        `batch` is the pre-filter batch TRL returned, `keep_groups` `(P,)` the filter's choice of groups and
        `keep_rows` `(N_global,)` of rollouts (None: no filter). Each rollout's `kept` mark differs from its group's
        only under `within_group`, which keeps some rollouts of every group.
        """
        step = trainer.state.global_step + 1  # the optimizer step this batch trains, as the MI diagnostics count
        diagnostics = getattr(trainer, "mi_diagnostics", None)
        diagnosed = diagnostics is not None and diagnostics.last_step == step and bool(diagnostics.last_results)
        due = self.settings.is_due(step)
        if self.settings.groups == 0 or not (due or diagnosed) or not trainer.accelerator.is_main_process:
            return None
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        record = {
            keys.SAMPLE_STEP: step,
            keys.SAMPLE_NUM_GROUPS: None,
            keys.SAMPLE_GROUP_SIZE: trainer.num_generations,
            keys.SAMPLE_GROUPS: [],
            keys.SAMPLE_MI: {},
        }
        if due and trainer._scored is not None and trainer._scored.rewards_per_func is not None:
            record.update(self._groups(trainer, tokenizer, inputs, batch, keep_groups, keep_rows))
        if diagnosed:
            record[keys.SAMPLE_MI] = {
                scope: self._matrix(result, tokenizer, trainer.num_generations)
                for scope, result in diagnostics.last_results.items()
                if result.error is None and result.chains is not None
            }
        self.writer.write(record)
        return record

    def _groups(self, trainer, tokenizer, inputs, batch, keep_groups, keep_rows) -> dict:
        size = trainer.num_generations
        rewards = trainer._raw_rewards().float().cpu()  # (N_global,), NaN where nothing scored
        per_func = trainer._scored.rewards_per_func.float().cpu()  # (N_global, F)
        variance = group_reward_scores(rewards, size, metric="variance").tolist()  # (P,)
        local_groups = batch["completion_ids"].size(0) // size  # groups whose rollouts are all on this process
        limit = self.settings.text_limit
        spans = turn_spans(
            inputs,
            batch["completion_ids"].cpu(),
            batch["completion_mask"].cpu(),
            batch["tool_mask"].cpu() if batch.get("tool_mask") is not None else None,
            tokenizer.pad_token_id,
        )
        groups = []
        for g in pick_groups(variance[:local_groups], self.settings.groups):
            first = g * size
            prompt_ids = batch["prompt_ids"][first][batch["prompt_mask"][first].bool()].tolist()
            rollouts = []
            for row in range(first, first + size):
                completion = batch["completion_ids"][row].tolist()
                rollouts.append(
                    {
                        "reward": rewards[row].item(),
                        "kept": True if keep_rows is None else bool(keep_rows[row]),
                        "rewards_per_func": per_func[row].tolist(),
                        "turns": self._turns(tokenizer, completion, spans[row], limit),
                    }
                )
            groups.append(
                {
                    "index": g,
                    "prompt": clip_text(tokenizer.decode(prompt_ids), limit, keep="end"),
                    "rewards": rewards[first : first + size].tolist(),
                    "variance": variance[g],
                    "kept": True if keep_groups is None else bool(keep_groups[g]),
                    "rollouts": rollouts,
                }
            )
        filtered = trainer.filtered_generation
        rounds = filtered.rounds if keep_groups is not None and filtered is not None else 1
        first_round = (
            {  # with refill, the groups shown are the first round's of the pool the filter chose from
                "generation_rounds": rounds,
                "refill_kept_groups": int(filtered.keep_groups.sum()),
            }
            if rounds > 1
            else {}
        )
        return {
            **first_round,
            keys.SAMPLE_NUM_GROUPS: len(variance) // rounds,
            keys.SAMPLE_GROUPS: groups,
            "filter": trainer.args.reward_variance_filtering,
            "reward_funcs": list(trainer.reward_func_names),
        }

    def _turns(self, tokenizer, completion: list[int], spans, limit: int) -> list[dict]:
        """Each assistant turn: the environment's text before it, its reasoning, and the rest of it (the answer)."""
        turns, previous_end = [], 0
        for start, end in spans:
            text = tokenizer.decode(completion[start:end], skip_special_tokens=True)
            reasoning = self.extractor(text)
            close = getattr(self.extractor, "close_tag", None)
            answer = text.split(close, 1)[1] if close and close in text else ""  # no closing tag: all reasoning
            observation = tokenizer.decode(completion[previous_end:start], skip_special_tokens=True)
            turns.append(
                {
                    "observation": clip_text(observation, limit, keep="end"),
                    "reasoning": clip_text(reasoning, limit),
                    "answer": clip_text(answer, limit),
                }
            )
            previous_end = end
        return turns

    def _matrix(self, result, tokenizer, size: int) -> dict:
        """One scope's cross-scoring matrix: scores, lengths, own and identical columns, and the texts."""
        limit = self.settings.text_limit
        same = result.same if result.same is not None else torch.zeros_like(result.logp, dtype=torch.bool)
        return {
            "logp": result.logp.tolist(),  # -inf becomes null in the file
            "lengths": result.lengths.tolist(),
            "target": result.target.tolist(),
            "same": [row.nonzero().flatten().tolist() for row in same],  # per chain, its columns with its context
            "chains": [clip_text(tokenizer.decode(chain), limit) for chain in result.chains],
            "rows": result.rows,
            "groups": [row // size for row in result.rows],
            "contexts": [clip_text(tokenizer.decode(context), limit, keep="end") for context in result.contexts],
            "column_context": result.column_context,
        }
