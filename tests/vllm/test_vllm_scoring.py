"""`VLLMCrossScorer` on a real engine (vLLM's CPU build) against `TransformersCrossScorer` on the same weights.

The engine and the model are the fixtures of `tests/vllm/conftest.py`: one in-process float32 engine per module on the
tiny model with 2 heads of 32, and the same weights in transformers.
"""

import pytest
import torch


pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

from trl_ragen2.collapse.scoring import (  # noqa: E402
    TransformersCrossScorer,
    VLLMCrossScorer,
    supports_token_id_scoring,
)


FLOAT32_TOLERANCE = 1e-4  # nats per pair; measured up to 2e-6 on chains of 3 to 30 tokens


def random_pairs(seed, num_contexts=5, num_chains=7):
    generator = torch.Generator().manual_seed(seed)
    lengths = lambda low, high, n: torch.randint(low, high, (n,), generator=generator).tolist()  # noqa: E731
    contexts = [torch.randint(3, 600, (n,), generator=generator).tolist() for n in lengths(4, 40, num_contexts)]
    chains = [torch.randint(3, 600, (n,), generator=generator).tolist() for n in lengths(3, 30, num_chains)]
    return contexts, chains


@pytest.mark.parametrize("seed", [0, 1])
def test_vllm_scores_equal_transformers_scores(llm, model, seed):
    contexts, chains = random_pairs(seed)
    scorer = VLLMCrossScorer(llm=llm)
    vllm_scores = scorer.score(contexts, chains)
    hf_scores = TransformersCrossScorer(model).score(contexts, chains)
    assert scorer.num_missing == 0 and torch.isfinite(vllm_scores).all()
    assert (vllm_scores - hf_scores).abs().max().item() < FLOAT32_TOLERANCE
    # Retrieval decisions (the best context of each chain) agree except where the top two are nearer than that
    top2 = hf_scores.topk(2, dim=1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * FLOAT32_TOLERANCE
    assert torch.equal(vllm_scores.argmax(1)[clear], hf_scores.argmax(1)[clear])


class RecordingEngine:
    """The engine, recording how many prompt tokens each request read from vLLM's prefix cache."""

    def __init__(self, llm):
        self.llm, self.cached = llm, []

    def generate(self, prompts, sampling_params, use_tqdm):
        outputs = self.llm.generate(prompts, sampling_params=sampling_params, use_tqdm=use_tqdm)
        self.cached += [output.num_cached_tokens for output in outputs]
        return outputs


def test_contexts_are_prefilled_once_and_reused_exactly(llm, model):
    """Contexts longer than a KV block (128 tokens on the CPU build): the other pairs of each context read its blocks
    from the prefix cache; a chain scored twice under one context (its blocks reach into the chain) is scored again
    without the cache. Every value equals the scorer's without reuse, and transformers' within float32 rounding."""
    generator = torch.Generator().manual_seed(3)
    contexts = [torch.randint(3, 600, (n,), generator=generator).tolist() for n in (130, 200, 300)]
    chains = [torch.randint(3, 600, (n,), generator=generator).tolist() for n in (5, 30, 140, 12)]
    chains.append(list(chains[2]))  # the same chain twice: its blocks under the 300-token context reach past it
    llm.reset_prefix_cache()
    plain = VLLMCrossScorer(llm=llm, reuse_context_cache=False).score(contexts, chains)
    llm.reset_prefix_cache()
    engine = RecordingEngine(llm)
    reusing = VLLMCrossScorer(llm=engine)
    scores = reusing.score(contexts, chains)
    pairs = len(contexts) * len(chains)
    assert reusing.num_missing == 0 and torch.isfinite(scores).all()
    assert torch.equal(scores, plain)  # the same computation, with the context's KV read rather than recomputed
    hf_scores = TransformersCrossScorer(model).score(contexts, chains)
    assert (scores - hf_scores).abs().max().item() < FLOAT32_TOLERANCE
    assert engine.cached[: len(contexts)] == [0, 0, 0]  # the first pair of each context fills the cache
    assert sum(cached >= 128 for cached in engine.cached[len(contexts) : pairs]) == pairs - len(contexts)
    # scored again, each pair finds its own blocks: those that reach past the context are scored without the cache
    engine.cached = []
    assert torch.equal(reusing.score(contexts, chains), plain)
    reruns = engine.cached[pairs:]
    assert len(reruns) >= 2 and all(cached == 0 for cached in reruns)  # at least chain 2 and its copy under 300


def test_masked_pairs_are_not_scored(llm, model):
    contexts, chains = random_pairs(2, 3, 4)
    mask = torch.zeros(4, 3, dtype=torch.bool)
    mask[0, 0] = mask[3, 2] = True
    scores = VLLMCrossScorer(llm=llm).score(contexts, chains, mask)
    assert torch.isfinite(scores[mask]).all() and torch.isnan(scores[~mask]).all()


def test_this_vllm_takes_the_portable_path():
    # vLLM 0.31-0.32 have a flat `prompt_logprob_token_ids` (one list for every row); only >= 0.33 takes one per row
    from packaging.version import Version

    expected = Version(Version(vllm.__version__).base_version) >= Version("0.33")
    assert supports_token_id_scoring(vllm.SamplingParams) is expected


def test_sleep_mode_and_server_mode_are_refused_on_cpu(tmp_path):
    from vllm.platforms import current_platform

    from trl_ragen2 import SNRFilteredGRPOConfig

    if not current_platform.is_cpu():
        pytest.skip("CPU build only")
    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", use_vllm=True)
    with pytest.raises(ValueError, match="vllm_enable_sleep_mode=True.*set vllm_enable_sleep_mode=False"):
        SNRFilteredGRPOConfig(**common, vllm_enable_sleep_mode=True)
    with pytest.raises(ValueError, match="vllm_mode='server'.*NCCL.*vllm_mode='colocate'"):
        SNRFilteredGRPOConfig(**common, vllm_mode="server")
    with pytest.raises(ValueError, match="vllm_dtype must be one of"):
        SNRFilteredGRPOConfig(**common, vllm_dtype="fp32")


def test_kv_cache_error_names_the_setting_and_the_fix():
    import inspect

    from vllm.v1.worker import cpu_worker

    from trl_ragen2.models.vllm_cpu import _CPU_KV_CACHE_ERROR, _build_engine

    # the text recognised is the one this vLLM's CPU worker raises
    assert _CPU_KV_CACHE_ERROR in inspect.getsource(cpu_worker)

    def refusing_llm(*args, **kwargs):
        raise ValueError(
            "Available memory on node 0 (9.81/10.34 GiB) on kv cache allocation is less than requested memory for "
            "kv (-0.11/0.52 GiB). Reduce CPU memory used by other processes."
        )

    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization=0.05.*VLLM_CPU_KVCACHE_SPACE"):
        _build_engine(refusing_llm, "auto", model="m", gpu_memory_utilization=0.05)


def test_auto_dtype_avoids_emulated_bf16_on_this_cpu(path):
    """vLLM's own choice for a float32 checkpoint on its CPU build is bfloat16; where this CPU has no
    bfloat16 kernels the colocate engine is built in float32 instead (benchmarks/vllm_cpu.py measures the cost)."""
    import torch
    from vllm.config import ModelConfig
    from vllm.platforms import current_platform

    from trl_ragen2.models.vllm_cpu import _build_engine, cpu_has_bf16_kernels

    if not current_platform.is_cpu():
        pytest.skip("CPU build only")
    assert ModelConfig(model=path).dtype == torch.bfloat16
    passed = _build_engine(lambda *args, **kwargs: kwargs, "auto", model=path)
    assert passed.get("dtype") == (None if cpu_has_bf16_kernels() else "float32")
