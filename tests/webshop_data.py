"""Where the WebShop tests find RAGEN's 1,000-product catalogue (`$WEBSHOP_DATA_DIR`, which `conftest.py` sets
when the repository's copy is next to the checkout), and the one search-index cache folder of a test run that every
WebShop test module shares."""

import os
from pathlib import Path

import pytest


DATA_DIR = Path(os.environ["WEBSHOP_DATA_DIR"]) if os.environ.get("WEBSHOP_DATA_DIR") else None
HAS_1K_CATALOGUE = DATA_DIR is not None and (DATA_DIR / "webshop_small_1k_docs.jsonl.gz").exists()
needs_data = pytest.mark.skipif(not HAS_1K_CATALOGUE, reason="WEBSHOP_DATA_DIR holds no 1k WebShop catalogue")


def index_cache_dir(tmp_path_factory) -> str:
    """The run's search-index cache: built by the first module that loads a catalogue, reused by the others."""
    return str(tmp_path_factory.getbasetemp() / "webshop-index")


def load_shop_1k(tmp_path_factory):
    """The 1k catalogue (`data.load_shop`) with the run's index cache."""
    from trl_ragen2_envs.webshop.data import load_shop

    return load_shop(data_dir=str(DATA_DIR), cache_dir=index_cache_dir(tmp_path_factory))
