"""The text template metrics of `trl_ragen2.collapse.text_metrics` on a training batch's reasoning, across processes.

Every turn of every row of the (pre-filter) batch gives one chain: its reasoning, extracted and re-tokenised as for the
MI diagnostics (`trl_ragen2.collapse.scoring.PairBuilder.reasoning`), labelled with the row's prompt (rows sharing a
prompt form its group). The chains of all processes are gathered, so every process logs the same numbers; a failure
anywhere (an unreadable batch, an extractor error) turns the keys into NaN on every process, never a hang. The metrics
are on token ids of the policy's tokenizer, so they compare runs with the same tokenizer.
"""

from __future__ import annotations

import math

from .scoring.collective import ProcessGroup
from .text_metrics import TEXT_KEYS, text_template_metrics


def local_reasoning_chains(local, builder) -> tuple[list[list[int]], list[tuple[int, ...]]]:
    """`(chains, prompts)`: the reasoning of each turn of this process's rows, and the prompt of each chain."""
    chains, prompts = [], []
    for prompt, completion, spans in zip(local.prompts, local.completions, local.spans, strict=True):
        for start, end in spans:
            chains.append(builder.reasoning(completion[start:end]))
            prompts.append(tuple(prompt))
    return chains, prompts


def batch_text_metrics(local, builder, group: ProcessGroup, error: str | None = None) -> tuple[dict, str | None]:
    """`({key: value}, error)` for the gathered batch; a collective, to be called by every process.

    `local` is the process's `LocalRollouts` (None when reading the batch failed, with `error` saying why).
    """
    chains, prompts = [], []
    if local is not None and error is None:
        try:
            chains, prompts = local_reasoning_chains(local, builder)
        except Exception as exc:  # reported on every process below, never raised mid-collective
            error = f"extracting the reasoning failed: {exc!r}"
    gathered = group.all_gather((chains, prompts, error))
    errors = [f"process {rank}: {err}" for rank, (_, _, err) in enumerate(gathered) if err]
    if errors:
        return dict.fromkeys(TEXT_KEYS, math.nan), "; ".join(errors)
    all_chains = [chain for part, _, _ in gathered for chain in part]
    group_of_prompt: dict[tuple[int, ...], int] = {}  # long prompts become small group labels, hashed once
    groups = [group_of_prompt.setdefault(prompt, len(group_of_prompt)) for _, part, _ in gathered for prompt in part]
    return text_template_metrics(all_chains, groups), None
