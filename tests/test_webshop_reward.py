"""WebShop's reward on hand-computed cases: attributes, options (with the pair-as-text quirk), price, type factor."""

import pytest

from trl_ragen2_envs.webshop.catalog.products import Product
from trl_ragen2_envs.webshop.goals import Goal
from trl_ragen2_envs.webshop.reward import (
    attribute_hits,
    category_match,
    compute_reward,
    normalize_color,
    option_hits,
    rl_reward,
    title_score,
    type_factor,
)


def make_product(**fields) -> Product:
    base = dict(
        asin="B000000001",
        title="Solid Wood Console Table",
        description="A narrow table for the hallway.",
        bullet_points=("Made of reclaimed fir", "Easy Assembly required"),
        price_text="$50.0",
        pricing=(50.0,),
        options={"size": ("large", "x-large"), "color": ("black", "washed black")},
        attributes=("console table", "metal legs"),
        category="garden",
        query="console tables",
        product_category="Home & Kitchen › Furniture › Living Room Furniture › Tables",
    )
    return Product(**{**base, **fields})


def make_goal(**fields) -> Goal:
    base = dict(
        goal_id=0,
        asin="B000000001",
        name="Solid Wood Console Table",
        query="console tables",
        category="garden",
        product_category="Home & Kitchen › Furniture › Living Room Furniture › Tables",
        instruction_text="Find me a console table",
        attributes=("console table",),
        price_upper=60.0,
        goal_options=(),
    )
    return Goal(**{**base, **fields})


# ---------------------------------------------------------------------------------------------------------------
# Options: colour normalisation and the (name, value) pair compared as text


def test_buying_large_matches_goal_x_large_but_not_the_reverse():
    # The goal pair ('size', 'x-large') is matched as the text "size x large"; "large" is a subset of its words.
    assert option_hits(["large"], (("size", "x-large"),)) == 1
    # "x large" vs "size large": the words "x" and "size" differ, token_set_ratio 83 <= 85.
    assert option_hits(["x-large"], (("size", "large"),)) == 0
    assert option_hits(["x-large"], (("size", "x-large"),)) == 1


def test_colour_normalisation_washed_black_becomes_ash():
    assert normalize_color("washed black") == "ash"  # "ash" is found inside "washed" before "black" in COLOR_SET
    assert normalize_color("light blue") == "blue"  # COLOR_SET order: blue comes before light
    assert normalize_color(("color", "black")) == "black"  # a pair is replaced only by an equal colour word
    assert normalize_color(("color", "washed black")) == ("color", "washed black")
    # Buying "washed black" for a goal of black compares "ash" with "black": no match.
    assert option_hits(["washed black"], (("color", "black"),)) == 0
    # Nor does it match its own value: "ash" vs "color washed black".
    assert option_hits(["washed black"], (("color", "washed black"),)) == 0
    assert option_hits(["black"], (("color", "black"),)) == 1
    assert option_hits(["light blue"], (("color", "light blue"),)) == 1  # "blue" is among the pair's words


def test_option_hits_count_each_goal_option_once():
    goal_options = (("color", "black"), ("size", "x-large"))
    assert option_hits(["black", "x-large"], goal_options) == 2
    assert option_hits(["black"], goal_options) == 1
    assert option_hits([], goal_options) == 0
    assert option_hits(["Navy Blue"], ("navy blue",)) == 1  # human goals keep plain strings


# ---------------------------------------------------------------------------------------------------------------
# Attributes


def test_attribute_fuzzy_match_then_substring_fallback():
    product = make_product(attributes=("legs metal",))
    assert attribute_hits(product, ("metal legs",)) == 1  # token_set_ratio ignores word order
    assert attribute_hits(product, ("solid wood",)) == 1  # substring of the lower-cased title
    assert attribute_hits(product, ("reclaimed fir",)) == 1  # substring of the bullet points
    assert attribute_hits(product, ("hallway",)) == 1  # substring of the description
    assert attribute_hits(product, ("easy assembly",)) == 1  # bullet text is lower-cased first
    assert attribute_hits(product, ("glass top",)) == 0
    assert attribute_hits(product, ("metal legs", "glass top", "solid wood")) == 2


# ---------------------------------------------------------------------------------------------------------------
# Type factor


def test_title_score_divides_by_the_goal_noun_list_with_duplicates():
    assert title_score(("table", "table", "wood"), ("table", "lamp")) == pytest.approx(1 / 3)
    assert title_score((), ("table",)) == 0.2  # a goal name without nouns
    assert title_score(("a", "b"), ()) == 0.0


def test_category_match_needs_two_shared_levels():
    assert category_match("A › B › C", "C › B › X")
    assert not category_match("A › B › C", "A › X › Y")


@pytest.mark.parametrize(
    "query_match, categories_match, noun_score, expected",
    [
        (True, False, 0.0, 0.0),  # no shared noun: 0 whatever else matches
        (True, True, 0.05, 0.1),  # a few shared nouns: 0.1 even with query and category matches
        (False, False, 0.2, 0.5),  # nothing matches and the noun score is not above 0.2
        (False, False, 0.1, 0.5),
        (False, False, 0.25, 1.0),  # the noun score alone is enough
        (True, False, 0.15, 1.0),  # a query match is enough
        (False, True, 0.15, 1.0),  # a category match is enough
    ],
)
def test_type_factor_levels(query_match, categories_match, noun_score, expected):
    assert type_factor(query_match, categories_match, noun_score) == expected


@pytest.mark.parametrize(
    "purchased_fields, goal_nouns, purchased_nouns, r_type",
    [
        ({}, ("console", "table"), ("console", "table"), 1.0),
        ({"query": "lamps", "product_category": "Tools › Lights"}, tuple("abcde"), ("a", "z"), 0.5),  # 1/5 = 0.2
        ({"query": "console tables"}, tuple("abcdefghijklmnopqrst"), ("a",), 0.1),  # 1/20 = 0.05
        ({}, ("console", "table"), ("lamp",), 0.0),
    ],
)
def test_each_type_factor_level_scales_the_reward(purchased_fields, goal_nouns, purchased_nouns, r_type):
    product = make_product(**purchased_fields)
    breakdown = compute_reward(product, make_goal(), 50.0, {}, goal_nouns, purchased_nouns)
    assert breakdown.r_type == r_type
    assert breakdown.raw == pytest.approx(1.0 * r_type)  # attribute and price hit: (1 + 1) / 2


# ---------------------------------------------------------------------------------------------------------------
# The whole formula


def test_price_limit_is_inclusive():
    nouns = ("table",)
    goal = make_goal(price_upper=50.0)
    assert compute_reward(make_product(), goal, 50.0, {}, nouns, nouns).price_ok
    over = compute_reward(make_product(), goal, 50.01, {}, nouns, nouns)
    assert not over.price_ok and over.raw == pytest.approx(0.5)  # (1 attribute + 0 price) / 2


def test_hand_computed_reward():
    goal = make_goal(
        attributes=("console table", "glass top"),
        goal_options=(("color", "black"), ("size", "x-large")),
        price_upper=40.0,
    )
    product = make_product(query="hallway tables")  # no query match, but the categories match: r_type 1
    breakdown = compute_reward(product, goal, 35.0, {"size": "large", "color": "white"}, ("table",), ("table",))
    # attributes 1 of 2, options 1 of 2 (large hits x-large, white misses black), price ok: (1 + 1 + 1) / 5
    assert (breakdown.attribute_hits, breakdown.option_hits, breakdown.price_ok) == (1, 1, True)
    assert breakdown.raw == pytest.approx(0.6) and not breakdown.success
    assert rl_reward(breakdown) == 0.0 and rl_reward(breakdown, binary=False) == pytest.approx(0.6)
    info = breakdown.as_info()
    assert info["raw_reward"] == pytest.approx(0.6) and info["num_options"] == 2 and info["category_match"]


def test_perfect_purchase_is_a_success():
    goal = make_goal(goal_options=(("color", "black"), ("size", "x-large")))
    breakdown = compute_reward(make_product(), goal, 50.0, {"color": "black", "size": "x-large"}, ("t",), ("t",))
    assert breakdown.raw == 1.0 and breakdown.success and rl_reward(breakdown) == 1.0
