"""What every registered environment shares (`envs/base.py`): `step` before the first episode does not raise but
answers with `not_started_step()`, an invalid step on an empty observation, and changes nothing (the first `reset`
gives the instance a fresh environment gives); `takes_split` says whether the constructor takes a `split`."""

from __future__ import annotations

import inspect

import pytest

from trl_ragen2_envs import ENVIRONMENTS, get_env_class, make_env
from trl_ragen2_envs.base import NOT_STARTED_REASON

from .webshop_data import index_cache_dir


# A cheap configuration and a well-formed action of each environment.
CASES = {
    "sokoban": ({}, "Up"),
    "frozen_lake": ({}, "Left"),
    "countdown": ({}, "1 + 2"),
    "metamathqa": ({}, "42"),
    "webshop": ({"procedural": True, "procedural_products": 100}, "search[shoes]"),
    "searchqa": ({}, "search[capital]"),
    "deepcoder": ({}, "```python\nprint(1)\n```"),
}


def test_every_environment_is_covered():
    assert sorted(CASES) == sorted(ENVIRONMENTS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_before_reset_is_an_invalid_step(name, tmp_path_factory):
    config, action = CASES[name]
    if name == "webshop":
        config = {**config, "cache_dir": index_cache_dir(tmp_path_factory)}
    env = make_env(name, **config)
    observation, reward, done, info = env.step(action)
    assert (observation, reward, done) == ("", 0.0, False)
    assert info["action_is_valid"] is False and info["success"] is False
    assert info["invalid_reason"] == NOT_STARTED_REASON
    assert env.step(action)[:3] == ("", 0.0, False)  # still no episode
    assert env.reset(seed=3) == make_env(name, **config).reset(seed=3)  # the steps changed nothing
    assert env.step(action)[3].get("invalid_reason") != NOT_STARTED_REASON
    env.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_takes_split_matches_the_constructor(name):
    """`takes_split` (read by the recipes' dataset builder) says whether the constructor has a `split` keyword."""
    env_class = get_env_class(name)
    assert env_class.takes_split == ("split" in inspect.signature(env_class).parameters)
