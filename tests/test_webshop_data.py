"""WebShop data: streamed JSON, product normalisation, the 1k catalogue, goal construction and RAGEN's split."""

import gzip
import json
import random
import sys

import pytest

from trl_ragen2_envs.webshop.catalog import generation as catalog_gen
from trl_ragen2_envs.webshop.catalog.jsonstream import iter_json_array, iter_json_object
from trl_ragen2_envs.webshop.catalog.products import index_text, normalize_raw_product, parse_pricing
from trl_ragen2_envs.webshop.data import DATA_DIR_ENV_VAR, ShopConfig, load_shop, resolve_data_dir
from trl_ragen2_envs.webshop.goals import (
    NO_PRICE_LIMIT,
    canonical_split,
    goal_position,
    sample_price_upper,
    split_bounds,
    split_order,
)

from .webshop_data import DATA_DIR, load_shop_1k, needs_data


@pytest.fixture(scope="module")
def shop_1k(tmp_path_factory):
    return load_shop_1k(tmp_path_factory)


# ---------------------------------------------------------------------------------------------------------------
# Streamed JSON


@pytest.mark.parametrize("chunk_chars", [1, 3, 7, 64, 1 << 20])
def test_json_array_stream_matches_json_load_at_any_chunk_size(tmp_path, chunk_chars):
    records = [
        {"asin": f"B{i:09d}", "price": 1.5 * i, "tags": ["a", "[b]", "c,d"], "text": 'q"uote\\ é'} for i in range(5)
    ]
    records += [12345678901234567890, -0.125e-3, "plain", None, True, [], {}]  # numbers split across chunks
    path = tmp_path / "items.json"
    path.write_text(json.dumps(records, indent=1, ensure_ascii=False), encoding="utf-8")
    assert list(iter_json_array(path, chunk_chars=chunk_chars)) == records


def test_json_object_stream_and_gzip(tmp_path):
    mapping = {f"B{i}": {"attributes": ["x"] * i, "instruction": "Find me x"} for i in range(4)}
    path = tmp_path / "ins.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(mapping, handle)
    assert dict(iter_json_object(path, chunk_chars=5)) == mapping
    assert list(iter_json_array(_write(tmp_path / "empty.json", "  [ ]  "))) == []


@pytest.mark.parametrize(
    "text, message",
    [('{"a": 1}', "top-level JSON array"), ("[1, 2", "invalid JSON|expected"), ("[1 2]", "comma"), ("[1] x", "after")],
)
def test_json_stream_errors_name_the_file_and_problem(tmp_path, text, message):
    path = _write(tmp_path / "bad.json", text)
    with pytest.raises(ValueError, match=message) as error:
        list(iter_json_array(path, chunk_chars=2))
    assert "bad.json" in str(error.value)


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------------
# Raw WebShop records


def test_pricing_parsed_like_webshop():
    assert parse_pricing("$19.99 - $27.99") == ((19.99, 27.99), "$19.99 to $27.99")
    assert parse_pricing("$1,299.00") == ((1299.0,), "$1299.0")
    assert parse_pricing("$3.00$4.00$5.00") == ((3.0, 4.0), "$3.0 to $4.0")
    assert parse_pricing("") == ((100.0,), "$100.0")
    assert parse_pricing(None) == ((100.0,), "$100.0")


def test_raw_record_normalised_like_webshop():
    record = {
        "asin": "B000000001",
        "name": "Acme Mug",
        "full_description": "A mug.",
        "small_description": "Holds tea",
        "pricing": "$5.50",
        "customization_options": {"Color": [{"value": "Red/Blue ", "image": None}], "Size": None},
        "images": ["https://example.invalid/1.jpg"],
        "category": "garden",
        "query": " Coffee Mugs ",
        "product_category": "Home › Kitchen",
    }
    product = normalize_raw_product(record, attributes=None)
    assert product.title == "Acme Mug" and product.bullet_points == ("Holds tea",)
    assert product.options == {"color": ("red | blue",)}
    assert product.attributes == ("DUMMY_ATTR",)  # WebShop's placeholder for a product without attributes
    assert product.query == "coffee mugs" and product.pricing == (5.5,) and product.price_text == "$5.5"
    assert index_text(product) == "acme mug a mug. holds tea color: red | blue"


@needs_data
def test_index_text_rebuilds_the_provided_contents_of_all_1k_products(shop_1k):
    for product in shop_1k.products:
        provided, product.search_text = product.search_text, None
        try:
            assert index_text(product) == provided
        finally:
            product.search_text = provided


def write_raw_folder(folder, products, products_file, attributes_file):
    """Write `products` back in WebShop's raw download format (plus a noun file) into `folder`."""
    raw, attributes = [], {}
    for product in products:
        raw.append(
            {
                "asin": product.asin,
                "name": product.title,
                "full_description": product.description,
                "small_description": list(product.bullet_points),
                "pricing": product.price_text.replace(" to ", " - "),
                "customization_options": {k: [{"value": v} for v in vs] for k, vs in product.options.items()} or "",
                "images": [product.main_image],
                "category": product.category,
                "query": product.query,
                "product_category": product.product_category,
            }
        )
        attributes[product.asin] = {"attributes": list(product.attributes)}
        if len(attributes) <= 5:  # a few synthetic instructions, so the shop has goals to split
            attributes[product.asin].update(instruction="Find me it", instruction_attributes=["it"])
    raw.append(dict(raw[0]))  # a duplicate ASIN is dropped
    raw.append({**raw[1], "asin": "nan"})  # an invalid ASIN is skipped
    (folder / products_file).write_text(json.dumps(raw))
    (folder / attributes_file).write_text(json.dumps(attributes))
    (folder / "name_type_tokens_x.json").write_text(json.dumps({p["asin"]: ["mug"] for p in raw}))
    return raw


@needs_data
def test_raw_format_loader_matches_the_docs_catalogue(tmp_path, shop_1k):
    write_raw_folder(tmp_path, shop_1k.products[:40], "items_shuffle_1000.json", "items_ins_v2_1000.json")
    shop = load_shop(data_dir=str(tmp_path), cache_dir=False, goals="synthetic")
    assert shop.name == "webshop-small-1k" and len(shop.products) == 40
    for mine, reference in zip(shop.products, shop_1k.products[:40], strict=True):
        assert index_text(mine) == reference.search_text
        assert (mine.pricing, mine.options, mine.attributes) == (
            reference.pricing,
            reference.options,
            reference.attributes,
        )


@needs_data
def test_full_set_is_streamed_truncated_and_named(tmp_path, shop_1k):
    write_raw_folder(tmp_path, shop_1k.products[:30], "items_shuffle.json", "items_ins_v2.json")
    assert load_shop(data_dir=str(tmp_path), cache_dir=False).name == "webshop-full"
    first = load_shop(data_dir=str(tmp_path), cache_dir=False, num_products=20)
    assert first.name == "webshop-full-first20" and len(first.products) == 20
    with pytest.raises(FileNotFoundError, match="items_shuffle_1000.json"):
        load_shop(data_dir=str(tmp_path), cache_dir=False, dataset="small")


@needs_data
def test_human_goals_from_items_human_ins(tmp_path, shop_1k):
    products = shop_1k.products[:30]
    write_raw_folder(tmp_path, products, "items_shuffle_1000.json", "items_ins_v2_1000.json")
    human = {
        products[0].asin: [
            {
                "instruction": "i want a table.",
                "instruction_attributes": ["console table"],
                "instruction_options": ["black"],
            },
            {"instruction": "no attributes", "instruction_attributes": [], "instruction_options": []},
        ],
        products[1].asin: [
            {"instruction": "a shirt", "instruction_attributes": ["a", "b"], "instruction_options": []}
        ],
        products[2].asin: [
            {"instruction": "x", "instruction_attributes": ["c"], "instruction_options": ["red", "xl"]}
        ],
    }
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    shop = load_shop(data_dir=str(tmp_path), cache_dir=False, goals="human")
    assert len(shop.goals) == 3  # the entry without attributes is skipped
    first = shop.goals[0]
    assert first.asin == products[0].asin and first.goal_options == ("black",)
    assert first.instruction_text.startswith("i want a table") and not first.instruction_text.startswith(
        "i want a table."
    )
    with pytest.raises(ValueError, match="human"):
        load_shop(procedural=True, goals="human", cache_dir=False)


def test_missing_nouns_without_spacy_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "spacy", None)  # `import spacy` fails, as where it is not installed
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps([{"asin": "B1", "name": "Mug", "query": "mugs"}]))
    (tmp_path / "items_ins_v2_1000.json").write_text("{}")
    with pytest.raises(ImportError, match="name_type_tokens"):
        load_shop(data_dir=str(tmp_path), cache_dir=False)


# ---------------------------------------------------------------------------------------------------------------
# Data location


def test_data_dir_option_then_environment_variable_then_procedural(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)
    assert resolve_data_dir(None) is None
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path))
    assert resolve_data_dir(None) == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    assert resolve_data_dir(str(other)) == other
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV_VAR):
        resolve_data_dir(None)


def test_empty_data_folder_error_names_the_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="webshop_small_1k_docs.jsonl.gz"):
        load_shop(data_dir=str(tmp_path), cache_dir=False)


@pytest.mark.parametrize("field, value", [("dataset", "huge"), ("goals", "robot"), ("num_products", 0)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ShopConfig(**{field: value})


# ---------------------------------------------------------------------------------------------------------------
# Goals on the 1k catalogue


@needs_data
def test_1k_catalogue_gives_exactly_6910_synthetic_goals(shop_1k):
    assert shop_1k.name == "webshop-small-1k"
    assert len(shop_1k.products) == 1000
    assert shop_1k.goals.num_instructions == 415
    assert len(shop_1k.goals) == 6910


@needs_data
def test_goals_expand_option_combinations_in_webshop_order(shop_1k):
    goals = [shop_1k.goals[i] for i in range(len(shop_1k.goals))]
    by_asin = {}
    for goal in goals:
        by_asin.setdefault(goal.asin, []).append(goal)
    for asin, product_goals in by_asin.items():
        options = shop_1k.by_asin[asin].options
        names = sorted(options)
        expected = [tuple(zip(names, combo, strict=True)) for combo in _product(*(options[n] for n in names))]
        assert [g.goal_options for g in product_goals] == expected
        assert len({g.price_upper for g in product_goals}) == 1  # one bound per product
    sample = next(g for g in goals if len(g.goal_options) == 2)
    (n1, v1), (n2, v2) = sample.goal_options
    assert (
        f" with {n1}: {v1}, and {n2}: {v2}, and price lower than {sample.price_upper:.2f} dollars"
        in sample.instruction_text
    )


def _product(*pools):
    result = [()]
    for pool in pools:
        result = [r + (v,) for r in result for v in pool]
    return result


@needs_data
def test_price_bounds_are_next_multiples_of_ten(shop_1k):
    for goal_id in range(0, len(shop_1k.goals), 37):
        goal = shop_1k.goals[goal_id]
        price = shop_1k.prices[goal.asin]
        candidates = [10.0 * i for i in range(1, 100) if 10.0 * i > price][:4]
        if len(candidates) >= 2:
            assert goal.price_upper in candidates[1:]  # the larger of two of them
            assert price <= goal.price_upper
        else:
            assert goal.price_upper == NO_PRICE_LIMIT and "price lower" not in goal.instruction_text
        product = shop_1k.by_asin[goal.asin]
        assert min(product.pricing) <= price <= max(product.pricing)  # some ranges are listed high-low


def test_price_bound_sampling():
    rng = random.Random(0)
    assert {sample_price_upper(12.5, rng) for _ in range(200)} == {30.0, 40.0, 50.0}
    assert sample_price_upper(985.0, rng) == NO_PRICE_LIMIT


@needs_data
def test_goal_seed_changes_prices_not_goal_identity(tmp_path, shop_1k):
    other = load_shop(data_dir=str(DATA_DIR), cache_dir=str(tmp_path), goal_seed=1)
    assert [(g.asin, g.goal_options) for g in (other.goals[i] for i in range(0, 6910, 97))] == [
        (g.asin, g.goal_options) for g in (shop_1k.goals[i] for i in range(0, 6910, 97))
    ]
    ranged = next(p.asin for p in shop_1k.products if len(p.pricing) == 2)
    assert other.prices[ranged] != shop_1k.prices[ranged]


# ---------------------------------------------------------------------------------------------------------------
# Splits


def test_split_sizes_and_disjointness():
    order = split_order(6910)
    assert sorted(order) == list(range(6910)) and order == split_order(6910)  # a fixed permutation
    bounds = split_bounds(6910)
    assert bounds == {"test": (0, 500), "validation": (500, 1500), "train": (1500, 6910)}
    parts = {name: set(order[a:b]) for name, (a, b) in bounds.items()}
    assert [len(parts[s]) for s in ("test", "validation", "train")] == [500, 1000, 5410]
    assert not (parts["test"] & parts["validation"]) and not (parts["train"] & (parts["test"] | parts["validation"]))


def test_seed_picks_goals_like_ragen():
    bounds = split_bounds(6910)
    assert goal_position(bounds, "test", 7) == 7 and goal_position(bounds, "test", 507) == 7
    assert goal_position(bounds, "val", 3) == 503 and goal_position(bounds, "validation", 1003) == 503
    assert goal_position(bounds, "train", 0) == 1500 and goal_position(bounds, "train", 5410) == 1500
    assert canonical_split("val") == "validation"
    with pytest.raises(ValueError, match="split"):
        canonical_split("dev")


def test_small_catalogues_split_proportionally():
    bounds = split_bounds(100)
    assert bounds["test"][0] == 0 and bounds["train"][1] == 100
    assert all(stop > start for start, stop in bounds.values())
    with pytest.raises(ValueError, match="at least 3 goals"):
        split_bounds(2)


@needs_data
def test_shop_goal_for_uses_the_split(shop_1k):
    test_ids = set(shop_1k.split_goal_ids("test"))
    assert {shop_1k.goal_for("test", s).goal_id for s in range(500)} == test_ids
    assert shop_1k.goal_for("train", 12).goal_id not in test_ids


# ---------------------------------------------------------------------------------------------------------------
# Procedural catalogue


def test_procedural_catalogue_is_deterministic_and_prefix_stable():
    small = catalog_gen.generate_catalog(50, seed=3)
    again = catalog_gen.generate_catalog(50, seed=3)
    larger = catalog_gen.generate_catalog(80, seed=3)
    other = catalog_gen.generate_catalog(50, seed=4)
    assert small.products == again.products and small.instructions == again.instructions
    assert larger.products[:50] == small.products
    assert other.products != small.products
    assert small.name == "procedural-50-seed3"


def test_procedural_products_are_well_formed_and_goals_solvable():
    generated = catalog_gen.generate_catalog(300, seed=0)
    categories = {p.category for p in generated.products}
    assert categories == {"beauty", "electronics", "fashion", "garden", "grocery"}
    assert len({p.asin for p in generated.products}) == 300
    assert 0.3 < len(generated.instructions) / 300 < 0.6
    for product in generated.products:
        nouns = generated.nouns[product.asin]
        assert nouns and all(noun in product.title.lower() for noun in nouns)
        assert " › " in product.product_category and product.query
        text = " ".join(product.bullet_points).lower()
        assert all(attribute in text for attribute in product.attributes)
    for asin, (instruction, attributes) in generated.instructions.items():
        product = next(p for p in generated.products if p.asin == asin)
        assert instruction.startswith("Find me ") and set(attributes) <= set(product.attributes)


def test_procedural_shop_names_itself_and_builds_goals(tmp_path):
    shop = load_shop(procedural=True, procedural_products=200, procedural_seed=1, cache_dir=str(tmp_path))
    assert shop.name == "procedural-200-seed1"
    assert len(shop.goals) > 100
    goal = shop.goal_for("test", 0)
    assert goal.asin in shop.by_asin and goal.instruction_text.startswith("Find me ")


@pytest.mark.parametrize("kwargs, field", [({"num_products": 0}, "num_products"), ({"seed": -1}, "seed")])
def test_procedural_generator_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        catalog_gen.generate_catalog(**{"num_products": 10, "seed": 0, **kwargs})
