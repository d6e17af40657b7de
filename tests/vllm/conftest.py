"""Fixtures of the real-engine tests: the tiny model in vLLM's CPU sizes, one in-process float32 engine per test
module (`VLLM_ENABLE_V1_MULTIPROCESSING=0`; the colocate runs start their own processes), and its transformers twin."""

import os


os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: an explicit KV cache, whatever else runs on the host

import pytest
import torch


@pytest.fixture(scope="module")
def path():
    from trl_ragen2.models.tiny import VLLM_CPU_SIZES, tiny_model_path

    return tiny_model_path(seed=0, **VLLM_CPU_SIZES)  # 2 heads of 32: vLLM's CPU attention has no head size 16


@pytest.fixture(scope="module")
def llm(path):
    vllm = pytest.importorskip("vllm")
    return vllm.LLM(path, dtype="float32", max_model_len=512, seed=0, enforce_eager=True)


@pytest.fixture(scope="module")
def model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
