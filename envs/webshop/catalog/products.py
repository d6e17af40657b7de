"""WebShop products: the record the engine, the search index and the reward read, and how raw data becomes one.

Two input shapes are accepted:

- **raw WebShop records** (`items_shuffle*.json`, scraped pages): `name`, `full_description`, `small_description`,
  `pricing` as text (`"$19.99 - $27.99"`), `customization_options` (option name -> `[{"value", "image"}]`), `images`,
  `category`, `query`, `product_category`. `normalize_raw_product` applies WebShop's loader rules: the title is the
  name, prices are the dollar amounts found in the text (two for a range, `$100.0` when missing), option names and
  values are lower-cased with `/` replaced by ` | `, the query is lower-cased and stripped;
- **processed records** (the `product` objects of `webshop_small_1k_docs.jsonl.gz`), already in the loader's
  output shape (`Title`, `Description`, `BulletPoints`, `Price`, `pricing`, `options`, `Attributes`, ...).

Only the fields the shop shows or scores are kept, once each (no `name`/`Title` or `small_description`/
`BulletPoints` duplicates), so a 1.18 M-product catalogue is held a single time. `index_text` builds the text that
WebShop's search engine indexes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any


DEFAULT_PRICE = 100.0
PLACEHOLDER_ATTRIBUTE = "DUMMY_ATTR"  # what WebShop stores for a product missing from the attribute file
MAX_ASIN_CHARS = 10
_NOT_PRICE = re.compile(r"[^\d.]")


@dataclass(slots=True)
class Product:
    """One catalogue entry, in the shape of WebShop's processed products.

    `pricing` is `(price,)` or `(low, high)` for a price range; `price_text` is how the shop shows it. `options`
    maps an option name (e.g. "size") to its values in shop order. `attributes` are the product's attribute phrases
    used by the reward. `search_text`, when set, is the exact text the search index uses for this product (the
    provided `contents` of the 1k records); otherwise `index_text` builds it.
    """

    asin: str
    title: str
    description: str
    bullet_points: tuple[str, ...]
    price_text: str
    pricing: tuple[float, ...]
    options: dict[str, tuple[str, ...]]
    attributes: tuple[str, ...]
    category: str
    query: str
    product_category: str
    main_image: str = ""
    rating: str = "N.A."
    reviews: tuple[dict[str, Any], ...] = ()
    search_text: str | None = field(default=None, repr=False)


# ---------------------------------------------------------------------------------------------------------------
# Field normalisation (WebShop loader rules)


def parse_pricing(text: Any) -> tuple[tuple[float, ...], str]:
    """`(pricing, price_text)` from a raw price field: the dollar amounts in it (at most two), or `$100.0`.

    >>> parse_pricing("$19.99 - $27.99")
    ((19.99, 27.99), '$19.99 to $27.99')
    """
    if not text or not isinstance(text, str):
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    amounts = []
    for piece in text.split("$")[1:]:
        digits = _NOT_PRICE.sub("", piece)
        try:
            amounts.append(float(Decimal(digits)))
        except InvalidOperation:
            continue  # a "$" not followed by a number
    if not amounts:
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    if len(amounts) == 1:
        return (amounts[0],), f"${amounts[0]}"
    return (amounts[0], amounts[1]), f"${amounts[0]} to ${amounts[1]}"


def normalize_option_value(value: str) -> str:
    """How the shop names an option value: stripped, `/` shown as ` | `, lower case."""
    return value.strip().replace("/", " | ").lower()


def normalize_options(customization_options: Any) -> dict[str, tuple[str, ...]]:
    """Option name -> values from a raw `customization_options` field (`""`, `None` or a dict)."""
    options: dict[str, tuple[str, ...]] = {}
    if not isinstance(customization_options, dict):
        return options
    for name, contents in customization_options.items():
        if not contents:
            continue
        values = [normalize_option_value(str(c["value"])) for c in contents if isinstance(c, dict) and "value" in c]
        if values:
            options[str(name).lower()] = tuple(values)
    return options


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _bullets(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(_text(v) for v in value)
    return (_text(value),)


def is_valid_asin(asin: Any) -> bool:
    """WebShop skips records whose ASIN is missing, `"nan"` or longer than ten characters."""
    return isinstance(asin, str) and asin != "nan" and 0 < len(asin) <= MAX_ASIN_CHARS


def normalize_raw_product(record: dict[str, Any], attributes: list[str] | None) -> Product:
    """A `Product` from a raw `items_shuffle*.json` record; `attributes` come from the attribute file."""
    pricing, price_text = parse_pricing(record.get("pricing"))
    images = record.get("images") or [""]
    return Product(
        asin=record["asin"],
        title=_text(record.get("name")),
        description=_text(record.get("full_description")),
        bullet_points=_bullets(record.get("small_description")),
        price_text=price_text,
        pricing=pricing,
        options=normalize_options(record.get("customization_options")),
        attributes=tuple(attributes) if attributes is not None else (PLACEHOLDER_ATTRIBUTE,),
        category=_text(record.get("category")),
        query=_text(record.get("query")).lower().strip(),
        product_category=_text(record.get("product_category")),
        main_image=_text(images[0]),
    )


def product_from_processed(record: dict[str, Any], search_text: str | None = None) -> Product:
    """A `Product` from an already processed record (the `product` object of the 1k docs file)."""
    pricing = record.get("pricing") or [DEFAULT_PRICE]
    options = record.get("options") or {}
    return Product(
        asin=record["asin"],
        title=_text(record.get("Title", record.get("name"))),
        description=_text(record.get("Description", record.get("full_description"))),
        bullet_points=_bullets(record.get("BulletPoints", record.get("small_description", []))),
        price_text=_text(record.get("Price")) or f"${float(pricing[0])}",
        pricing=tuple(float(p) for p in pricing[:2]),
        options={str(k): tuple(str(v) for v in values) for k, values in options.items() if values},
        attributes=tuple(record.get("Attributes") or ()),
        category=_text(record.get("category")),
        query=_text(record.get("query")).lower().strip(),
        product_category=_text(record.get("product_category")),
        main_image=_text(record.get("MainImage")),
        rating=_text(record.get("Rating")) or "N.A.",
        reviews=tuple(record.get("Reviews") or ()),
        search_text=search_text,
    )


# ---------------------------------------------------------------------------------------------------------------
# Search text


def options_text(options: dict[str, tuple[str, ...]]) -> str:
    """`size: s, m, and color: black, red`: each option as `{name}: v1, v2`, several joined by `, and `."""
    return ", and ".join(f"{name}: {', '.join(values)}" for name, values in options.items())


def index_text(product: Product) -> str:
    """The lower-cased text WebShop indexes: title, description, first bullet point and the options."""
    if product.search_text is not None:
        return product.search_text
    first_bullet = product.bullet_points[0] if product.bullet_points else ""
    return " ".join([product.title, product.description, first_bullet, options_text(product.options)]).lower()
