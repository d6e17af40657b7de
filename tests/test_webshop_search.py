"""WebShop search: the Lucene-style analyzer, BM25 scores against bm25s' own index, ranking and the index cache."""

import numpy as np
import pytest

from trl_ragen2_envs.webshop import search as search_module
from trl_ragen2_envs.webshop.search import LUCENE_STOP_WORDS, Analyzer, SearchEngine, build_bm25

from .webshop_data import load_shop_1k, needs_data


@pytest.fixture(scope="module")
def shop_1k(tmp_path_factory):
    return load_shop_1k(tmp_path_factory)


def test_analyzer_follows_lucene_english():
    analyzer = Analyzer()
    assert len(LUCENE_STOP_WORDS) == 33
    # possessive removed, stop words dropped, hyphens split, decimals kept, Porter stems
    expected = ["women", "x", "larg", "run", "shoe", "3.5mm", "jack"]
    assert analyzer("Women's X-Large Running Shoes for the 3.5mm jack") == expected
    assert analyzer("THE AND OF") == []
    assert analyzer("") == []


def test_scores_equal_bm25s_own_lucene_index():
    import bm25s

    texts = [
        "red running shoes for women",
        "blue running shorts",
        "women's red dress, long sleeve",
        "shoes shoes shoes",
        "coffee beans dark roast",
        "",
    ]
    analyzer = Analyzer()
    mine = build_bm25(texts, analyzer)
    reference = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    reference.index([analyzer(t) for t in texts], show_progress=False)
    for query in ["red shoes", "running", "women dress sleeve", "coffee roast shoes"]:
        tokens = analyzer(query)
        np.testing.assert_allclose(mine.get_scores(tokens), reference.get_scores(tokens), rtol=1e-6)


def test_ranking_breaks_ties_by_catalogue_position_and_drops_non_matches(tmp_path):
    texts = ["apple pie", "banana bread", "apple pie", "cherry tart", "apple pie"]
    engine = SearchEngine(lambda: iter(texts), cache_dir=False)
    assert engine.search("apple") == [0, 2, 4]  # equal scores: lowest position first
    assert engine.search("apple", k=2) == [0, 2]
    assert engine.search("durian") == [] and engine.search("the and") == [] and engine.search("") == []


@needs_data
def test_exact_title_finds_the_product_first(shop_1k):
    products = shop_1k.products
    firsts = sum(shop_1k.search(p.title)[:1] == [p.asin] for p in products if p.title)
    assert firsts >= 0.99 * len(products)
    for position in (0, 1, 2, 10, 100, 500, 999):
        product = products[position]
        assert shop_1k.search(product.title)[0] == product.asin, product.title


@needs_data
def test_results_are_capped_at_fifty(shop_1k):
    results = shop_1k.search("women")
    assert len(results) == 50 and len(set(results)) == 50


@needs_data
def test_index_cache_hit_does_not_rebuild(tmp_path, monkeypatch, shop_1k):
    texts = [p.search_text for p in shop_1k.products]
    first = SearchEngine(lambda: iter(texts), cache_dir=tmp_path)
    assert not first.loaded_from_cache and (first.index_dir / "params.index.json").exists()

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the index was rebuilt on a cache hit")

    monkeypatch.setattr(search_module, "build_bm25", no_rebuild)
    second = SearchEngine(lambda: iter(texts), cache_dir=tmp_path)
    assert second.loaded_from_cache and second.key == first.key
    for query in ["console table", "long sleeve dress", "hdmi cable"]:
        assert second.search(query) == first.search(query)
    # Different content hashes to a different index, which has to be built.
    with pytest.raises(AssertionError, match="rebuilt"):
        SearchEngine(lambda: iter(texts[:-1]), cache_dir=tmp_path)


def test_cache_dir_defaults_to_user_cache_and_env_override(monkeypatch, tmp_path):
    monkeypatch.delenv(search_module.CACHE_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert search_module.default_cache_dir() == tmp_path / "xdg" / "trl_ragen2" / "webshop"
    monkeypatch.setenv(search_module.CACHE_ENV_VAR, str(tmp_path / "mine"))
    assert search_module.default_cache_dir() == tmp_path / "mine"
