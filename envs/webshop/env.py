"""WebShop as a trl-ragen2 text environment (RAGEN-2's main task) and as a TRL `environment_factory` class.

One episode: `reset(seed)` picks a goal of the configured split (RAGEN's fixed split: seed -> goal), shows the
search page, and each `step` applies one action (`search[...]` or `click[...]`) until the agent clicks "Buy Now".
The observation is the page in WebShop's simple text mode followed by `Available actions: ...` (RAGEN's list).
Reward: 0 until the purchase; then RAGEN's binary success (1.0 when WebShop's score reaches 1, else 0.0) with
`binary_reward=True` (the default), or WebShop's raw score in [0, 1]. `info` carries `success`, `action_is_valid`,
`action_is_effective`, the page, the raw score and, on the purchase, every part of the score (see `reward.py`).
Episodes get `MAX_TURNS = 9` actions in RAGEN; the rollout enforces it (`env.max_turns`), the environment itself
ends only at the purchase. The catalogue: see `data.py` (`env.catalog_name` names it).

`WebShopToolEnv` exposes the same episode to `trl.GRPOTrainer(environment_factory=WebShopToolEnv)` as two tools,
`search(query)` and `click(element)`, with `reset(**row)` reading `row["seed"]` and an optional `row["env_config"]`
(JSON text of `WebShopEnv` keywords) and `get_reward()` returning the episode's reward.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..base import StepResult, TextEnv, not_started_step
from ..tool_adapter import ToolEnvAdapter
from .data import ShopConfig, load_shop
from .engine import ShopSession
from .episode_log import EpisodeLog, step_record
from .goals import Goal, canonical_split
from .reward import rl_reward


MAX_TURNS = 9  # RAGEN's WebShop: 9 turns, one action each

# ---------------------------------------------------------------------------------------------------------------
# Prompts

INSTRUCTIONS_TEMPLATE = """You are shopping in WebShop, a simulated online store, for the product that the instruction on the page describes. Give exactly one action per turn:
- search[<keywords>] searches the store; it only works where a search box is shown.
- click[<element>] clicks one of the elements listed under "Available actions": a product id on a results page, an option value such as a size or a colour on a product page, or a button (next >, < prev, back to search, description, features, reviews, buy now).
The episode ends with click[buy now]; the purchase is scored against the instruction: product type, attributes, the selected options and the price.
Hints:
- You have {max_turns} actions. A close match that is bought beats a perfect match that is never reached.
- Search for the product type and its key features; leave sizes and colours out of the search.
- Search at most twice, and prefer a fitting product on the current results page to paging further.
- Click next > at most twice, and < prev only to return to a product you have already seen.
- On a product page, click each option the instruction asks for (for example the size, then the colour), one click per action, then click[buy now]. Skip the description.
- With two actions or fewer left, click a product and buy it."""

TOOL_INSTRUCTIONS_TEMPLATE = """You are shopping in WebShop, a simulated online store, for the product that the instruction on the page describes. Use the tools: `search` with keywords on the search page, `click` with one element from "Available actions" (a product id, an option value, or a button such as "next >", "< prev", "back to search", "buy now"). You have {max_turns} tool calls; select the options the instruction asks for, one click each, then click "buy now"."""


def format_observation(page_text: str, actions: list[str]) -> str:
    """The page text followed by RAGEN's list of available actions."""
    if not actions:
        return page_text
    return f"{page_text}\nAvailable actions: {', '.join(actions)}"


# ---------------------------------------------------------------------------------------------------------------
# Environment


class WebShopEnv(TextEnv):
    """WebShop: find and buy the product an instruction describes, by searching and clicking.

    Args:
        data_dir: WebShop data folder (e.g. the one `trl-ragen2 data webshop small` prepares); else
            `$WEBSHOP_DATA_DIR`; else the procedural catalogue.
        split: "train", "validation" (or "val") or "test": which goals `reset(seed)` draws from.
        goals: "synthetic" (WebShop's instruction x option-combination goals) or "human" (`items_human_ins.json`).
        dataset: "auto", "small" or "full" when the data folder holds several catalogues.
        num_products: Read only the first `num_products` records of a raw WebShop product file.
        procedural: Use the procedural catalogue even when `$WEBSHOP_DATA_DIR` is set.
        procedural_products, procedural_seed: Size and seed of the procedural catalogue.
        goal_seed: Seed of the price draws and goal price bounds.
        binary_reward: Reward 1/0 success (RAGEN) instead of WebShop's raw score.
        max_turns: Actions per episode for the rollout (RAGEN: 9).
        cache_dir: Where search indexes are cached (default `~/.cache/trl_ragen2/webshop`).
        log_path: Append one JSONL record per step to this file (`episode_log.py` describes the fields).
    """

    name = "webshop"
    takes_split = True

    def __init__(
        self,
        data_dir: str | None = None,
        split: str = "train",
        *,
        goals: str = "synthetic",
        dataset: str = "auto",
        num_products: int | None = None,
        procedural: bool = False,
        procedural_products: int = 1000,
        procedural_seed: int = 0,
        goal_seed: int = 0,
        binary_reward: bool = True,
        max_turns: int = MAX_TURNS,
        cache_dir: str | None = None,
        log_path: str | None = None,
    ):
        super().__init__()
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.split = canonical_split(split)
        self.binary_reward = binary_reward
        self.max_turns = max_turns
        self.shop = load_shop(
            ShopConfig(
                data_dir=None if data_dir is None else str(data_dir),
                dataset=dataset,
                goals=goals,
                num_products=num_products,
                procedural=procedural,
                procedural_products=procedural_products,
                procedural_seed=procedural_seed,
                goal_seed=goal_seed,
                cache_dir=None if cache_dir is None else str(cache_dir),
            )
        )
        self.log = EpisodeLog(log_path) if log_path else None
        self.session: ShopSession | None = None
        self.seed: int | None = None
        self.turn = 0
        self.episode_id = ""

    # -----------------------------------------------------------------------------------------------------------
    # Protocol

    @property
    def catalog_name(self) -> str:
        """The name of the loaded catalogue."""
        return self.shop.name

    @property
    def goal(self) -> Goal:
        """The current episode's goal; `RuntimeError` before `reset()`."""
        return self._session().goal

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS_TEMPLATE.format(max_turns=self.max_turns)

    def action_vocabulary(self) -> list[str] | None:
        return None  # open-ended: search keywords are free text

    def reset(self, seed: int | None = None) -> str:
        """Start the episode of goal `start + seed % size` of the split (a random seed when None)."""
        self.seed_rng(seed)
        self.seed = int(self.rng.integers(2**31)) if seed is None else int(seed)
        return self._start(self.shop.goal_for(self.split, self.seed))

    def reset_to_goal(self, goal_id: int) -> str:
        """Start an episode on goal `goal_id` of the catalogue's goal list (any split)."""
        if not 0 <= goal_id < len(self.shop.goals):
            raise ValueError(f"goal_id must be in [0, {len(self.shop.goals)}), got {goal_id}")
        self.seed = None
        return self._start(self.shop.goals[goal_id])

    def step(self, action: str) -> StepResult:
        if self.session is None:
            return not_started_step(page=None, raw_reward=0.0, turn=0)
        session = self.session
        before = session.state
        outcome = session.act(action)
        self.turn += 1
        info: dict[str, Any] = {
            "success": False,
            "action_is_valid": outcome.valid,
            "action_is_effective": session.state != before,
            "page": session.state.page,
            "raw_reward": 0.0,
            "turn": self.turn,
        }
        reward = 0.0
        if not outcome.valid:
            info["invalid_reason"] = outcome.reason
        if outcome.purchase is not None:
            info.update(outcome.purchase.as_info())
            info["success"] = outcome.purchase.success
            info["purchased_asin"] = before.asin
            info["purchased_options"] = dict(before.options)
            reward = rl_reward(outcome.purchase, self.binary_reward)
        observation = self.render()
        self._log(action, observation, reward, session.done, info)
        return observation, reward, session.done, info

    def render(self) -> str:
        session = self._session()
        return format_observation(session.observation(), session.available_actions())

    def available_actions(self) -> list[str]:
        """RAGEN's list: `search[<content>]` where a search box is shown, then `click[...]` per clickable."""
        return self._session().available_actions()

    # -----------------------------------------------------------------------------------------------------------
    # Internals

    def _session(self) -> ShopSession:
        if self.session is None:
            raise RuntimeError("WebShopEnv: call reset() before step(), render() or available_actions()")
        return self.session

    def _start(self, goal: Goal) -> str:
        self.session = ShopSession(self.shop, goal)
        self.turn = 0
        self.episode_id = uuid.uuid4().hex[:16]
        observation = self.render()
        self._log(None, observation, 0.0, False, {"success": False, "action_is_valid": True, "page": "search"})
        return observation

    def _log(self, action: str | None, observation: str, reward: float, done: bool, info: dict[str, Any]) -> None:
        if self.log is None:
            return
        self.log.write(
            step_record(
                episode=self.episode_id,
                catalog=self.catalog_name,
                split=self.split if self.seed is not None else None,
                seed=self.seed,
                goal=self.goal,
                step=self.turn,
                action=None if action is None else str(action),
                observation=observation,
                reward=reward,
                done=done,
                info=info,
            )
        )


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


class WebShopToolEnv(ToolEnvAdapter):
    """WebShop for `trl.GRPOTrainer(environment_factory=WebShopToolEnv)`: tools `search` and `click`.

    Keywords given to the constructor (e.g. through `functools.partial`) are `WebShopEnv` keywords; a dataset row's
    `env_config` (JSON text) adds to them per episode. The episode allows `max_turns` tool calls (9); further calls
    change nothing. The reward is the episode's: 1.0 for a successful purchase (0.0 otherwise), or the raw score
    when configured.
    """

    env_class = WebShopEnv
    not_started_reply = "Error: the episode has not started."
    episode_over_reply = "Error: the purchase is made; the episode is over."
    invalid_reply = "Error: {reason}.\n{observation}"

    def search(self, query: str) -> str:
        """Search the store for products; only works on the search page.

        Args:
            query: The search keywords, for example "women's long sleeve dress machine wash".

        Returns:
            The results page and the actions available on it.
        """
        return self._act(f"search[{query}]")

    def click(self, element: str) -> str:
        """Click an element of the current page: a product id, an option value, or a button.

        Args:
            element: The element's text as listed in "Available actions", for example "b09qkp7xqr", "x-large",
                "next >", "< prev", "back to search", "description", "features", "reviews" or "buy now".

        Returns:
            The new page and the actions available on it.
        """
        return self._act(f"click[{element}]")

    def _tool_instructions(self) -> str:
        return TOOL_INSTRUCTIONS_TEMPLATE.format(max_turns=self.env.max_turns)

    def _refusal(self) -> str | None:
        if self.env.turn >= self.env.max_turns:  # `turn` counts this episode's steps, rejected ones included
            return f"Error: no actions left (the episode allows {self.env.max_turns})."
        return None


def tool_dataset_rows(
    num_rows: int, split: str = "train", start_seed: int = 0, **env_config: Any
) -> list[dict[str, Any]]:
    """Rows for `WebShopToolEnv`: a user turn, a seed (`start_seed + i`) and the env config as JSON text.

    `reset(**row)` appends the tool instructions and the first page to the user turn. Wrap the rows with
    `datasets.Dataset.from_list(rows)`.
    """
    config = {**env_config, "split": canonical_split(split)}
    return [
        {
            "prompt": [{"role": "user", "content": "Buy the product that the instruction below describes."}],
            "seed": start_seed + index,
            "env_config": json.dumps(config, sort_keys=True),
        }
        for index in range(num_rows)
    ]
