"""`mi_engine="auto"` with a vLLM trainer: each scope is scored by whichever engine is faster for it, as measured.

Neither engine is faster everywhere. The transformers scorer prefills each context once and packs the chains into
lanes that reuse its KV cache; the vLLM scorer sends one prefill request per (context, chain) pair, reuses only
whole cache blocks of a context, and (on vLLM 0.31's portable path) runs the LM head over every uncached prompt
position. On short first-turn contexts vLLM can win; on long trajectory contexts it loses (docs/scaling.md).

So the choice is measured, per scope, on the run's own batch, by a probe inside the scope's first diagnostic
([`EngineProbe`]): both engines score the same slice of the scope's pairs (the first contexts, with all their
chains, up to `PROBE_FRACTION` of the pairs' prefill tokens), each timed (the largest over processes), and the faster
one scores the rest of the scope and every later diagnostic of it. The slice's scores come from that engine too, so
each matrix is one engine's. The probe costs the slower engine's time on the slice, once per scope and run. Work is
counted as prefill tokens, `sum over pairs of len(context) + len(chain)`; the rates logged are seconds per token on
the slice.

The decision depends only on numbers every process shares, so every process makes the same one; it is saved with the
diagnostics' state, so a resumed run keeps it. An engine that fails on the slice (on any process) loses. Each scope
logs `ragen2/mi/<scope>/vllm_engine` (1 when vLLM scored it); the choice is also logged once, with both rates. Pure
Python over the two scorers; the owner ([`MIDiagnostics`]) holds one selector per run and one probe per undecided
scope and diagnostic.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import torch

from .collective import ProcessGroup


logger = logging.getLogger(__name__)

TRANSFORMERS, VLLM = "transformers", "vllm"
ENGINES = (TRANSFORMERS, VLLM)  # on equal rates, the first wins
PROBE_FRACTION = 1 / 8  # share of a scope's prefill tokens that both engines score on its first diagnostic


@dataclass
class EngineSelector:
    """Per scope: the engine measured faster, and the seconds per prefill token each engine took on the probe."""

    rates: dict[str, dict[str, float]] = field(default_factory=dict)  # scope -> engine -> seconds per token

    def engine_for(self, scope: str) -> str | None:
        """The engine that scores `scope`, or `None` while it has not been probed (then use an [`EngineProbe`])."""
        measured = self.rates.get(scope, {})
        if any(engine not in measured for engine in ENGINES):
            return None
        return min(ENGINES, key=lambda engine: (measured[engine], ENGINES.index(engine)))

    def record(self, scope: str, seconds: dict[str, float], prefill_tokens: int) -> None:
        """Keep a probe's times (both engines on the same `prefill_tokens`); a decided scope keeps its choice."""
        if self.engine_for(scope) is not None or prefill_tokens <= 0 or any(e not in seconds for e in ENGINES):
            return
        self.rates[scope] = {engine: seconds[engine] / prefill_tokens for engine in ENGINES}
        measured = self.rates[scope]
        logger.info(
            "MI diagnostics, scope %r: scored by %s from now on (seconds per 1,000 prefill tokens, measured on %d "
            "tokens of this run's first diagnostic of the scope: transformers %.3f, vLLM %.3f)",
            scope,
            self.engine_for(scope),
            prefill_tokens,
            1000 * measured[TRANSFORMERS],
            1000 * measured[VLLM],
        )

    def state_dict(self) -> dict:
        return {"rates": {scope: dict(rates) for scope, rates in self.rates.items()}}

    def load_state_dict(self, state: dict) -> None:
        # a scope with one engine's rate (a state saved while an older calibration was half done) is probed again
        self.rates = {
            scope: {e: float(r) for e, r in rates.items()}
            for scope, rates in state.get("rates", {}).items()
            if all(engine in rates for engine in ENGINES)
        }


class EngineProbe:
    """A scope's scorer on its first diagnostic: both engines time one slice of the pairs; the faster scores the rest.

    Every process must call `score` once per scope, as with any scorer (it gathers the times; engines with
    collectives of their own are called in the same order everywhere). After the call, `chosen` is the engine that
    scored the matrix (`None` when no process had a pair to probe: then transformers scored it and nothing is
    decided), `seconds` each engine's time on the slice and `tokens` the slice's prefill tokens, over processes.
    """

    def __init__(self, scorers: dict, group: ProcessGroup | None = None, fraction: float = PROBE_FRACTION):
        self.scorers, self.group, self.fraction = scorers, group if group is not None else ProcessGroup(), fraction
        self.chosen: str | None = None
        self.seconds: dict[str, float] = {}
        self.tokens = 0

    def score(self, contexts, chains, mask=None, **kwargs) -> torch.Tensor:
        """`(N, M)` scores of the masked pairs, as the scorers return them."""
        if mask is None:
            mask = torch.ones(len(chains), len(contexts), dtype=torch.bool)
        probe = probe_slice(contexts, chains, mask, self.fraction)
        self.tokens = sum(self.group.all_gather(prefill_tokens(contexts, chains, probe)))
        if self.tokens == 0:  # nothing to measure anywhere: score as the first engine, decide later
            return self.scorers[ENGINES[0]].score(contexts, chains, mask, **kwargs)
        probed, failures = {}, {}
        for engine in ENGINES:
            began = time.perf_counter()
            try:
                probed[engine] = self.scorers[engine].score(contexts, chains, probe, **kwargs)
            except Exception as error:  # the other engine may still serve; decided below on every process alike
                failures[engine] = repr(error)
            self.seconds[engine] = time.perf_counter() - began if engine not in failures else math.inf
        gathered = self.group.all_gather((self.seconds, failures))
        self.seconds = {engine: max(seconds[engine] for seconds, _ in gathered) for engine in ENGINES}
        failed = {engine: reason for _, local in gathered for engine, reason in local.items()}
        if len(failed) == len(ENGINES):
            raise RuntimeError(f"both MI scoring engines failed on the probe: {failed}")
        for engine, reason in failed.items():
            logger.warning(
                "MI diagnostics: the %s scorer failed on the engine probe (%s); it is not used", engine, reason
            )
        self.chosen = min(ENGINES, key=lambda engine: (self.seconds[engine], ENGINES.index(engine)))
        rest = self.scorers[self.chosen].score(contexts, chains, mask & ~probe, **kwargs)
        return torch.where(probe, probed[self.chosen], rest)


def probe_slice(contexts, chains, mask, fraction: float) -> torch.Tensor:
    """The probe's pairs: every masked pair of the first contexts (in order), until their prefill tokens reach
    `fraction` of all the masked pairs' (at least one context with pairs, when there is one).

    Args:
        contexts: M token lists; chains: N token lists; mask: `(N, M)` bool of the pairs to score.
    Returns: `(N, M)` bool, a subset of `mask` made of whole columns.
    """
    context_tokens = column_tokens(contexts, chains, mask)
    budget = fraction * sum(context_tokens)
    probe = torch.zeros_like(mask)
    taken = 0
    for m, tokens in enumerate(context_tokens):
        if tokens == 0:
            continue
        if taken >= budget:
            break
        probe[:, m] = mask[:, m]
        taken += tokens
    return probe


def prefill_tokens(contexts, chains, mask) -> int:
    """The work of a scope in the selector's unit: `sum over scored pairs of len(context) + len(chain)`.

    Args:
        contexts: M token lists; chains: N token lists; mask: `(N, M)` bool of the pairs scored.
    """
    return sum(column_tokens(contexts, chains, mask))


def column_tokens(contexts, chains, mask) -> list[int]:
    """`prefill_tokens` per context: M counts."""
    counts = []
    for m, context in enumerate(contexts):
        rows = mask[:, m].nonzero().flatten().tolist()
        counts.append(len(rows) * len(context) + sum(len(chains[n]) for n in rows))
    return counts
