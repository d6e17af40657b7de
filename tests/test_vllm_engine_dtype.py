"""The colocate engine's dtype: `vllm_dtype="auto"` is float32 on vLLM's CPU build when the CPU has no bfloat16
kernels, and vLLM's own choice everywhere else (no vLLM needed: the platform and the CPU are patched)."""

import pytest

from trl_ragen2.models import vllm_cpu


def built_with(vllm_dtype: str) -> dict:
    """The keyword arguments `_build_engine` hands the engine class for `vllm_dtype`."""
    return vllm_cpu._build_engine(lambda *args, **kwargs: kwargs, vllm_dtype, model="m")


@pytest.mark.parametrize(
    ("is_cpu", "has_kernels", "vllm_dtype", "expected"),
    [
        (True, False, "auto", "float32"),  # vLLM would pick an emulated bfloat16
        (True, True, "auto", None),  # vLLM's choice
        (False, False, "auto", None),  # a GPU build
        (True, False, "bfloat16", "bfloat16"),  # asked for: kept
        (True, False, "float16", "float16"),
        (False, True, "float32", "float32"),
    ],
)
def test_auto_dtype_is_float32_only_on_a_cpu_without_bf16_kernels(
    monkeypatch, is_cpu, has_kernels, vllm_dtype, expected
):
    monkeypatch.setattr(vllm_cpu, "vllm_platform_is_cpu", lambda: is_cpu)
    monkeypatch.setattr(vllm_cpu, "cpu_has_bf16_kernels", lambda: has_kernels)
    assert built_with(vllm_dtype).get("dtype") == expected


def test_bf16_kernel_check_reads_onednn(monkeypatch):
    import torch

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    assert vllm_cpu.cpu_has_bf16_kernels() is True
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False, raising=False)
    assert vllm_cpu.cpu_has_bf16_kernels() is False
