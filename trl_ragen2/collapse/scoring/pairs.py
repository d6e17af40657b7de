"""Sampled (context X, reasoning Z) pairs for in-batch cross-scoring, in RAGEN-2's two scopes.

- **first_turn**: X = the initial prompt (with its generation prefix), Z = the reasoning of the first assistant
  turn. `num_samples` rows are drawn *without* replacement; the columns are the distinct prompts of the whole batch,
  so with P prompts x G rollouts, chance retrieval is about 1/P.
- **trajectory**: `num_samples` draws *with* replacement, a row m ~ U(rows) then a turn t ~ U(turns of m);
  X = the full history before turn t (prompt + completion tokens before that turn), Z = turn t's reasoning. Each kept
  draw is its own column; identical contexts are marked `same` (they count as correct retrievals). Only a uniform
  subset of the draws' chains may be scored ([`chains_to_score`]), each still against every column.

Sampling uses only per-row metadata ([`RowInfo`]: prompt ids and turn count) gathered from every process, and a
seeded generator, so all processes draw the same pairs. Z is the extracted reasoning text re-tokenised (as RAGEN
does); pairs whose Z is empty are dropped and counted. Identical contexts are scored once ([`unique_contexts`]) and
expanded back to their columns ([`expand_columns`]).

Cheap mode: instead of all columns, each chain is scored against its own context and K negatives
([`select_negatives`]). This is a *biased* estimate: with random negatives, logsumexp over the K+1 columns minus
log(K+1) is the InfoNCE bound, biased low and capped at log(K+1); with the most similar contexts as negatives (hard
negatives) the marginal is underestimated, so MI is overestimated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...runs.keys import MI_SCOPES
from .reasoning import ReasoningExtractor, ThinkTagExtractor


NEGATIVE_SAMPLING = ("random", "similar")


@dataclass(frozen=True)
class RowInfo:
    """What every process must know about every row of the batch to draw the same pairs."""

    prompt: tuple[int, ...]  # unpadded prompt ids
    num_turns: int


@dataclass(frozen=True)
class Draw:
    """One sampled pair: global `row`, `turn` index in that row, and its `column` in the scoring matrix."""

    index: int  # position in the sample, also the key that orders results across processes
    row: int
    turn: int
    column: int


def scope_generator(seed: int, step: int, scope: str) -> torch.Generator:
    """The generator of one scope at one optimizer step; identical on every process."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 7 + MI_SCOPES.index(scope))


def sample_first_turn(
    infos: Sequence[RowInfo], num_samples: int, generator: torch.Generator
) -> tuple[list[Draw], list[tuple[int, ...]], int]:
    """Draw first-turn pairs without replacement.

    Returns:
        `(draws, prompts, num_without_turns)`: the draws (rows with at least one turn), the distinct prompts of the
        batch in order of first appearance (the columns; `draw.column` indexes it), and how many drawn rows had no
        turn at all (an empty completion; counted as dropped).
    """
    prompts, column_of = [], {}
    for info in infos:
        if info.prompt not in column_of:
            column_of[info.prompt] = len(prompts)
            prompts.append(info.prompt)
    chosen = torch.randperm(len(infos), generator=generator)[: min(num_samples, len(infos))].tolist()
    draws, without_turns = [], 0
    for index, row in enumerate(chosen):
        if infos[row].num_turns == 0:
            without_turns += 1
            continue
        draws.append(Draw(index=index, row=row, turn=0, column=column_of[infos[row].prompt]))
    return draws, prompts, without_turns


def sample_trajectory(
    infos: Sequence[RowInfo], num_samples: int, generator: torch.Generator
) -> tuple[list[Draw], int]:
    """Draw `num_samples` (row, turn) pairs with replacement: row ~ U(rows), then turn ~ U(turns of that row).

    Each draw becomes its own column once the draws with empty reasoning are dropped; until then `draw.column` is
    the draw's index. Returns `(draws, num_without_turns)`.
    """
    draws, without_turns = [], 0
    for index in range(num_samples):
        row = int(torch.randint(len(infos), (1,), generator=generator))
        num_turns = infos[row].num_turns
        if num_turns == 0:
            without_turns += 1
            continue
        turn = int(torch.randint(num_turns, (1,), generator=generator))
        draws.append(Draw(index=index, row=row, turn=turn, column=index))
    return draws, without_turns


def chains_to_score(keys: Sequence[int], num_chains: int | None, generator: torch.Generator) -> set[int]:
    """A uniform subset of `num_chains` of `keys` (all of them when `num_chains` is None or not smaller).

    The scope scores only these draws' chains, each against every column. Each subset of that size is equally
    likely, so a mean over the chosen chains of a per-chain term is unbiased for the mean over all of them.
    """
    if num_chains is None or num_chains >= len(keys):
        return set(keys)
    chosen = torch.randperm(len(keys), generator=generator)[:num_chains].tolist()
    return {keys[i] for i in chosen}


class PairBuilder:
    """Turns token spans into (X, Z) token lists with a tokenizer and a reasoning extractor.

    Args:
        tokenizer: the policy's tokenizer (decodes turns, re-tokenises the reasoning).
        extractor (`Callable[[str], str]`, *optional*):
            `text -> reasoning text`; defaults to [`ThinkTagExtractor`]. If it has an `open_tag` attribute, every
            context is made to end with that tag (RAGEN's X = ... + assistant header + `<think>`).
    """

    def __init__(self, tokenizer, extractor: ReasoningExtractor | None = None):
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap their tokenizer
        self.extractor = extractor if extractor is not None else ThinkTagExtractor()
        if not callable(self.extractor):
            raise ValueError(f"extractor must be a callable text -> reasoning text, got {self.extractor!r}")
        self.open_tag = getattr(self.extractor, "open_tag", None)
        self._open_ids = self._encode(self.open_tag) if self.open_tag else []

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def context(self, ids: Sequence[int]) -> list[int]:
        """`ids` followed by the opening tag unless its text already ends with it."""
        ids = [int(token) for token in ids]
        if not self._open_ids:
            return ids
        tail = self.tokenizer.decode(ids[-(len(self._open_ids) + 4) :], skip_special_tokens=False)
        return ids if tail.rstrip().endswith(self.open_tag) else ids + self._open_ids

    def reasoning(self, turn_ids: Sequence[int]) -> list[int]:
        """Re-tokenised reasoning of one turn; `[]` when the extracted reasoning is empty or whitespace."""
        text = self.tokenizer.decode([int(token) for token in turn_ids], skip_special_tokens=True)
        reasoning = self.extractor(text)
        if not isinstance(reasoning, str):
            raise ValueError(f"the reasoning extractor must return a str, got {type(reasoning).__name__}")
        return self._encode(reasoning) if reasoning.strip() else []


def unique_contexts(contexts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """Deduplicate contexts: `(uniques, index)` with `contexts[c] == uniques[index[c]]`."""
    uniques, index, seen = [], [], {}
    for context in contexts:
        key = tuple(context)
        if key not in seen:
            seen[key] = len(uniques)
            uniques.append(list(key))
        index.append(seen[key])
    return uniques, index


def _jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def select_negatives(
    own: Sequence[int],
    contexts: Sequence[Sequence[int]],
    num_negatives: int,
    strategy: str,
    *,
    seed: int,
    keys: Sequence[int],
) -> list[list[int]]:
    """Pick negative contexts for each chain (cheap, biased mode; see the module docstring).

    Args:
        own: index (into `contexts`, already deduplicated) of each chain's own context.
        contexts: the distinct contexts.
        num_negatives: K; capped at `len(contexts) - 1` so every chain gets the same number.
        strategy: `"random"` (uniform without replacement) or `"similar"` (highest token-set Jaccard similarity to the
            own context, ties by index).
        seed, keys: a chain's random negatives depend only on `(seed, keys[n])`, so they do not depend on which
            process scores the chain.

    Returns:
        Per chain, K context indices, none equal to its own.
    """
    if strategy not in NEGATIVE_SAMPLING:
        raise ValueError(f"negative sampling must be one of {NEGATIVE_SAMPLING}, got {strategy!r}")
    k = min(num_negatives, len(contexts) - 1)
    sets = [frozenset(context) for context in contexts] if strategy == "similar" else None
    negatives = []
    for own_index, key in zip(own, keys, strict=True):
        others = [c for c in range(len(contexts)) if c != own_index]
        if strategy == "random":
            order = torch.randperm(len(others), generator=torch.Generator().manual_seed(seed * 1_000_003 + key))
            negatives.append([others[i] for i in order[:k].tolist()])
        else:
            ranked = sorted(others, key=lambda c: (-_jaccard(sets[own_index], sets[c]), c))
            negatives.append(ranked[:k])
    return negatives


def expand_columns(
    scores: torch.Tensor, own_column: Sequence[int], column_context: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From scores against distinct contexts to the full matrix over columns.

    Args:
        scores: `(N, U)` log p(z_n | unique context u).
        own_column: `(N,)` column of each chain's own prompt.
        column_context: `(D,)` unique context of each column.

    Returns:
        `(logp (N, D), target (N,), same (N, D))`, `same[n, d]` = column d holds the same context as n's own column.
    """
    column_context = torch.as_tensor(list(column_context), dtype=torch.long)
    target = torch.as_tensor(list(own_column), dtype=torch.long)
    logp = scores[:, column_context]
    same = column_context[None, :] == column_context[target][:, None]
    return logp, target, same


def negatives_matrix(
    scores: torch.Tensor, own_context: Sequence[int], negatives: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(logp (N, K+1), target (N,))`: column 0 is each chain's own context, columns 1..K its negatives."""
    rows = torch.arange(scores.shape[0])[:, None]
    columns = torch.tensor([[own, *negs] for own, negs in zip(own_context, negatives, strict=True)], dtype=torch.long)
    columns = columns.reshape(scores.shape[0], -1)
    return scores[rows, columns], torch.zeros(scores.shape[0], dtype=torch.long)
