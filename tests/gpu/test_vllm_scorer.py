"""GPU checks of the cross-scorers on a tiny random Qwen2 model saved to a temporary folder (no Hub download).

- TransformersCrossScorer on CUDA equals naive concatenation (fp32), and bf16 stays close to fp32.
- VLLMCrossScorer with a real colocate-style `vllm.LLM` equals TransformersCrossScorer, on the portable
  `prompt_logprobs=0` path and, where this vLLM has it, the fixed-token path.

Run them all with `bash tests/gpu/run_gpu_checks.sh`, or `pytest tests/gpu -m gpu -o addopts=""`.
"""

import importlib.util

import pytest
import torch

from trl_ragen2.collapse.scoring import (
    TransformersCrossScorer,
    VLLMCrossScorer,
    naive_cross_scores,
    supports_token_id_scoring,
)


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM")

VOCAB = 512


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random 2-layer Qwen2 (head dim 64, which every vLLM attention backend supports), saved as safetensors."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True, eos_token_id=1,
        pad_token_id=0, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # larger logits than the default init, so prompts matter and scores spread out
        model.lm_head.weight.mul_(3.0)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path, safe_serialization=True)
    return path


def load(model_dir, dtype):
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM.from_pretrained(model_dir).to(device="cuda", dtype=dtype).eval()


@pytest.fixture(scope="module")
def pairs():
    g = torch.Generator().manual_seed(0)
    contexts = [torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in (7, 33, 64, 150)]
    chains = [torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in (1, 4, 17, 40, 95, 12)]
    return contexts, chains


def per_token_gap(a, b, chains):
    lengths = torch.tensor([len(c) for c in chains], dtype=torch.float64)[:, None]
    return ((a - b).abs() / lengths).max().item()


def test_transformers_scorer_on_cuda_matches_naive(model_dir, pairs):
    contexts, chains = pairs
    model = load(model_dir, torch.float32)
    fast = TransformersCrossScorer(model, max_tokens_per_chunk=512, lm_head_chunk_rows=64).score(contexts, chains)
    naive = naive_cross_scores(model, contexts, chains)
    torch.testing.assert_close(fast, naive, atol=1e-3, rtol=0)
    bf16 = TransformersCrossScorer(load(model_dir, torch.bfloat16)).score(contexts, chains)
    assert per_token_gap(bf16, fast, chains) < 0.1  # bf16 weights and activations: ~1e-2 nats per token


def build_llm(model_dir, dtype):
    from vllm import LLM

    try:
        return LLM(
            model=str(model_dir), dtype=dtype, skip_tokenizer_init=True, enforce_eager=True, max_model_len=1024,
            gpu_memory_utilization=0.2, seed=0,
        )  # fmt: skip
    except Exception as exc:  # e.g. no attention backend for fp32 in this vLLM build
        pytest.skip(f"vLLM cannot build a {dtype} engine here: {exc!r}")


@needs_vllm
@pytest.mark.parametrize(("dtype", "per_token_tolerance"), [("float32", 2e-3), ("bfloat16", 0.1)])
def test_vllm_colocate_matches_transformers(model_dir, pairs, dtype, per_token_tolerance):
    from vllm import SamplingParams

    contexts, chains = pairs
    reference = TransformersCrossScorer(load(model_dir, torch.float32)).score(contexts, chains)
    llm = build_llm(model_dir, dtype)
    paths = [False] + ([True] if supports_token_id_scoring(SamplingParams) else [])
    for token_id_path in paths:
        scorer = VLLMCrossScorer(llm=llm, token_id_path=token_id_path)
        scores = scorer.score(contexts, chains)
        assert scorer.num_missing == 0, f"vLLM dropped logprobs (token_id_path={token_id_path})"
        gap = per_token_gap(scores, reference, chains)
        print(f"vLLM {dtype} token_id_path={token_id_path}: max per-token gap {gap:.2e}")  # noqa: T201 (shown with -s)
        assert gap < per_token_tolerance, (token_id_path, gap)
    del llm
    torch.cuda.empty_cache()
