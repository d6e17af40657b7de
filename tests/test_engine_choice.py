"""`mi_engine="auto"` on a vLLM run: each scope is scored by the engine measured faster on it, on a probe inside its
first diagnostic (`trl_ragen2.collapse.scoring.engine_choice`)."""

import logging
import math
import time

import pytest
import torch

from trl_ragen2.collapse.diagnostics import MIDiagnostics, MIDiagnosticsConfig
from trl_ragen2.collapse.scoring import TransformersCrossScorer
from trl_ragen2.collapse.scoring.engine_choice import EngineProbe, EngineSelector, prefill_tokens, probe_slice

from .diagnostics_batches import ROLLOUTS, build_batch


def test_a_scope_is_probed_once_then_keeps_the_faster_engine():
    selector = EngineSelector()
    assert selector.engine_for("first_turn") is None and selector.engine_for("trajectory") is None
    selector.record("first_turn", {"transformers": 2.0, "vllm": 1.0}, prefill_tokens=1000)
    selector.record("trajectory", {"transformers": 3.0, "vllm": 8.1}, prefill_tokens=6000)
    assert selector.engine_for("first_turn") == "vllm" and selector.engine_for("trajectory") == "transformers"
    assert selector.rates["first_turn"] == {"transformers": 2.0 / 1000, "vllm": 1.0 / 1000}
    selector.record("first_turn", {"transformers": 0.1, "vllm": 100.0}, prefill_tokens=1)  # a decided scope stays
    assert selector.engine_for("first_turn") == "vllm"
    restored = EngineSelector()
    restored.load_state_dict(selector.state_dict())
    assert restored.rates == selector.rates and restored.engine_for("trajectory") == "transformers"


def test_equal_rates_keep_transformers_and_empty_or_partial_probes_decide_nothing():
    selector = EngineSelector()
    selector.record("first_turn", {"transformers": 1.0, "vllm": 1.0}, prefill_tokens=10)
    assert selector.engine_for("first_turn") == "transformers"
    selector.record("trajectory", {"transformers": 1.0, "vllm": 2.0}, prefill_tokens=0)
    assert selector.engine_for("trajectory") is None
    # a state holding one engine's rate (saved mid-way through an older two-diagnostic calibration) is probed again
    selector.load_state_dict(
        {"rates": {"trajectory": {"transformers": 0.001}, "first_turn": {"transformers": 1, "vllm": 2}}}
    )
    assert selector.engine_for("trajectory") is None and selector.engine_for("first_turn") == "transformers"


def test_prefill_tokens_by_hand():
    contexts, chains = [[1, 2, 3], [4]], [[5, 6], [7]]
    mask = torch.tensor([[True, False], [True, True]])
    # (3 + 2) + (3 + 1) + (1 + 1)
    assert prefill_tokens(contexts, chains, mask) == 11


def test_the_probe_slice_is_the_first_whole_contexts_up_to_the_fraction():
    contexts, chains = [[1] * 4, [2] * 8, [3] * 2, [4] * 6], [[5], [6, 7]]
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[:, 0] = False  # no pair under context 0: skipped
    mask[1, 2] = False
    # tokens per context: 0, 2*8 + 3 = 19, 2 + 1 = 3, 2*6 + 3 = 15; 37 in all
    assert probe_slice(contexts, chains, mask, 1 / 8).tolist() == [[False, True, False, False]] * 2
    half = probe_slice(contexts, chains, mask, 0.6)  # 22.2 tokens: contexts 1 (19) and 2 (3) are not enough
    assert half.tolist() == [[False, True, True, True], [False, True, False, True]]
    assert not probe_slice(contexts, chains, torch.zeros(2, 4, dtype=torch.bool), 1 / 8).any()


class Engine:
    """A stand-in engine with a known score per pair (`offset + 10 n + m`) and a known delay per call; it records
    the masks it was asked for."""

    def __init__(self, offset: float, delay: float = 0.0, fails: bool = False):
        self.offset, self.delay, self.fails, self.masks = offset, delay, fails, []

    def score(self, contexts, chains, mask=None, **kwargs):
        self.masks.append(mask.clone())
        time.sleep(self.delay)
        if self.fails:
            raise RuntimeError("engine down")
        values = self.offset + 10 * torch.arange(len(chains))[:, None] + torch.arange(len(contexts))[None, :]
        return torch.where(mask, values.double(), math.nan)


CONTEXTS, CHAINS = [[1] * 4] * 4, [[5], [6]]  # 10 prefill tokens per context; 1/8 of 40 is the first context
ALL = torch.ones(2, 4, dtype=torch.bool)
SLICE = torch.tensor([[True, False, False, False]] * 2)


def test_the_probe_times_both_engines_on_the_slice_and_the_faster_scores_everything():
    hf, vllm = Engine(0.0, delay=0.2), Engine(1000.0)
    probe = EngineProbe({"transformers": hf, "vllm": vllm})
    scores = probe.score(CONTEXTS, CHAINS, ALL)
    assert probe.chosen == "vllm" and probe.tokens == 10
    assert probe.seconds["transformers"] >= 0.2 > probe.seconds["vllm"]
    # the whole matrix, slice included, is the chosen engine's
    assert torch.equal(scores, vllm.score(CONTEXTS, CHAINS, ALL))
    assert [m.tolist() for m in hf.masks] == [SLICE.tolist()]
    assert [m.tolist() for m in vllm.masks[:2]] == [SLICE.tolist(), (ALL & ~SLICE).tolist()]


def test_an_engine_that_fails_on_the_probe_loses(caplog):
    hf, vllm = Engine(0.0, delay=0.1), Engine(1000.0, fails=True)
    probe = EngineProbe({"transformers": hf, "vllm": vllm})
    with caplog.at_level(logging.WARNING):
        scores = probe.score(CONTEXTS, CHAINS, ALL)
    assert probe.chosen == "transformers" and probe.seconds["vllm"] == math.inf
    assert torch.equal(scores, hf.score(CONTEXTS, CHAINS, ALL))
    assert "vllm scorer failed on the engine probe" in caplog.text and "engine down" in caplog.text
    with pytest.raises(RuntimeError, match="both MI scoring engines failed"):
        EngineProbe({"transformers": Engine(0.0, fails=True), "vllm": Engine(1.0, fails=True)}).score(
            CONTEXTS, CHAINS, ALL
        )


def test_a_probe_without_pairs_scores_with_transformers_and_decides_nothing():
    hf, vllm = Engine(0.0), Engine(1000.0)
    probe = EngineProbe({"transformers": hf, "vllm": vllm})
    none = torch.zeros(2, 4, dtype=torch.bool)
    assert torch.isnan(probe.score(CONTEXTS, CHAINS, none)).all()
    assert probe.chosen is None and len(hf.masks) == 1 and vllm.masks == []


class DelayedScorer:
    """A real transformers scorer whose calls take `delay(number of contexts)` seconds more: a stand-in for an engine
    whose cost grows with the contexts (one prefill per pair) or not, so the test knows which one is faster."""

    def __init__(self, model, delay):
        self.inner, self.delay = TransformersCrossScorer(model), delay

    def score(self, contexts, chains, mask=None, **kwargs):
        time.sleep(self.delay(len(contexts)))
        return self.inner.score(contexts, chains, mask, **kwargs)


class CountingScorer:
    """A scorer that also counts, per call, the prefill tokens of the pairs it is asked for."""

    def __init__(self, scorer):
        self.scorer, self.tokens = scorer, []

    def score(self, contexts, chains, mask=None, **kwargs):
        self.tokens.append(sum(len(contexts[m]) + len(chains[n]) for n, m in mask.nonzero().tolist()))
        return self.scorer.score(contexts, chains, mask, **kwargs)


def test_the_diagnostics_score_each_scope_with_the_faster_engine(tiny_model, tiny_tokenizer):
    batch, _, _ = build_batch(tiny_tokenizer, ROLLOUTS)
    scorers = {
        "transformers": DelayedScorer(tiny_model, lambda contexts: 0.3),  # the same cost on every shape
        "vllm": DelayedScorer(tiny_model, lambda contexts: 0.0 if contexts <= 2 else 2.0),  # slow on many contexts
    }
    config = MIDiagnosticsConfig(num_samples=64, num_permutations=0, num_bootstrap=0, text_metrics=False)
    diagnostics = MIDiagnostics(config)
    runs = [diagnostics.compute(batch, None, tokenizer=tiny_tokenizer, scorer=scorers, step=s) for s in (1, 5, 10)]
    engines = [(r["ragen2/mi/first_turn/vllm_engine"], r["ragen2/mi/trajectory/vllm_engine"]) for r in runs]
    # decided on the first diagnostic: the first-turn scope (2 contexts) on vLLM, the trajectory (4 histories) not
    assert engines == [(1.0, 0.0)] * 3
    rates = diagnostics.engines.rates
    assert rates["first_turn"]["vllm"] < rates["first_turn"]["transformers"]
    assert rates["trajectory"]["transformers"] < rates["trajectory"]["vllm"]
    # the probed diagnostic's matrices are whole: the same proxies as one engine scoring everything
    counting = CountingScorer(TransformersCrossScorer(tiny_model))
    reference = MIDiagnostics(config).compute(batch, None, tokenizer=tiny_tokenizer, scorer=counting, step=1)
    # the work logged per scope is the prefill tokens of the pairs the scorer was given (one call per scope)
    logged = [reference[f"ragen2/mi/{scope}/scored_tokens"] for scope in ("first_turn", "trajectory")]
    assert logged == counting.tokens and min(logged) > 0
    for key, value in reference.items():
        if not key.endswith(("time_s", "vllm_engine")):  # the slice and the rest are scored in separate calls
            assert runs[0][key] == pytest.approx(value, abs=1e-5, nan_ok=True), key
    # the choice is part of the resumable state
    resumed = MIDiagnostics(config)
    resumed.load_state_dict(diagnostics.state_dict())
    assert (
        resumed.engines.engine_for("trajectory") == "transformers"
        and resumed.engines.engine_for("first_turn") == "vllm"
    )
