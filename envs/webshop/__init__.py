"""WebShop for trl-ragen2: the environment, its catalogue pipeline (`catalog/`) and a web UI for people (`ui/`).

The environment: `data` (where a catalogue comes from; the `Shop` of products, goals and search built from it),
`goals` (goals and splits), `search` (BM25), `reward`, `engine` (pages and actions), `episode_log` (JSONL logs)
and `env` (`WebShopEnv`, registered as `make_env("webshop")`, and the TRL tool adapter `WebShopToolEnv`).

`catalog/`: the product record (`products`), streamed JSON (`jsonstream`), title nouns (`nouns`), the procedural
catalogue (`generation` + `words`), and the original data downloaded (`download`) and prepared (`prepare`, the
`trl-ragen2 data webshop` command). `ui/`: the Flask UI, `python -m trl_ragen2_envs.webshop.ui.server`.

`prepare.py`, `download.py` and `server.py` here are the old paths of `catalog/prepare.py`, `catalog/download.py`
and `ui/server.py`, kept for the code and commands that still name them.
"""

from .catalog.prepare import default_data_dir, prepare_webshop_data, prepared_data_dir
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
    "default_data_dir",
    "load_shop",
    "prepare_webshop_data",
    "prepared_data_dir",
    "tool_dataset_rows",
]
