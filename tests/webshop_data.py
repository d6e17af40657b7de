"""Where the WebShop tests find the shared 1,000-product catalogue (`../shared/data/webshop` from the repository
root), and the one search-index cache folder of a test run that every WebShop test module shares."""

from pathlib import Path

import pytest


DATA_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "webshop"
needs_data = pytest.mark.skipif(
    not (DATA_DIR / "webshop_small_1k_docs.jsonl.gz").exists(), reason="shared WebShop data absent"
)


def index_cache_dir(tmp_path_factory) -> str:
    """The run's search-index cache: built by the first module that loads a catalogue, reused by the others."""
    return str(tmp_path_factory.getbasetemp() / "webshop-index")


def load_shop_1k(tmp_path_factory):
    """The shared 1k catalogue (`data.load_shop`) with the run's index cache."""
    from trl_ragen2_envs.webshop.data import load_shop

    return load_shop(data_dir=str(DATA_DIR), cache_dir=index_cache_dir(tmp_path_factory))
