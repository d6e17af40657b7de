"""`mi_engine="auto"` on a vLLM run: each scope is scored by the engine measured faster on it
(`trl_ragen2.collapse.scoring.engine_choice`)."""

import time

import torch

from trl_ragen2.collapse.diagnostics import MIDiagnostics, MIDiagnosticsConfig
from trl_ragen2.collapse.scoring import TransformersCrossScorer
from trl_ragen2.collapse.scoring.engine_choice import EngineSelector, prefill_tokens

from .diagnostics_batches import ROLLOUTS, build_batch


def test_calibration_order_then_the_faster_engine_per_scope():
    selector = EngineSelector()
    assert selector.engine_for("first_turn") == "transformers"
    selector.record("first_turn", "transformers", seconds=2.0, prefill_tokens=1000)  # 2 ms per token
    assert selector.engine_for("first_turn") == "vllm"
    assert selector.engine_for("trajectory") == "transformers"  # each scope calibrates on its own
    selector.record("first_turn", "vllm", seconds=1.0, prefill_tokens=800)  # 1.25 ms per token
    selector.record("trajectory", "transformers", seconds=3.0, prefill_tokens=6000)  # 0.5 ms per token
    selector.record("trajectory", "vllm", seconds=8.1, prefill_tokens=6000)  # 1.35 ms per token
    assert selector.engine_for("first_turn") == "vllm"
    assert selector.engine_for("trajectory") == "transformers"
    selector.record("first_turn", "vllm", seconds=100.0, prefill_tokens=1)  # later diagnostics change nothing
    assert selector.engine_for("first_turn") == "vllm"
    restored = EngineSelector()
    restored.load_state_dict(selector.state_dict())
    assert restored.rates == selector.rates and restored.engine_for("trajectory") == "transformers"


def test_a_calibration_without_work_is_not_kept():
    selector = EngineSelector()
    selector.record("first_turn", "transformers", seconds=1.0, prefill_tokens=0)
    assert selector.engine_for("first_turn") == "transformers"


def test_prefill_tokens_by_hand():
    contexts, chains = [[1, 2, 3], [4]], [[5, 6], [7]]
    mask = torch.tensor([[True, False], [True, True]])
    # (3 + 2) + (3 + 1) + (1 + 1)
    assert prefill_tokens(contexts, chains, mask) == 11


class DelayedScorer:
    """A real transformers scorer whose calls take `delay(number of contexts)` seconds more: a stand-in for an engine
    whose cost grows with the contexts (one prefill per pair) or not, so the test knows which one is faster."""

    def __init__(self, model, delay):
        self.inner, self.delay = TransformersCrossScorer(model), delay

    def score(self, contexts, chains, mask=None, **kwargs):
        time.sleep(self.delay(len(contexts)))
        return self.inner.score(contexts, chains, mask, **kwargs)


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
    # first diagnostic: transformers everywhere; second: vLLM everywhere; then the first-turn scope (2 contexts)
    # stays on vLLM and the trajectory scope (4 histories) goes back to transformers
    assert engines == [(0.0, 0.0), (1.0, 1.0), (1.0, 0.0)]
    rates = diagnostics.engines.rates
    assert rates["first_turn"]["vllm"] < rates["first_turn"]["transformers"]
    assert rates["trajectory"]["transformers"] < rates["trajectory"]["vllm"]
    # both engines compute the same model's scores: the proxies agree
    for key in ("ragen2/mi/first_turn/mi_est", "ragen2/mi/trajectory/retrieval_acc"):
        assert abs(runs[0][key] - runs[1][key]) < 1e-6
    # the choice is part of the resumable state
    resumed = MIDiagnostics(config)
    resumed.load_state_dict(diagnostics.state_dict())
    assert (
        resumed.engines.engine_for("trajectory") == "transformers"
        and resumed.engines.engine_for("first_turn") == "vllm"
    )
