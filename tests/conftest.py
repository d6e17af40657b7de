"""Shared pytest fixtures: offline settings, the WebShop 1k catalogue, and the tiny model kit."""

import os
from pathlib import Path


# Nothing in the suite may reach the Hugging Face Hub or send telemetry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest


# The repository's machines keep RAGEN's 1,000-product WebShop catalogue next to the checkout; tests (and the
# recipes they launch) read it through WEBSHOP_DATA_DIR, as a user's own copy would be read.
SHARED_WEBSHOP = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "webshop"
if SHARED_WEBSHOP.is_dir():
    os.environ.setdefault("WEBSHOP_DATA_DIR", str(SHARED_WEBSHOP))


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from trl_ragen2.models.tiny import make_tiny_tokenizer

    return make_tiny_tokenizer()


@pytest.fixture
def tiny_model(tiny_tokenizer):
    """A fresh tiny Qwen2 model per test (seed 0), so tests never share trained weights."""
    from trl_ragen2.models.tiny import make_tiny_model

    return make_tiny_model(tiny_tokenizer, seed=0)


@pytest.fixture(scope="session")
def tiny_browser_run(tmp_path_factory, tiny_tokenizer):
    """One real tiny-model run with the sample log and MI at every step, shared by the sample log and browser tests:
    `(trainer, {step: kept flag per group}, output_dir)` (see `tests/run_browser_helpers.py`)."""
    from .run_browser_helpers import tiny_run

    folder = tmp_path_factory.mktemp("tiny_browser_run")
    trainer, kept = tiny_run(folder, tiny_tokenizer)
    return trainer, kept, folder / "out"
