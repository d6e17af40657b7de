"""trl-ragen2 environments, installed as `trl_ragen2_envs`.

`make_env(name, **config)` builds one by name. Each module is imported only when its environment is asked
for, and a missing optional dependency raises an `ImportError` naming the extra to install.
"""

from importlib import import_module

from .base import StepResult, TextEnv, check_env_keywords, invalid_step


# name -> "module:Class"; modules are relative to this package
ENVIRONMENTS = {
    "sokoban": "sokoban.env:SokobanEnv",
    "frozen_lake": "frozen_lake.env:FrozenLakeEnv",
    "countdown": "countdown.env:CountdownEnv",
    "metamathqa": "metamathqa.env:MetaMathQAEnv",
    "webshop": "webshop.env:WebShopEnv",
    "searchqa": "searchqa.env:SearchQAEnv",
    "deepcoder": "deepcoder.env:DeepCoderEnv",
}


def get_env_class(name: str):
    """The environment class registered as `name` (its module is imported now)."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"env={name!r} is not a known environment; choose one of {sorted(ENVIRONMENTS)}")
    module_name, class_name = ENVIRONMENTS[name].split(":")
    return getattr(import_module(f".{module_name}", __name__), class_name)


def make_env(name: str, **config) -> TextEnv:
    """Build the environment `name` (see `ENVIRONMENTS`) with its configuration keywords; a `TypeError` lists
    any keyword the environment does not take, with those it does."""
    env_class = get_env_class(name)
    check_env_keywords(env_class, config, f"given to make_env({name!r}), e.g. in a row's env_config")
    return env_class(**config)


__all__ = ["ENVIRONMENTS", "StepResult", "TextEnv", "get_env_class", "invalid_step", "make_env"]
