"""The WebShop page machine: one shopping session's pages, its actions, and the text the agent sees.

Pages: `search` (instruction + search box) -> `results` (10 per page, up to 50 hits) -> `item` (options
selectable) -> `description` / `features` / `reviews` sub-pages -> `done` after "Buy Now". Transitions follow
WebShop's server: "Back to Search" starts over; "< Prev" goes from results page p to p-1, from an item back to its
results page (clearing selected options), from a sub-page back to the item; clicking an option value selects it
for its option; "Buy Now" scores the purchase.

Actions are `search[<keywords>]` and `click[<element>]`, parsed with WebShop's pattern `(.+)\\[(.+)\\]` (the
argument lower-cased). `search` needs the search box; `click` needs a clickable element of the current page:
the buttons (`back to search`, `< prev`, `next >`, `description`, `features`, `reviews`, `buy now`), a product
ASIN on a results page (lower case), or an option value on an item page. Anything else is refused with a reason
and leaves the session unchanged. As in RAGEN, `next >` is not offered on a page with no results.

Observations use WebShop's "simple" text mode: the visible texts of the page joined with ` [SEP] `.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from .data import Shop
    from .goals import Goal
    from .reward import RewardBreakdown


SEARCH, RESULTS, ITEM, DESCRIPTION, FEATURES, REVIEWS, DONE = (
    "search", "results", "item", "description", "features", "reviews", "done",
)  # fmt: skip
SUB_PAGES = (DESCRIPTION, FEATURES, REVIEWS)
BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, BUY_NOW = "back to search", "< prev", "next >", "buy now"
PRODUCTS_PER_PAGE = 10
MAX_ACTION_CHARS = 1000
SEP = " [SEP] "
ACTION_PATTERN = re.compile(r"(.+)\[(.+)\]")
SEARCH_ACTION_HINT = "search[<content>]"


@dataclass(frozen=True)
class PageState:
    """Where the session is: the page, the search, the product and the options selected on it."""

    page: str = SEARCH
    keywords: str | None = None
    results: tuple[str, ...] = ()  # ASINs of the last search, best first
    results_page: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)  # option name -> selected value

    def page_results(self) -> tuple[str, ...]:
        """The ASINs listed on the current results page (`PRODUCTS_PER_PAGE` per page)."""
        start = (self.results_page - 1) * PRODUCTS_PER_PAGE
        return self.results[start : start + PRODUCTS_PER_PAGE]


@dataclass(frozen=True)
class Outcome:
    """What one action did: whether it was valid (and why not), and the purchase score when it ended the session."""

    valid: bool
    reason: str = ""
    purchase: RewardBreakdown | None = None

    @property
    def done(self) -> bool:
        """Whether the action ended the session with a purchase."""
        return self.purchase is not None


def parse_action(action: str) -> tuple[str, str] | None:
    """`(verb, lower-cased argument)` of `verb[argument]`, or None when the text has no such shape."""
    match = ACTION_PATTERN.match(action.strip())
    if match is None:
        return None
    return match.group(1), match.group(2).lower()


# ---------------------------------------------------------------------------------------------------------------
# Page contents (pure functions of the state)


def clickables(shop: Shop, state: PageState) -> dict[str, tuple[str, str | None]]:
    """Clickable text -> `(kind, payload)` on the current page, in page order: buttons, products (payload: the ASIN),
    option values (payload: the option's name)."""
    items: dict[str, tuple[str, str | None]] = {}
    if state.page == RESULTS:
        items[BACK_TO_SEARCH] = ("button", None)
        if state.results_page > 1:
            items[PREV_PAGE] = ("button", None)
        on_page = state.page_results()
        if on_page:
            items[NEXT_PAGE] = ("button", None)
        for asin in on_page:
            items[asin.lower()] = ("product", asin)
    elif state.page == ITEM:
        for button in (BACK_TO_SEARCH, PREV_PAGE, DESCRIPTION, FEATURES, REVIEWS, BUY_NOW):
            items[button] = ("button", None)
        for name, values in shop.by_asin[state.asin].options.items():
            for value in values:
                if items.get(value, ("option",))[0] == "option":  # a button keeps its own name
                    items[value] = ("option", name)
    elif state.page in SUB_PAGES:
        items[BACK_TO_SEARCH] = ("button", None)
        items[PREV_PAGE] = ("button", None)
    return items


def page_texts(shop: Shop, state: PageState, instruction: str, purchase: RewardBreakdown | None) -> list[str]:
    """The visible texts of the page, in reading order (WebShop's simple observation before joining)."""
    if state.page == SEARCH:
        return ["WebShop", "Instruction:", instruction, "Search"]
    if state.page == DONE:
        score = purchase.raw if purchase is not None else 0.0
        return ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{score}"]
    texts = ["Instruction:", instruction, "Back to Search"]
    if state.page == RESULTS:
        texts.append(f"Page {state.results_page} (Total results: {len(state.results)})")
        if state.results_page > 1:
            texts.append("< Prev")
        on_page = state.page_results()
        if on_page:
            texts.append("Next >")
        for asin in on_page:
            product = shop.by_asin[asin]
            texts += [asin, product.title, product.price_text]
        return texts
    product = shop.by_asin[state.asin]
    texts.append("< Prev")
    if state.page == ITEM:
        for name, values in product.options.items():
            texts.append(name)
            texts += values
        texts += [product.title, f"Price: {product.price_text}", f"Rating: {product.rating}"]
        texts += ["Description", "Features", "Reviews", "Buy Now"]
    elif state.page == DESCRIPTION:
        texts.append(product.description)
    elif state.page == FEATURES:
        texts += product.bullet_points
    elif state.page == REVIEWS:
        for review in product.reviews:
            texts += [str(review.get("title", "")), str(review.get("score", "")), str(review.get("body", ""))]
    return texts


def render_simple(texts: list[str]) -> str:
    """WebShop's simple observation: the non-empty stripped texts joined by ` [SEP] `."""
    return SEP.join(t for t in (text.strip() for text in texts) if t)


# ---------------------------------------------------------------------------------------------------------------
# The session


class ShopSession:
    """One shopper working towards `goal` in `shop`: the page state and the purchase, changed only by `act`."""

    def __init__(self, shop: Shop, goal: Goal):
        self.shop, self.goal = shop, goal
        self.state = PageState()
        self.purchase: RewardBreakdown | None = None

    @property
    def done(self) -> bool:
        """Whether the session is over (a purchase was made)."""
        return self.state.page == DONE

    def has_search_box(self) -> bool:
        """Whether the current page is the search page, the only one with a search box."""
        return self.state.page == SEARCH

    def clickables(self) -> dict[str, tuple[str, str | None]]:
        """Clickable text -> `(kind, payload)` on the current page (see the module-level `clickables`)."""
        return clickables(self.shop, self.state)

    def available_actions(self) -> list[str]:
        """RAGEN's action list: `search[<content>]` when there is a search box, then `click[...]` per clickable."""
        actions = [SEARCH_ACTION_HINT] if self.has_search_box() else []
        return actions + [f"click[{text}]" for text in self.clickables()]

    def observation(self) -> str:
        """The current page as WebShop's simple text observation."""
        return render_simple(page_texts(self.shop, self.state, self.goal.instruction_text, self.purchase))

    def act(self, action: Any) -> Outcome:
        """Apply one untrusted action; an unusable one returns `Outcome(valid=False, reason)` and changes nothing."""
        if not isinstance(action, str):
            return Outcome(False, f"an action must be text, got {type(action).__name__}")
        if len(action) > MAX_ACTION_CHARS:
            return Outcome(False, f"the action is {len(action)} characters long (at most {MAX_ACTION_CHARS})")
        if self.done:
            return Outcome(False, "the purchase is made; the episode is over")
        parsed = parse_action(action)
        if parsed is None:
            return Outcome(False, "an action must look like search[<keywords>] or click[<element>]")
        verb, argument = parsed
        if verb == "search":
            if not self.has_search_box():
                return Outcome(False, "there is no search box on this page; click[back to search] first")
            if not argument.strip():
                return Outcome(False, "search keywords are empty")
            self.state = PageState(page=RESULTS, keywords=argument, results=tuple(self.shop.search(argument)))
            return Outcome(True)
        if verb == "click":
            target = self.clickables().get(argument)
            if target is None:
                return Outcome(False, f"{argument!r} is not clickable on this page")
            return self._click(argument, *target)
        return Outcome(False, f"unknown action {verb!r}; use search[...] or click[...]")

    def _click(self, text: str, kind: str, payload: str | None) -> Outcome:
        state = self.state
        if kind == "product":
            self.state = replace(state, page=ITEM, asin=payload, options={})
        elif kind == "option":
            self.state = replace(state, options={**state.options, payload: text})
        elif text == BACK_TO_SEARCH:
            self.state = PageState()
        elif text == NEXT_PAGE:
            self.state = replace(state, results_page=state.results_page + 1)
        elif text == PREV_PAGE:
            if state.page == RESULTS:
                self.state = replace(state, results_page=state.results_page - 1)
            elif state.page == ITEM:
                self.state = replace(state, page=RESULTS, asin=None, options={})
            else:
                self.state = replace(state, page=ITEM)
        elif text in SUB_PAGES:
            self.state = replace(state, page=text)
        elif text == BUY_NOW:
            self.purchase = self.shop.score_purchase(self.goal, state.asin, state.options)
            self.state = replace(state, page=DONE)
            return Outcome(True, purchase=self.purchase)
        return Outcome(True)

    def view(self) -> dict[str, Any]:
        """The page as data for HTML templates (same state as the text observation)."""
        state = self.state
        on_page = state.page_results()
        return {
            "page": state.page,
            "instruction": self.goal.instruction_text,
            "keywords": state.keywords,
            "results_page": state.results_page,
            "total_results": len(state.results),
            "has_prev": state.page == RESULTS and state.results_page > 1,
            "has_next": state.page == RESULTS and bool(on_page),
            "results": [self.shop.by_asin[a] for a in on_page],
            "product": self.shop.by_asin.get(state.asin) if state.asin else None,
            "selected": dict(state.options),
            "purchase": self.purchase,
            "goal": self.goal,
        }
