"""WebShop goals: what to buy, built from the catalogue as WebShop does, with RAGEN's fixed train/val/test split.

- **Prices.** A product with a price range gets one concrete price drawn uniformly from the range; a single price is
  used as is. A goal's `price_upper` is drawn from the next four multiples of 10 above that price (two are sampled
  and the larger kept); above $980 there is no bound (1,000,000) and the instruction names none.
- **Synthetic goals.** Each product with a synthetic instruction yields one goal per combination of its option values
  (option names sorted, the last one varying fastest), with instruction text
  `"{instruction} with {name}: {value}, and {name}: {value}, and price lower than {bound:.2f} dollars"`. On the 1k
  catalogue: 415 instructions -> 6,910 goals. Goals are decoded on demand from per-product records, so millions of
  combinations cost a few bytes each.
- **Human goals** (optional, `items_human_ins.json`): one goal per human instruction that lists attributes; their
  options are plain strings.
- **Randomness** comes from one `random.Random(goal_seed)` (prices first, then bounds, in catalogue order), not from
  the global generator as in the original, so the same seed gives the same goals.
- **Split.** The goal list goes through the same two fixed shuffles as in WebShop's server (`Random(233)`) and
  RAGEN's wrapper (`Random(42)`), so with the catalogue in WebShop's product order the split membership of the
  (product, options) goals is RAGEN's; test = the first 500, validation = the next 1,000, train = the rest, and a
  seed `s` picks goal `start + s % size` of its split. (Price bounds differ: WebShop drew them unseeded.)
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .catalog.products import Product


PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))  # candidate bounds: $10, $20, ..., $990
NO_PRICE_LIMIT = 1_000_000.0
SERVER_SHUFFLE_SEED = 233  # WebShop's server shuffles its goal list with this seed
RAGEN_PERMUTATION_SEED = 42  # RAGEN permutes goal indices with this seed
RAGEN_TEST_GOALS, RAGEN_VALIDATION_GOALS = 500, 1000
SPLITS = ("train", "validation", "test")
SPLIT_ALIASES = {"val": "validation", "valid": "validation", "eval": "validation"}

GoalOption = tuple[str, str] | str  # (option name, value) for synthetic goals, free text for human goals


@dataclass(frozen=True, slots=True)
class Goal:
    """One shopping task: the target product's identity, the instruction, and what the reward checks."""

    goal_id: int
    asin: str
    name: str
    query: str
    category: str
    product_category: str
    instruction_text: str
    attributes: tuple[str, ...]
    price_upper: float
    goal_options: tuple[GoalOption, ...]

    def options_dict(self) -> dict[str, str]:
        """The goal's options as name -> value (synthetic goals; human goals list bare values)."""
        return {o[0]: o[1] for o in self.goal_options if isinstance(o, tuple)}


# ---------------------------------------------------------------------------------------------------------------
# Prices


def sample_prices(products: Sequence[Product], rng: random.Random) -> dict[str, float]:
    """ASIN -> one concrete price: the price, or a uniform draw from a price range."""
    return {p.asin: p.pricing[0] if len(p.pricing) == 1 else rng.uniform(p.pricing[0], p.pricing[1]) for p in products}


def sample_price_upper(price: float, rng: random.Random) -> float:
    """A goal's price bound: the larger of two of the next four multiples of 10 above `price`."""
    candidates = [step for step in PRICE_STEPS if step > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_LIMIT
    return max(rng.sample(candidates, 2))


def price_clause(price_upper: float) -> str:
    """The instruction's price suffix (`, and price lower than X dollars`); empty without a price limit."""
    return f", and price lower than {price_upper:.2f} dollars" if price_upper < NO_PRICE_LIMIT else ""


# ---------------------------------------------------------------------------------------------------------------
# Synthetic goals (lazy expansion over option combinations)


@dataclass(frozen=True, slots=True)
class _ProductGoals:
    product: Product
    instruction: str
    attributes: tuple[str, ...]
    price_upper: float
    option_names: tuple[str, ...]  # sorted
    option_values: tuple[tuple[str, ...], ...]


class SyntheticGoals(Sequence[Goal]):
    """All synthetic goals of a catalogue, in WebShop's order (products in catalogue order, then combinations)."""

    def __init__(
        self,
        products: Sequence[Product],
        instructions: dict[str, tuple[str, list[str]]],
        prices: dict[str, float],
        rng: random.Random,
    ):
        self._records: list[_ProductGoals] = []
        self._starts: list[int] = []  # index of each record's first goal
        total = 0
        for product in products:
            entry = instructions.get(product.asin)
            if entry is None or not entry[1]:
                continue  # no synthetic instruction, or one without attributes (unscorable)
            names = tuple(sorted(product.options))
            values = tuple(product.options[n] for n in names)
            count = 1
            for v in values:
                count *= len(v)
            if count == 0:
                continue
            record = _ProductGoals(
                product, entry[0], tuple(entry[1]), sample_price_upper(prices[product.asin], rng), names, values
            )
            self._records.append(record)
            self._starts.append(total)
            total += count
        self._total = total

    @property
    def num_instructions(self) -> int:
        """Products with a scorable instruction; each gives one goal per option combination."""
        return len(self._records)

    def __len__(self) -> int:
        return self._total

    def __getitem__(self, index: int) -> Goal:  # type: ignore[override]
        if not -self._total <= index < self._total:
            raise IndexError(f"goal index {index} out of range for {self._total} goals")
        index %= self._total
        slot = bisect.bisect_right(self._starts, index) - 1
        record = self._records[slot]
        combination = index - self._starts[slot]
        chosen = []
        for values in reversed(record.option_values):  # mixed radix, last option fastest
            combination, digit = divmod(combination, len(values))
            chosen.append(values[digit])
        pairs = tuple(zip(record.option_names, reversed(chosen), strict=True))
        option_text = ", and ".join(f"{name}: {value}" for name, value in pairs)
        product = record.product
        return Goal(
            goal_id=index,
            asin=product.asin,
            name=product.title,
            query=product.query,
            category=product.category,
            product_category=product.product_category,
            instruction_text=record.instruction
            + (f" with {option_text}" if option_text else "")
            + price_clause(record.price_upper),
            attributes=record.attributes,
            price_upper=record.price_upper,
            goal_options=pairs,
        )


def build_human_goals(
    products: Sequence[Product],
    human_instructions: dict[str, list[dict[str, Any]]],
    prices: dict[str, float],
    rng: random.Random,
) -> list[Goal]:
    """Goals from WebShop's human instructions (`items_human_ins.json`); entries without attributes are skipped."""
    goals: list[Goal] = []
    for product in products:
        for entry in human_instructions.get(product.asin, ()):
            attributes = entry.get("instruction_attributes") or []
            if not attributes:
                continue
            price_upper = sample_price_upper(prices[product.asin], rng)
            goals.append(
                Goal(
                    goal_id=len(goals),
                    asin=product.asin,
                    name=product.title,
                    query=product.query,
                    category=product.category,
                    product_category=product.product_category,
                    instruction_text=str(entry.get("instruction", "")).strip(".") + price_clause(price_upper),
                    attributes=tuple(attributes),
                    price_upper=price_upper,
                    goal_options=tuple(str(o) for o in entry.get("instruction_options") or ()),
                )
            )
    return goals


# ---------------------------------------------------------------------------------------------------------------
# Splits


def canonical_split(split: str) -> str:
    """The split name, with RAGEN's `val` accepted for `validation`."""
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        raise ValueError(f"split={split!r} is not a WebShop split; choose one of {list(SPLITS)} (or 'val')")
    return name


def split_order(num_goals: int) -> list[int]:
    """Goal indices in split order: WebShop's server shuffle followed by RAGEN's fixed permutation."""
    shuffled = list(range(num_goals))
    random.Random(SERVER_SHUFFLE_SEED).shuffle(shuffled)
    permutation = list(range(num_goals))
    random.Random(RAGEN_PERMUTATION_SEED).shuffle(permutation)
    return [shuffled[p] for p in permutation]


def split_bounds(num_goals: int) -> dict[str, tuple[int, int]]:
    """`split -> (start, stop)` in split order: RAGEN's 500 / 1,000 / rest.

    A catalogue with at most 1,500 goals cannot hold RAGEN's sizes; it is split in the same proportions as the
    6,910 goals of the 1k catalogue (7.2% test, 14.5% validation, the rest train), each split at least one goal.
    """
    if num_goals < 3:
        raise ValueError(f"a WebShop split needs at least 3 goals, the catalogue has {num_goals}; use more products")
    if num_goals > RAGEN_TEST_GOALS + RAGEN_VALIDATION_GOALS:
        n_test, n_val = RAGEN_TEST_GOALS, RAGEN_VALIDATION_GOALS
    else:
        n_test = max(1, round(num_goals * RAGEN_TEST_GOALS / 6910))
        n_val = max(1, round(num_goals * RAGEN_VALIDATION_GOALS / 6910))
    return {"test": (0, n_test), "validation": (n_test, n_test + n_val), "train": (n_test + n_val, num_goals)}


def goal_position(bounds: dict[str, tuple[int, int]], split: str, seed: int) -> int:
    """Position in split order of the goal that `seed` picks in `split` (`start + seed % size`)."""
    start, stop = bounds[canonical_split(split)]
    return start + seed % (stop - start)
