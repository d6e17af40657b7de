"""WebShop for trl-ragen2: catalogue loading, BM25 search, the page engine, the original reward, the text
environment (`WebShopEnv`, registered as `make_env("webshop")`), the TRL tool adapter (`WebShopToolEnv`) and a
web UI for people (`python -m trl_ragen2_envs.webshop.server`).

Modules: `products` (record shape), `jsonstream` (streamed JSON), `data` (where data comes from, `Shop`),
`catalog_gen` + `catalog_words` (procedural catalogue), `goals` (goals and splits), `nouns` (title nouns),
`search` (BM25), `reward`, `engine` (pages and actions), `episode_log` (JSONL logs), `env`, `server`.
"""

from .data import DATA_DIR_ENV_VAR, Shop, ShopConfig, load_shop
from .env import MAX_TURNS, WebShopEnv, WebShopToolEnv, tool_dataset_rows
from .goals import Goal
from .reward import RewardBreakdown, compute_reward


__all__ = [
    "DATA_DIR_ENV_VAR",
    "MAX_TURNS",
    "Goal",
    "RewardBreakdown",
    "Shop",
    "ShopConfig",
    "WebShopEnv",
    "WebShopToolEnv",
    "compute_reward",
    "load_shop",
    "tool_dataset_rows",
]
