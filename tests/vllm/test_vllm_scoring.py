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
