"""Shared pytest fixtures: offline settings and the tiny model kit."""

import os


# Nothing in the suite may reach the Hugging Face Hub or send telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from trl_ragen2.tiny import make_tiny_tokenizer

    return make_tiny_tokenizer()


@pytest.fixture
def tiny_model(tiny_tokenizer):
    """A fresh tiny Qwen2 model per test (seed 0), so tests never share trained weights."""
    from trl_ragen2.tiny import make_tiny_model

    return make_tiny_model(tiny_tokenizer, seed=0)
