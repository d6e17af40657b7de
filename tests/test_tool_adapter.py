"""ToolEnvAdapter: the tools TRL collects from each adapter, row parsing, environment reuse, calls outside episodes."""

import functools
import inspect

import pytest

from trl_ragen2_envs.countdown import CountdownToolEnv
from trl_ragen2_envs.deepcoder import DeepCoderToolEnv
from trl_ragen2_envs.frozen_lake import FrozenLakeToolEnv
from trl_ragen2_envs.metamathqa import MetaMathQAToolEnv
from trl_ragen2_envs.searchqa import SearchQAToolEnv
from trl_ragen2_envs.sokoban import SokobanToolEnv
from trl_ragen2_envs.tool_adapter import ToolEnvAdapter
from trl_ragen2_envs.webshop import WebShopToolEnv


def trl_tools(adapter_class) -> set[str]:
    """The methods TRL 1.16's GRPOTrainer turns into tools: public functions of the class but reset/get_reward."""
    names = {name for name, _ in inspect.getmembers(adapter_class, predicate=inspect.isfunction)}
    assert {"reset", "get_reward"} <= names
    return {name for name in names - {"reset", "get_reward"} if not name.startswith("_")}


@pytest.mark.parametrize(
    "adapter_class, tools",
    [
        (SokobanToolEnv, {"move"}),
        (FrozenLakeToolEnv, {"move"}),
        (CountdownToolEnv, {"answer"}),
        (MetaMathQAToolEnv, {"answer"}),
        (WebShopToolEnv, {"search", "click"}),
        (SearchQAToolEnv, {"search", "finish"}),
        (DeepCoderToolEnv, {"submit"}),
    ],
)
def test_trl_sees_only_the_environment_tools(adapter_class, tools):
    assert issubclass(adapter_class, ToolEnvAdapter)
    assert trl_tools(adapter_class) == tools
    assert trl_tools(ToolEnvAdapter) == set()


@pytest.mark.parametrize("seed", ["3", 2.0, -1, True, [1]])
def test_reset_rejects_a_seed_that_is_not_a_non_negative_integer(seed):
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        CountdownToolEnv().reset(seed=seed)


def test_unknown_environment_keywords_are_named():
    with pytest.raises(TypeError, match=r"SokobanEnv does not take 'bogus', 'size' \(given in the row's env_config\)"):
        SokobanToolEnv().reset(seed=0, env_config='{"size": 4, "bogus": 1}')
    with pytest.raises(TypeError, match=r"SokobanEnv does not take 'size' \(given to SokobanToolEnv\(\)\)"):
        SokobanToolEnv(size=4)


def test_environment_is_rebuilt_only_when_its_keywords_change():
    tool_env = SokobanToolEnv()
    tool_env.reset(seed=0, env_config='{"render_mode": "grid"}')
    env = tool_env.env
    tool_env.reset(seed=1, env_config={"render_mode": "grid"})  # JSON text or dict: the same keywords
    assert tool_env.env is env
    tool_env.reset(seed=1)
    assert tool_env.env is not env and tool_env.env.render_mode == "grid_coord" and tool_env.env_config == {}


def test_constructor_keywords_apply_to_every_row_and_rows_override_them():
    tool_env = functools.partial(SokobanToolEnv, render_mode="grid", max_steps=7)()
    tool_env.reset(seed=0)
    assert (tool_env.env.render_mode, tool_env.env.max_steps) == ("grid", 7)
    tool_env.reset(seed=0, env_config='{"render_mode": "grid_coord"}')
    assert (tool_env.env.render_mode, tool_env.env.max_steps) == ("grid_coord", 7)


def test_calls_outside_an_episode_do_not_reach_the_environment():
    tool_env = CountdownToolEnv()
    assert tool_env.answer("1 + 2") == "No puzzle is loaded yet." and tool_env.env is None
    assert SokobanToolEnv().move("Up") == "Error: the environment has not been reset."
    tool_env.reset(seed=0)
    assert tool_env.answer("1") == "Your answer get 0 points."
    assert tool_env.answer("1") == "The puzzle is already answered; no further answers are scored."
    assert tool_env.get_reward() == 0.0
