"""One scope of the MI diagnostics across processes: sample pairs, score the local chains, gather the matrix.

Each process holds its own rows of the batch. The flow is a fixed sequence of collectives, run by every process
whatever its local data, so a process with no valid pair (or a local error) never leaves the others waiting:

1. `gather_rows`: every process's [`RowInfo`] (prompt ids, turn count), hence the global row order.
2. `score_scope`, per scope:
   a. all processes draw the same pairs from a seeded generator; each builds the chains (and, for the trajectory
      scope, the contexts) of the pairs on its own rows;
   b. gather the contexts, so every process knows every column;
   c. each process scores its chains against the columns (the scorer may itself be a collective: vLLM server mode,
      sharded parameters); skipped by all processes alike when there is nothing to score;
   d. gather the per-chain score rows, so every process assembles the same matrix and logs the same numbers.

Local failures are carried through the gathers as messages and turn the scope into NaN on every process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .collective import ProcessGroup
from .engine_choice import prefill_tokens
from .pairs import (
    Draw,
    PairBuilder,
    RowInfo,
    chains_to_score,
    expand_columns,
    negatives_matrix,
    sample_first_turn,
    sample_trajectory,
    scope_generator,
    select_negatives,
    unique_contexts,
)
from .reasoning import turn_spans


@dataclass
class LocalRollouts:
    """This process's rows: unpadded prompt and completion ids, and turn spans into the completions."""

    prompts: list[list[int]]
    completions: list[list[int]]
    spans: list[list[tuple[int, int]]]

    @classmethod
    def from_batch(cls, batch: dict, rows: Sequence[dict] | None, pad_token_id: int | None) -> LocalRollouts:
        """From a TRL GRPO batch (`prompt_ids` left-padded, `completion_ids` right-padded, optional `tool_mask`)."""
        missing = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask"} - set(batch)
        if missing:
            raise ValueError(
                f"the batch lacks {sorted(missing)}; pass the dict _generate_and_score_completions returns"
            )
        prompt_ids, prompt_mask = batch["prompt_ids"].cpu(), batch["prompt_mask"].cpu()
        completion_ids, completion_mask = batch["completion_ids"].cpu(), batch["completion_mask"].cpu()
        tool_mask = batch.get("tool_mask")
        tool_mask = tool_mask.cpu() if tool_mask is not None else None
        if rows is not None and len(rows) != prompt_ids.shape[0]:
            raise ValueError(
                f"rows has {len(rows)} entries but the batch {prompt_ids.shape[0]} rows; rows[i] must match row i"
            )
        spans = turn_spans(rows, completion_ids, completion_mask, tool_mask, pad_token_id)
        prompts = [row[mask.bool()].tolist() for row, mask in zip(prompt_ids, prompt_mask, strict=True)]
        ends = [row_spans[-1][1] if row_spans else 0 for row_spans in spans]
        completions = [row[:end].tolist() for row, end in zip(completion_ids, ends, strict=True)]
        return cls(prompts, completions, spans)

    def infos(self) -> list[RowInfo]:
        """Each row's unpadded prompt and turn count, as `RowInfo`."""
        return [RowInfo(tuple(p), len(s)) for p, s in zip(self.prompts, self.spans, strict=True)]


class ScoreMemo:
    """Scores already computed for one batch, keyed by (context, chain); shared by the scopes of that batch.

    Token lists are interned once per call, so long trajectory contexts are hashed once, not once per pair.
    """

    def __init__(self):
        self._ids: dict[tuple[int, ...], int] = {}
        self._scores: dict[tuple[int, int], float] = {}

    def ids(self, sequences) -> list[int]:
        """One id per token sequence; equal sequences get the same id within this memo."""
        return [self._ids.setdefault(tuple(seq), len(self._ids)) for seq in sequences]

    def get(self, context_id: int, chain_id: int) -> float:
        """The score stored for `(context_id, chain_id)`, NaN if none."""
        return self._scores.get((context_id, chain_id), float("nan"))

    def put(self, context_id: int, chain_id: int, score: float) -> None:
        """Store the score of `(context_id, chain_id)`."""
        self._scores[(context_id, chain_id)] = score


@dataclass
class ScopeResult:
    """The gathered scoring matrix of one scope (identical on every process), or the reason there is none."""

    logp: torch.Tensor | None = None  # (N, C)
    lengths: torch.Tensor | None = None  # (N,)
    target: torch.Tensor | None = None  # (N,)
    same: torch.Tensor | None = None  # (N, C) bool
    # What the matrix scored, for the sample log (full mode only): each chain's reasoning ids and global row, the
    # distinct contexts' ids, and the distinct context of each column
    chains: list[list[int]] | None = None  # (N,)
    rows: list[int] | None = None  # (N,)
    contexts: list[list[int]] | None = None
    column_context: list[int] | None = None  # (C,)
    num_dropped_empty: int = 0
    num_unscored: int = 0
    # the work scored, over processes: `sum of len(context) + len(chain)` over the pairs sent to the scorer (pairs
    # already scored for this batch by the other scope are not counted)
    scored_tokens: int = 0
    time_s: float = 0.0
    error: str | None = None


def gather_rows(local: LocalRollouts | None, error: str | None, group: ProcessGroup):
    """Collective 1: `(infos of all rows in process order, offset of this process's first row, errors)`."""
    gathered = group.all_gather((local.infos() if local is not None else [], error))
    errors = [f"process {rank}: {err}" for rank, (_, err) in enumerate(gathered) if err]
    offset = sum(len(infos) for infos, _ in gathered[: group.rank])
    return [info for infos, _ in gathered for info in infos], offset, errors


def _local_pairs(scope, draws: list[Draw], local: LocalRollouts | None, offset: int, builder: PairBuilder):
    """Chains (and trajectory contexts) of the draws on this process's rows: `[(draw, context | None, chain)]`."""
    out = []
    for draw in draws:
        row = draw.row - offset
        if local is None or not 0 <= row < len(local.prompts):
            continue
        start, end = local.spans[row][draw.turn]
        chain = builder.reasoning(local.completions[row][start:end])
        context = (
            builder.context(local.prompts[row] + local.completions[row][:start]) if scope == "trajectory" else None
        )
        out.append((draw, context, chain))
    return out


def score_scope(
    scope: str,
    *,
    local: LocalRollouts | None,
    infos: list[RowInfo],
    offset: int,
    group: ProcessGroup,
    builder: PairBuilder,
    scorer,
    num_samples: int,
    seed: int,
    step: int,
    num_chains: int | None = None,
    num_negatives: int | None = None,
    negative_sampling: str = "random",
    sync_forwards: bool = False,
    memo: ScoreMemo | None = None,
) -> ScopeResult:
    """Collectives 2-4 for one scope (see the module docstring); every process must call it.

    `memo` holds scores already computed for this batch; pass the same [`ScoreMemo`] to every scope of a batch (never
    across batches: the weights change). `num_chains` scores only a uniform subset of that many kept chains (drawn
    alike on every process), each against every column.
    """
    began = time.perf_counter()
    generator = scope_generator(seed, step, scope)
    error, pairs, prompts = None, [], []
    if scope == "first_turn":
        draws, prompts, without_turns = sample_first_turn(infos, num_samples, generator)
    else:
        draws, without_turns = sample_trajectory(infos, num_samples, generator)
    try:
        pairs = _local_pairs(scope, draws, local, offset, builder)
    except Exception as exc:  # carried to every process below, never raised mid-collective
        error = f"building pairs failed: {exc!r}"

    # -- collective 2: which draws survived, and the trajectory contexts
    shared = [(draw.index, context, bool(chain)) for draw, context, chain in pairs]
    gathered = group.all_gather((shared, error))
    errors = [f"process {rank}: {err}" for rank, (_, err) in enumerate(gathered) if err]
    kept = sorted((item for items, _ in gathered for item in items if item[2]), key=lambda item: item[0])
    num_dropped = without_turns + sum(1 for items, _ in gathered for item in items if not item[2])
    if scope == "first_turn":
        columns = [builder.context(prompt) for prompt in prompts]  # the distinct prompts of the whole batch
        column_of_draw = {draw.index: draw.column for draw in draws}
    else:
        columns = [context for _, context, _ in kept]  # every kept draw is its own column
        column_of_draw = {index: position for position, (index, _, _) in enumerate(kept)}
    contexts, column_context = unique_contexts(columns)
    result = ScopeResult(num_dropped_empty=num_dropped)
    scored = chains_to_score([index for index, _, _ in kept], num_chains, generator)

    # -- collective 3 (inside the scorer for server/sharded engines): score this process's chains
    mine = [(draw, chain) for draw, _, chain in pairs if chain and draw.index in scored]
    rows, tokens = [], 0
    if not errors and kept:
        try:
            negatives_fn = None
            if num_negatives is not None:
                keys = [draw.index for draw, _ in mine]

                def negatives_fn(own):
                    return select_negatives(
                        own, contexts, num_negatives, negative_sampling, seed=seed * 7919 + step, keys=keys
                    )

            rows, tokens = _score_local(
                mine,
                contexts,
                column_context,
                column_of_draw,
                scorer,
                negatives_fn=negatives_fn,
                sync=group.max if sync_forwards else None,
                memo=memo if memo is not None else ScoreMemo(),
            )
        except Exception as exc:
            error = f"scoring failed: {exc!r}"

    # -- collective 4: every chain's score row, so every process builds the same matrix
    gathered = group.all_gather((rows, error, time.perf_counter() - began, tokens))
    errors += [f"process {rank}: {err}" for rank, (_, err, _, _) in enumerate(gathered) if err]
    result.time_s = max(elapsed for _, _, elapsed, _ in gathered)
    result.scored_tokens = sum(tokens for _, _, _, tokens in gathered)
    if errors:
        result.error = "; ".join(errors)
        return result
    if not kept:
        result.error = "no pair with non-empty reasoning was sampled"
        return result
    entries = sorted((entry for entries, _, _, _ in gathered for entry in entries), key=lambda entry: entry[0])
    complete = [entry for entry in entries if not any(v != v for v in entry[3])]  # drop rows with NaN scores
    result.num_unscored = len(entries) - len(complete)
    if not complete:
        result.error = "the engine returned no usable score"
        return result
    scores = torch.tensor([entry[3] for entry in complete], dtype=torch.float64)
    result.lengths = torch.tensor([entry[1] for entry in complete], dtype=torch.float64)
    own = [entry[2] for entry in complete]
    if num_negatives is None:
        result.logp, result.target, result.same = expand_columns(scores, own, column_context)
        row_of_draw = {draw.index: draw.row for draw in draws}
        result.chains = [entry[4] for entry in complete]
        result.rows = [row_of_draw[entry[0]] for entry in complete]
        result.contexts, result.column_context = [list(context) for context in contexts], list(column_context)
    else:
        result.logp, result.target = scores, torch.zeros(len(complete), dtype=torch.long)
    return result


def _score_local(mine, contexts, column_context, column_of_draw, scorer, *, negatives_fn, sync, memo):
    """Score this process's chains; returns `[(draw index, length, own column, score row, chain ids)]` and the
    prefill tokens of the pairs sent to the scorer.

    Full mode: the score row is over the distinct contexts (expanded to columns after the gather). Negatives mode
    (`negatives_fn` given): the row is [own, negative_1, ..., negative_K] over distinct contexts. Pairs already in
    `memo` (scored earlier for the same batch, e.g. by the other scope) are not scored again.
    """
    unique_chains, chain_index = unique_contexts([chain for _, chain in mine])
    own_context = [column_context[column_of_draw[draw.index]] for draw, _ in mine]
    negatives = negatives_fn(own_context) if negatives_fn is not None else None
    wanted = torch.ones(len(unique_chains), len(contexts), dtype=torch.bool)
    if negatives is not None:
        wanted[:] = False
        for n, (own, negs) in enumerate(zip(own_context, negatives, strict=True)):
            wanted[chain_index[n], [own, *negs]] = True
    context_ids, chain_ids = memo.ids(contexts), memo.ids(unique_chains)
    known = torch.full(wanted.shape, float("nan"), dtype=torch.float64)
    for u, c in wanted.nonzero().tolist():
        known[u, c] = memo.get(context_ids[c], chain_ids[u])
    todo = wanted & torch.isnan(known)
    scores = scorer.score(contexts, unique_chains, todo, forward_calls_sync=sync)  # (U_chains, U_contexts)
    scores = torch.where(todo, scores, known)
    for u, c in todo.nonzero().tolist():
        memo.put(context_ids[c], chain_ids[u], scores[u, c].item())
    scores = scores[chain_index]  # (n_local, U_contexts)
    if negatives is not None:
        scores, _ = negatives_matrix(scores, own_context, negatives)
        own_column = [0] * len(mine)
    else:
        own_column = [column_of_draw[draw.index] for draw, _ in mine]
    rows = [
        (draw.index, len(chain), own_column[n], scores[n].tolist(), list(chain))
        for n, (draw, chain) in enumerate(mine)
    ]
    return rows, prefill_tokens(contexts, unique_chains, todo)
