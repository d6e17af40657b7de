"""Loading a WebShop catalogue: where the data comes from, and the `Shop` (products, goals, search) built from it.

**Where.** `data_dir=` if given, else the environment variable `WEBSHOP_DATA_DIR`, else the built-in procedural
catalogue (`catalog/generation.py`; `procedural=True` forces it). A data folder may hold:

- RAGEN's 1k catalogue, as `trl-ragen2 data webshop small` prepares it (`catalog/prepare.py`):
  `webshop_small_1k_docs.jsonl.gz` + `items_ins_v2_1000.json` + `name_type_tokens_spacy38.json`;
- a WebShop download: `items_shuffle_1000.json` / `items_shuffle.json` (1.18 M products) with
  `items_ins_v2_1000.json` / `items_ins_v2.json`, and optionally `items_human_ins.json` (human goals) and a
  `name_type_tokens*.json` noun file (otherwise names are tagged with spaCy on first use).

`dataset="small"` or `"full"` picks between them when a folder has both ("auto" prefers the full set). Large files
are streamed (`catalog/jsonstream.py`) and each product is held once.

**Names.** `Shop.name` says which catalogue is in use: `webshop-small-1k`, `webshop-full` (`webshop-full-first{n}`
with `num_products`), or `procedural-{n}-seed{k}`.

Shops are cached per configuration within a process, so the many environment copies of a training run share one
catalogue and one search index.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .catalog import generation as catalog_gen
from .catalog.jsonstream import iter_json_array, iter_json_object, iter_jsonl
from .catalog.nouns import TitleNouns, spacy_noun_tagger
from .catalog.products import Product, index_text, is_valid_asin, normalize_raw_product, product_from_processed
from .goals import Goal, SyntheticGoals, build_human_goals, goal_position, sample_prices, split_bounds, split_order
from .reward import RewardBreakdown, compute_reward
from .search import SearchEngine


DATA_DIR_ENV_VAR = "WEBSHOP_DATA_DIR"
SMALL_DOCS_FILE = "webshop_small_1k_docs.jsonl.gz"
SMALL_PRODUCTS_FILE, FULL_PRODUCTS_FILE = "items_shuffle_1000.json", "items_shuffle.json"
SMALL_ATTRIBUTES_FILE, FULL_ATTRIBUTES_FILE = "items_ins_v2_1000.json", "items_ins_v2.json"
HUMAN_GOALS_FILE = "items_human_ins.json"
NOUNS_GLOB = "name_type_tokens*.json"
DATASETS = ("auto", "small", "full")
GOAL_KINDS = ("synthetic", "human")


@dataclass(frozen=True)
class ShopConfig:
    """Everything that decides a shop's content (hashable: the in-process cache key)."""

    data_dir: str | None = None
    dataset: str = "auto"
    goals: str = "synthetic"
    num_products: int | None = None
    procedural: bool = False
    procedural_products: int = 1000
    procedural_seed: int = 0
    goal_seed: int = 0
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset={self.dataset!r} is not supported; choose one of {list(DATASETS)}")
        if self.goals not in GOAL_KINDS:
            raise ValueError(f"goals={self.goals!r} is not supported; choose one of {list(GOAL_KINDS)}")
        if self.num_products is not None and self.num_products < 1:
            raise ValueError(f"num_products must be >= 1 (or None for all), got {self.num_products}")


# ---------------------------------------------------------------------------------------------------------------
# The shop


class Shop:
    """A loaded catalogue: products by ASIN, their concrete prices, goals in split order, title nouns and search."""

    def __init__(
        self,
        name: str,
        products: list[Product],
        prices: dict[str, float],
        goals: Sequence[Goal],
        nouns: TitleNouns,
        cache_dir: str | None = None,
    ):
        self.name = name
        self.products = products
        self.by_asin = {p.asin: p for p in products}
        self.prices = prices
        self.goals = goals
        self.nouns = nouns
        self.split_order = split_order(len(goals))
        self.split_bounds = split_bounds(len(goals))
        self.search_engine = SearchEngine(lambda: (index_text(p) for p in products), cache_dir=cache_dir)

    def goal_for(self, split: str, seed: int) -> Goal:
        """The goal that `seed` picks in `split` (RAGEN: `start + seed % size` in the fixed permutation)."""
        return self.goals[self.split_order[goal_position(self.split_bounds, split, seed)]]

    def split_goal_ids(self, split: str) -> list[int]:
        """Indices into `goals` of one split (`train`, `validation` or `test`), in split order."""
        start, stop = self.split_bounds[split]
        return self.split_order[start:stop]

    def search(self, query: str) -> list[str]:
        """ASINs of the top-50 results for `query`."""
        return [self.products[i].asin for i in self.search_engine.search(query)]

    def score_purchase(self, goal: Goal, asin: str, options: dict[str, str]) -> RewardBreakdown:
        """The reward breakdown of buying `asin` with `options` (name -> value) at the shop's price, for `goal`."""
        product = self.by_asin[asin]
        return compute_reward(
            product,
            goal,
            price=self.prices[asin],
            selected_options=options,
            goal_nouns=self.nouns.get(goal.asin, goal.name),
            purchased_nouns=self.nouns.get(asin, product.title),
        )


# ---------------------------------------------------------------------------------------------------------------
# Readers


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _read_attribute_file(path: Path) -> tuple[dict[str, list[str]], dict[str, tuple[str, list[str]]]]:
    """`(attributes by ASIN, synthetic instructions by ASIN)` from an `items_ins_v2*.json` file, streamed."""
    attributes, instructions = {}, {}
    for asin, entry in iter_json_object(path):
        if not isinstance(entry, dict):
            continue
        if "attributes" in entry:
            attributes[asin] = entry["attributes"]
        if entry.get("instruction"):
            instructions[asin] = (entry["instruction"], entry.get("instruction_attributes") or [])
    return attributes, instructions


def _read_nouns(folder: Path, products: list[Product]) -> TitleNouns:
    precomputed: dict[str, list[str]] = {}
    for path in sorted(folder.glob(NOUNS_GLOB)):
        precomputed.update(_read_json(path))
    nouns = TitleNouns(precomputed)
    if not nouns.covers(p.asin for p in products):
        nouns = TitleNouns(precomputed, tagger=spacy_noun_tagger())  # raises a clear ImportError without spaCy
    return nouns


def _require(folder: Path, *names: str) -> list[Path]:
    paths = [folder / name for name in names]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"WebShop data folder {folder} lacks {missing}; see the data README for the expected files, or unset "
            f"data_dir / {DATA_DIR_ENV_VAR} to use the procedural catalogue"
        )
    return paths


def _load_docs_catalog(folder: Path) -> tuple[str, list[Product], dict[str, tuple[str, list[str]]]]:
    """The processed 1k records (`id`, `contents`, `product`) and the instructions of `items_ins_v2_1000.json`."""
    docs_path, attributes_path = _require(folder, SMALL_DOCS_FILE, SMALL_ATTRIBUTES_FILE)
    products = [product_from_processed(r["product"], search_text=r.get("contents")) for r in iter_jsonl(docs_path)]
    _, instructions = _read_attribute_file(attributes_path)
    return "webshop-small-1k", products, instructions


def _load_raw_catalog(
    folder: Path, full: bool, num_products: int | None
) -> tuple[str, list[Product], dict[str, tuple[str, list[str]]]]:
    """Raw WebShop records, normalised as WebShop's loader does (first `num_products` records, duplicates dropped)."""
    names = (FULL_PRODUCTS_FILE, FULL_ATTRIBUTES_FILE) if full else (SMALL_PRODUCTS_FILE, SMALL_ATTRIBUTES_FILE)
    products_path, attributes_path = _require(folder, *names)
    attributes, instructions = _read_attribute_file(attributes_path)
    products, seen = [], set()
    for position, record in enumerate(iter_json_array(products_path)):
        if num_products is not None and position >= num_products:
            break
        asin = record.get("asin") if isinstance(record, dict) else None
        if not is_valid_asin(asin) or asin in seen:
            continue
        seen.add(asin)
        products.append(normalize_raw_product(record, attributes.get(asin)))
    name = "webshop-full" if full else "webshop-small-1k"
    if num_products is not None:
        name += f"-first{num_products}"
    return name, products, instructions


def _pick_source(folder: Path, dataset: str) -> str:
    has_full = (folder / FULL_PRODUCTS_FILE).exists()
    has_docs = (folder / SMALL_DOCS_FILE).exists()
    has_small_raw = (folder / SMALL_PRODUCTS_FILE).exists()
    if dataset == "full" or (dataset == "auto" and has_full):
        return "full"
    if has_docs:
        return "docs"
    if has_small_raw:
        return "small"
    raise FileNotFoundError(
        f"WebShop data folder {folder} holds none of {SMALL_DOCS_FILE}, {SMALL_PRODUCTS_FILE}, {FULL_PRODUCTS_FILE} "
        f"(dataset={dataset!r}); point data_dir / {DATA_DIR_ENV_VAR} at a WebShop data folder, or unset both to use "
        "the procedural catalogue"
    )


# ---------------------------------------------------------------------------------------------------------------
# Building and caching shops


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """The data folder to read: `data_dir`, else `$WEBSHOP_DATA_DIR`, else None (procedural catalogue)."""
    chosen = data_dir if data_dir not in (None, "") else os.environ.get(DATA_DIR_ENV_VAR) or None
    if chosen is None:
        return None
    folder = Path(chosen).expanduser()
    if not folder.is_dir():
        source = "data_dir" if data_dir not in (None, "") else DATA_DIR_ENV_VAR
        raise FileNotFoundError(f"{source}={str(chosen)!r} is not a folder; give the folder holding the WebShop files")
    return folder


def build_shop(config: ShopConfig) -> Shop:
    """Load (or generate) the catalogue described by `config`, draw prices and goals, and open the search index."""
    rng = random.Random(config.goal_seed)
    folder = None if config.procedural else resolve_data_dir(config.data_dir)
    if folder is None:
        if config.goals == "human":
            raise ValueError(
                "goals='human' needs WebShop's items_human_ins.json; set data_dir to a WebShop data folder"
            )
        generated = catalog_gen.generate_catalog(config.procedural_products, config.procedural_seed)
        name, products, instructions = generated.name, generated.products, generated.instructions
        nouns = TitleNouns(generated.nouns)
    else:
        source = _pick_source(folder, config.dataset)
        if source == "docs":
            name, products, instructions = _load_docs_catalog(folder)
        else:
            name, products, instructions = _load_raw_catalog(folder, source == "full", config.num_products)
        nouns = _read_nouns(folder, products)
    prices = sample_prices(products, rng)
    if config.goals == "synthetic":
        goals: Sequence[Goal] = SyntheticGoals(products, instructions, prices, rng)
    else:
        (human_path,) = _require(folder, HUMAN_GOALS_FILE)
        goals = build_human_goals(products, dict(iter_json_object(human_path)), prices, rng)
    return Shop(name, products, prices, goals, nouns, cache_dir=config.cache_dir)


_SHOPS: dict[ShopConfig, Shop] = {}
_SHOPS_LOCK = threading.Lock()


def load_shop(config: ShopConfig | None = None, **fields: Any) -> Shop:
    """The shop for `config` (or for the given `ShopConfig` fields), built once per process and then shared."""
    config = config or ShopConfig(**fields)
    folder = None if config.procedural else resolve_data_dir(config.data_dir)
    # key on the resolved source, so a changed WEBSHOP_DATA_DIR never returns a stale shop
    config = replace(config, data_dir=None if folder is None else str(folder.resolve()), procedural=folder is None)
    with _SHOPS_LOCK:
        shop = _SHOPS.get(config)
        if shop is None:
            shop = _SHOPS[config] = build_shop(config)
        return shop
