"""WebShop's purchase reward, reimplemented from its formula (with its quirks), plus RAGEN's binary success.

    raw = (attribute hits + option hits + [price <= price_upper]) / (#goal attributes + #goal options + 1) * r_type

- **Attribute hit**: some product attribute scores `fuzz.token_set_ratio > 85` against the goal attribute; failing
  that, the goal attribute is a substring of the lower-cased title, the joined bullet points or the description.
- **Option hit**: both sides are colour-normalised first, then a goal option counts when some purchased option
  value scores `token_set_ratio > 85` against it. Synthetic goals keep their options as `(name, value)` pairs, and
  WebShop compares the *pair as text* (`"('size', 'x-large')"`, which the fuzzy matcher reduces to the words
  "size x large"): buying "large" therefore matches the goal ("large" is a subset of its words) while buying
  "x-large" does not match a goal of "large". A pair is replaced by a colour word only when the colour *equals* one
  of its two strings; a purchased value becomes the first `COLOR_SET` word found anywhere in it ("washed black" ->
  "ash").
- **Type factor** `r_type`: 1, lowered to 0.5 when neither the query matches, nor >= 2 `›` categories are shared, nor
  the title-noun score exceeds 0.2; to 0.1 when the title-noun score is below 0.1; to 0 when it is 0. The title-noun
  score is |set(goal nouns) ∩ set(purchased nouns)| / len(goal noun list) (0.2 when the goal name has no nouns).
- **Scores** come from `thefuzz` (integer-rounded, full-processed strings), as in WebShop.

`success` is RAGEN's: `raw >= 1`; the RL reward is 1/0 success by default (`binary_reward`), else `raw`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from thefuzz import fuzz

from .catalog.products import Product
from .goals import Goal, GoalOption


FUZZY_MATCH_THRESHOLD = 85  # a score must exceed this
CATEGORY_SEPARATOR = "›"
MIN_SHARED_CATEGORIES = 2
NO_NOUN_TITLE_SCORE = 0.2

# WebShop's colour vocabulary (engine/normalize.py), in its order: the first word found wins.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RewardBreakdown:
    """Every part of one purchase's score (`raw` is WebShop's reward in [0, 1])."""

    raw: float
    r_type: float
    attribute_hits: int
    num_attributes: int
    option_hits: int
    num_options: int
    price_ok: bool
    query_match: bool
    category_match: bool
    title_score: float

    @property
    def success(self) -> bool:
        """Whether the purchase earned the full reward (`raw >= 1`)."""
        return self.raw >= 1.0

    def as_info(self) -> dict[str, Any]:
        """Flat, JSON-friendly fields for `info` and logs (`raw` is named `raw_reward`)."""
        info = asdict(self)
        info["raw_reward"] = info.pop("raw")
        return info


# ---------------------------------------------------------------------------------------------------------------
# Parts of the score (pure functions)


def normalize_color(value: str | tuple[str, ...]) -> str | tuple[str, ...]:
    """The first `COLOR_SET` word "in" `value`: a substring of a text, or an element equal to it for a pair."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def as_match_text(option: GoalOption | str | tuple[str, ...]) -> str:
    """The text the fuzzy matcher sees for an option (a pair becomes its Python repr, as in WebShop)."""
    return option if isinstance(option, str) else str(option)


def fuzzy_match(a: str, b: str) -> bool:
    """Whether thefuzz's token-set ratio of `a` and `b` exceeds `FUZZY_MATCH_THRESHOLD` (85, on a 0-100 scale)."""
    return fuzz.token_set_ratio(a, b) > FUZZY_MATCH_THRESHOLD


def attribute_hits(product: Product, goal_attributes: tuple[str, ...]) -> int:
    """How many goal attributes the product has (fuzzy match on its attributes, else a substring of its text)."""
    title = product.title.lower()
    bullets = " ".join(product.bullet_points).lower()
    description = product.description.lower()
    hits = 0
    for wanted in goal_attributes:
        listed = any(fuzzy_match(have, wanted) for have in product.attributes)
        if listed or wanted in title or wanted in bullets or wanted in description:  # substring fallback
            hits += 1
    return hits


def option_hits(purchased_values: list[str], goal_options: tuple[GoalOption, ...]) -> int:
    """How many goal options some purchased option value matches (after colour normalisation)."""
    bought = [as_match_text(normalize_color(v)) for v in purchased_values]
    hits = 0
    for option in goal_options:
        wanted = as_match_text(normalize_color(option))
        if any(fuzzy_match(have, wanted) for have in bought):
            hits += 1
    return hits


def title_score(goal_nouns: tuple[str, ...], purchased_nouns: tuple[str, ...]) -> float:
    """Shared distinct nouns over the goal's noun count (duplicates counted); 0.2 when the goal has none."""
    if not goal_nouns:
        return NO_NOUN_TITLE_SCORE
    return len(set(goal_nouns) & set(purchased_nouns)) / len(goal_nouns)


def category_match(goal_category: str, purchased_category: str) -> bool:
    """Whether the two `›`-separated category paths share at least `MIN_SHARED_CATEGORIES` (2) parts."""
    goal_parts = {part.strip() for part in goal_category.split(CATEGORY_SEPARATOR)}
    purchased_parts = {part.strip() for part in purchased_category.split(CATEGORY_SEPARATOR)}
    return len(goal_parts & purchased_parts) >= MIN_SHARED_CATEGORIES


def type_factor(query_match: bool, categories_match: bool, noun_score: float) -> float:
    """WebShop's r_type levels: 1, 0.5, 0.1 or 0 (later rules override earlier ones)."""
    r_type = 1.0
    if not (query_match or categories_match or noun_score > 0.2):
        r_type = 0.5
    if noun_score < 0.1:
        r_type = 0.1
    if noun_score == 0.0:
        r_type = 0.0
    return r_type


# ---------------------------------------------------------------------------------------------------------------
# The reward


def compute_reward(
    product: Product,
    goal: Goal,
    price: float,
    selected_options: dict[str, str],
    goal_nouns: tuple[str, ...],
    purchased_nouns: tuple[str, ...],
) -> RewardBreakdown:
    """Score buying `product` at `price` with `selected_options` (option name -> value) against `goal`."""
    query_match = product.query == goal.query
    categories_match = category_match(goal.product_category, product.product_category)
    noun_score = title_score(goal_nouns, purchased_nouns)
    r_type = type_factor(query_match, categories_match, noun_score)
    n_attr = attribute_hits(product, goal.attributes)
    n_opt = option_hits(list(selected_options.values()), goal.goal_options)
    price_ok = price <= goal.price_upper
    denominator = len(goal.attributes) + len(goal.goal_options) + 1
    raw = (n_attr + n_opt + int(price_ok)) / denominator * r_type
    return RewardBreakdown(
        raw=raw,
        r_type=r_type,
        attribute_hits=n_attr,
        num_attributes=len(goal.attributes),
        option_hits=n_opt,
        num_options=len(goal.goal_options),
        price_ok=price_ok,
        query_match=query_match,
        category_match=categories_match,
        title_score=noun_score,
    )


def rl_reward(breakdown: RewardBreakdown, binary: bool = True) -> float:
    """RAGEN's reward: 1.0 on success (raw >= 1) else 0.0; or the raw score when `binary` is False."""
    if binary:
        return 1.0 if breakdown.success else 0.0
    return breakdown.raw
