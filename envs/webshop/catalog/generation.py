"""A procedural WebShop catalogue: products, synthetic instructions and title nouns, deterministic per seed.

Used when no WebShop data is configured, so the environment (and its benchmark at 100k products) runs anywhere.
Products follow the shape of WebShop's processed records: a brand + modifiers + product noun title, a description
and bullet points that mention the product's attribute phrases, options drawn from the product type's pools
(sizes, colours, flavours, ...), a price (sometimes a price range), and the type's search query and `›` category
path from `words.py`. About 45% of products carry a synthetic instruction in WebShop's style
("Find me {attributes} {query} with {attributes}") whose attributes are a subset of the product's, so every goal is
solvable by buying its product with the goal's options.

Product `i` depends only on `(seed, i)` (its own `random.Random`), so a small catalogue is a prefix of a larger
one with the same seed. The generator knows which title words are nouns, so the reward's title-noun score needs
no tagger: brand names and the material, product and use phrases count as nouns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .products import Product
from .words import BRAND_SYLLABLES, GENERIC_ADJECTIVES, PRODUCT_TYPES, ProductType


INSTRUCTION_FRACTION = 0.45
PRICE_RANGE_FRACTION = 0.1
MAX_PRODUCTS = 100_000_000  # ASINs are "PG" + 8 digits
OPTION_PROBABILITY = (0.85, 0.7)  # chance that a product offers its type's first / second option


@dataclass
class GeneratedCatalog:
    """The generator's output: products in catalogue order, instructions and title nouns by ASIN."""

    name: str
    products: list[Product]
    instructions: dict[str, tuple[str, list[str]]]  # asin -> (instruction text, instruction attributes)
    nouns: dict[str, list[str]]


def catalog_name(num_products: int, seed: int) -> str:
    """The name of a procedural catalogue, e.g. `procedural-1000-seed0`."""
    return f"procedural-{num_products}-seed{seed}"


# ---------------------------------------------------------------------------------------------------------------
# One product (pure function of seed and index)


def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(BRAND_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _title(rng: random.Random, kind: ProductType, brand: str) -> tuple[str, list[str]]:
    """The title and its noun tokens (lower case, in order)."""
    words: list[tuple[str, bool]] = [(brand, True)]  # (text, is a noun)
    if rng.random() < 0.4:
        words.append((rng.choice(GENERIC_ADJECTIVES), False))
    words.append((rng.choice(kind.adjectives), False))
    if rng.random() < 0.8:
        words.append((rng.choice(kind.materials), True))
    words.append((rng.choice(kind.heads), True))
    if rng.random() < 0.6:
        words += [("for", False), (rng.choice(kind.uses), True)]
    title = " ".join(text for text, _ in words)
    nouns = [token.lower() for text, is_noun in words if is_noun for token in text.split()]
    return title, nouns


def _options(rng: random.Random, kind: ProductType) -> dict[str, tuple[str, ...]]:
    options = {}
    for (name, pool), probability in zip(kind.options, OPTION_PROBABILITY, strict=False):  # types have 1 or 2 options
        if rng.random() < probability:
            count = rng.randint(min(2, len(pool)), min(6, len(pool)))
            chosen = sorted(rng.sample(range(len(pool)), count))  # keep the pool's order, as a shop lists them
            options[name] = tuple(pool[i] for i in chosen)
    return options


def _pricing(rng: random.Random, kind: ProductType) -> tuple[tuple[float, ...], str]:
    low, high = kind.price
    price = round(low + (high - low) * rng.random() ** 1.5, 2)
    if rng.random() < PRICE_RANGE_FRACTION:
        top = round(price * rng.uniform(1.15, 1.6), 2)
        return (price, top), f"${price} to ${top}"
    return (price,), f"${price}"


def _texts(
    rng: random.Random, kind: ProductType, brand: str, title: str, attributes: list[str]
) -> tuple[str, tuple[str, ...]]:
    """Description and bullet points; each attribute phrase appears verbatim in a bullet point."""
    head = rng.choice(kind.heads).lower()
    description = (
        f"{title}. This {head} by {brand} is {attributes[0]} and {attributes[-1]}, "
        f"made for everyday use. Listed under {kind.query}."
    )
    bullet_templates = (
        "{Attr}: designed with {attr} in mind",
        "{Attr} - tested for quality",
        "Features {attr} for lasting comfort and value",
        "{Attr}; see the description for details",
    )
    bullets = [rng.choice(bullet_templates).format(Attr=a.capitalize(), attr=a) for a in attributes]
    bullets.append(f"Satisfaction guaranteed: contact {brand} support with any question")
    return description, tuple(bullets)


def _instruction(rng: random.Random, kind: ProductType, attributes: list[str]) -> tuple[str, list[str]]:
    """A WebShop-style synthetic instruction naming 1-4 of the product's attributes."""
    chosen = rng.sample(attributes, rng.randint(1, min(4, len(attributes))))
    split = (len(chosen) + 1) // 2
    text = f"Find me {', '.join(chosen[:split])} {kind.query}"
    if chosen[split:]:
        text += f" with {', '.join(chosen[split:])}"
    return text, chosen


def generate_product(seed: int, index: int) -> tuple[Product, tuple[str, list[str]] | None, list[str]]:
    """Product `index` of the catalogue `seed`: `(product, instruction or None, title nouns)`."""
    rng = random.Random((seed << 32) | index)
    kind = PRODUCT_TYPES[rng.randrange(len(PRODUCT_TYPES))]
    brand = _brand(rng)
    title, nouns = _title(rng, kind, brand)
    attributes = rng.sample(kind.attributes, rng.randint(3, min(5, len(kind.attributes))))
    description, bullets = _texts(rng, kind, brand, title, attributes)
    pricing, price_text = _pricing(rng, kind)
    product = Product(
        asin=f"PG{index:08d}",
        title=title,
        description=description,
        bullet_points=bullets,
        price_text=price_text,
        pricing=pricing,
        options=_options(rng, kind),
        attributes=tuple(attributes),
        category=kind.category,
        query=kind.query,
        product_category=kind.path,
    )
    instruction = _instruction(rng, kind, attributes) if rng.random() < INSTRUCTION_FRACTION else None
    return product, instruction, nouns


# ---------------------------------------------------------------------------------------------------------------
# The catalogue


def generate_catalog(num_products: int = 1000, seed: int = 0) -> GeneratedCatalog:
    """`num_products` products of the procedural catalogue `seed` (the first `num_products` of an endless one)."""
    if not 1 <= num_products <= MAX_PRODUCTS:
        raise ValueError(f"num_products must be in [1, {MAX_PRODUCTS}], got {num_products}")
    if not 0 <= seed < 2**31:
        raise ValueError(f"seed must be in [0, 2**31) for the procedural catalogue, got {seed}")
    products, instructions, nouns = [], {}, {}
    for index in range(num_products):
        product, instruction, title_nouns = generate_product(seed, index)
        products.append(product)
        nouns[product.asin] = title_nouns
        if instruction is not None:
            instructions[product.asin] = instruction
    return GeneratedCatalog(catalog_name(num_products, seed), products, instructions, nouns)
