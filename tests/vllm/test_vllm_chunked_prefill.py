"""Seeded sampling through `EngineGeneration` when vLLM splits a prefill over several engine steps.

vLLM 0.31 rewinds a request's own random generator when it discards the token sampled for a partly prefilled request,
and the CPU generator cannot be rewound (`RuntimeError: CPU Generator does not use offset`): any seeded request longer
than the engine's per-step token budget crashed the engine (a 96-episode evaluation on SmolLM2 did). Here the budget
is 64 tokens and the prompts about 100, so every request is prefilled in pieces.
"""

import gc

import pytest


pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

from trl_ragen2 import EngineGeneration  # noqa: E402


@pytest.fixture(scope="module")
def chunking_llm(path):
    llm = vllm.LLM(path, dtype="float32", max_model_len=512, seed=0, enforce_eager=True, max_num_batched_tokens=64,
                   max_num_seqs=8)  # fmt: skip
    yield llm
    del llm
    gc.collect()


def test_seeded_sampling_survives_split_prefills_and_repeats(chunking_llm):
    prompts = [[3 + (7 * i + j) % 500 for j in range(90 + 5 * i)] for i in range(6)]  # 90-115 tokens each
    first = EngineGeneration(chunking_llm, temperature=1.0, seed=5)(prompts, 12)[0]
    again = EngineGeneration(chunking_llm, temperature=1.0, seed=5)(prompts, 12)[0]
    other = EngineGeneration(chunking_llm, temperature=1.0, seed=6)(prompts, 12)[0]
    assert all(len(reply) == 12 for reply in first)
    assert first == again  # the same seed draws the same samples
    assert first != other
