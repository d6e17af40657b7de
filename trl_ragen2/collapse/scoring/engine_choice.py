"""`mi_engine="auto"` with a vLLM trainer: each scope is scored by whichever engine is faster for it, as measured.

Neither engine is faster everywhere. The transformers scorer prefills each context once and packs the chains into
lanes that reuse its KV cache; the vLLM scorer sends one prefill request per (context, chain) pair, reuses only
whole cache blocks of a context, and (on vLLM 0.31's portable path) runs the LM head over every uncached prompt
position. On short first-turn contexts vLLM wins; on long trajectory contexts it loses (docs/scaling.md).

So the choice is measured, per scope, on the run's own batches: the first diagnostic of a scope is scored by the
transformers scorer, the second by vLLM, each timed (the scope's wall time, the largest over processes) and divided
by the scope's work, the prefill tokens of its pairs, `sum over pairs of len(context) + len(chain)`. From the third
diagnostic on, the scope is scored by the engine with the lower seconds per token. The decision depends only on
numbers every process shares, so every process makes the same one, and it is saved with the diagnostics' state so a
resumed run keeps it. Each scope logs `ragen2/mi/<scope>/vllm_engine` (1 when vLLM scored it); the choice is also
logged once, with both rates. Pure Python; the owner ([`MIDiagnostics`]) holds one selector per run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field


logger = logging.getLogger(__name__)

TRANSFORMERS, VLLM = "transformers", "vllm"
CALIBRATION_ORDER = (TRANSFORMERS, VLLM)  # the engines tried on a scope's first diagnostics, in this order


@dataclass
class EngineSelector:
    """Per scope: which engine scores the next diagnostic, and the seconds per prefill token each one took."""

    rates: dict[str, dict[str, float]] = field(default_factory=dict)  # scope -> engine -> seconds per token
    announced: set[str] = field(default_factory=set)

    def engine_for(self, scope: str) -> str:
        """The engine that scores `scope` now: the next untried one of `CALIBRATION_ORDER`, then the faster."""
        measured = self.rates.get(scope, {})
        for engine in CALIBRATION_ORDER:
            if engine not in measured:
                return engine
        return min(CALIBRATION_ORDER, key=lambda engine: (measured[engine], CALIBRATION_ORDER.index(engine)))

    def record(self, scope: str, engine: str, seconds: float, prefill_tokens: int) -> None:
        """Keep the rate of a calibration diagnostic (later diagnostics do not change the choice)."""
        measured = self.rates.setdefault(scope, {})
        if engine in measured or prefill_tokens <= 0 or not seconds > 0:
            return
        measured[engine] = seconds / prefill_tokens
        if len(measured) == len(CALIBRATION_ORDER) and scope not in self.announced:
            self.announced.add(scope)
            chosen = self.engine_for(scope)
            logger.info(
                "MI diagnostics, scope %r: scored by %s from now on (seconds per 1,000 prefill tokens: "
                "transformers %.3f, vLLM %.3f, measured on this run's first two diagnostics of the scope)",
                scope,
                chosen,
                1000 * measured[TRANSFORMERS],
                1000 * measured[VLLM],
            )

    def state_dict(self) -> dict:
        return {"rates": {scope: dict(rates) for scope, rates in self.rates.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.rates = {
            scope: {e: float(r) for e, r in rates.items()} for scope, rates in state.get("rates", {}).items()
        }
        self.announced = {scope for scope, rates in self.rates.items() if len(rates) == len(CALIBRATION_ORDER)}


def prefill_tokens(contexts, chains, mask) -> int:
    """The work of a scope in the selector's unit: `sum over scored pairs of len(context) + len(chain)`.

    Args:
        contexts: M token lists; chains: N token lists; mask: `(N, M)` bool of the pairs scored.
    """
    context_lengths = [len(context) for context in contexts]
    total = 0
    for n, chain in enumerate(chains):
        for m in mask[n].nonzero().flatten().tolist():
            total += context_lengths[m] + len(chain)
    return total
