"""`EngineGeneration` (a `vllm.LLM` as the rollout engine's backend outside a trainer) against transformers'
`generate` on the same weights, and `load_policy_weights` into a standalone in-process engine.

Greedy decoding makes the two backends comparable token for token: both run float32, so they agree unless two tokens'
logits are within float32 error of each other, which the random tiny model does not produce on these prompts.
"""

import pytest
import torch


pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

from trl_ragen2 import EngineGeneration, ModelGeneration  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def prompts(count=5):
    generator = torch.Generator().manual_seed(1)
    return [
        torch.randint(3, 600, (int(n),), generator=generator).tolist()
        for n in torch.randint(4, 20, (count,), generator=generator)
    ]


def load_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_greedy_replies_equal_transformers_generate(llm, tokenizer, model):
    engine_replies, logprobs = EngineGeneration(llm, temperature=0.0)(prompts(), 12)
    model_replies, _ = ModelGeneration(model, tokenizer, temperature=0.0)(prompts(), 12)
    assert logprobs is None
    assert engine_replies == model_replies
    assert all(0 < len(reply) <= 12 for reply in engine_replies)


def test_loaded_policy_weights_drive_the_engine(llm, tokenizer, path):
    from trl_ragen2.models.vllm_cpu import load_policy_weights, vllm_platform_is_cpu

    if not vllm_platform_is_cpu():
        pytest.skip("load_policy_weights is the CPU build's weight path")
    model = load_model(path)
    before, _ = EngineGeneration(llm, temperature=0.0)(prompts(), 12)
    with torch.no_grad():  # a different policy: every weight moved
        generator = torch.Generator().manual_seed(5)
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    load_policy_weights(llm, model.named_parameters())
    after, _ = EngineGeneration(llm, temperature=0.0)(prompts(), 12)
    expected, _ = ModelGeneration(model, tokenizer, temperature=0.0)(prompts(), 12)
    assert after == expected
    assert after != before  # the engine followed the new weights


def test_seeded_sampling_repeats(llm):
    first, _ = EngineGeneration(llm, temperature=1.0, seed=3)(prompts(), 12)
    second, _ = EngineGeneration(llm, temperature=1.0, seed=3)(prompts(), 12)
    other, _ = EngineGeneration(llm, temperature=1.0, seed=4)(prompts(), 12)
    assert first == second
    assert first != other
