"""Arbitrary text, lone surrogates included, sent to every environment's `step` and every TRL tool.

Model output is untrusted: whatever the text, `step` returns `(str, finite float, bool, dict)` with `success` and
`action_is_valid`, a rejected action pays 0 and leaves the observation unchanged, and nothing raises. WebShop runs
with `log_path`, so every action is also written to its episode log; SearchQA also runs against the HTTP server, and
under RAGEN's rules too, where text that is not a valid action is still used: read as the final answer, or (empty
text) a step with RAGEN's invalid-action observation.
"""

from __future__ import annotations

import inspect
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.countdown import CountdownToolEnv
from trl_ragen2_envs.frozen_lake import FrozenLakeToolEnv
from trl_ragen2_envs.metamathqa import MetaMathQAToolEnv
from trl_ragen2_envs.searchqa import SearchQAToolEnv
from trl_ragen2_envs.sokoban import SokobanToolEnv


# Any code point, lone surrogates (category Cs) included: st.text() leaves those out, even from a union alphabet,
# so strings are joined from characters (test_fuzzed_actions_hold_lone_surrogates checks that they occur).
ANY_CHARACTER = st.characters() | st.characters(categories=["Cs"])
ANY_TEXT = st.lists(ANY_CHARACTER, max_size=80).map("".join)
VERBS = ["search", "click", "finish", "answer", "Up", "left", "buy now", "<answer>", "</answer>", "||"]
# Text shaped like actions, so fuzzing reaches the parsers' inner paths, not only their rejections.
ACTION_LIKE = st.builds(
    lambda verb, argument, tail: f"{verb}[{argument}]{tail}", st.sampled_from(VERBS), ANY_TEXT, ANY_TEXT
)
ACTIONS = st.lists(ANY_TEXT | ACTION_LIKE | st.sampled_from(VERBS), min_size=1, max_size=6)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_fuzzed_actions_hold_lone_surrogates():
    draws = []

    @settings(max_examples=100, deadline=None, database=None)
    @given(actions=ACTIONS)
    def record(actions):
        draws.append(any(0xD800 <= ord(char) <= 0xDFFF for action in actions for char in action))

    record()
    assert sum(draws) > len(draws) / 2


def assert_contained(env, actions):
    for action in actions:
        before = env.render()
        observation, reward, done, info = env.step(action)
        assert isinstance(observation, str) and isinstance(done, bool)
        assert isinstance(reward, float) and math.isfinite(reward)
        assert {"success", "action_is_valid"} <= info.keys()
        if info.get("action_type") == "fallback":  # SearchQA, RAGEN's rules: read as the final answer
            assert not info["action_is_valid"] and done and 0.0 <= reward <= 1.0
        elif info.get("action_type") == "invalid":  # SearchQA, RAGEN's rules: empty text uses a step, pays nothing
            assert not info["action_is_valid"] and reward == 0.0 and observation.startswith("Invalid action.")
        elif not info["action_is_valid"]:
            assert reward == 0.0 and observation == before
        json.dumps(info, default=str)  # info stays plain data


@pytest.fixture(scope="module")
def webshop_kwargs(tmp_path_factory):
    from .webshop_data import index_cache_dir

    return {"procedural": True, "procedural_products": 300, "cache_dir": index_cache_dir(tmp_path_factory)}


@pytest.fixture(scope="module")
def retrieval_url():
    from trl_ragen2_envs.searchqa import BM25Retriever, RetrievalServer, build_world

    with RetrievalServer(BM25Retriever(build_world(0).passages)) as server:
        yield server.url


ENV_CONFIGS = {  # test id: (environment, keywords)
    "sokoban": ("sokoban", {}),
    "frozen_lake": ("frozen_lake", {}),
    "countdown": ("countdown", {}),
    "metamathqa": ("metamathqa", {}),
    "searchqa": ("searchqa", {"max_steps": 4}),
    "searchqa-ragen-rules": ("searchqa", {"max_steps": 4, "rules": "ragen"}),
}


@pytest.mark.parametrize("config", sorted(ENV_CONFIGS))
@FUZZ
@given(actions=ACTIONS, seed=st.integers(0, 50))
def test_any_text_is_contained(config, actions, seed):
    name, kwargs = ENV_CONFIGS[config]
    env = make_env(name, **kwargs)
    env.reset(seed)
    assert_contained(env, actions)


@FUZZ
@given(actions=ACTIONS)
def test_any_text_is_contained_by_metamathqa_with_math_verify(actions):
    pytest.importorskip("math_verify")
    env = make_env(
        "metamathqa", reward_rule="lenient", use_math_verify=True, math_verify_timeout_s=0.5, max_attempts=6
    )
    env.reset(0)
    assert_contained(env, actions)


@pytest.mark.parametrize("rules", ["trl_ragen2", "ragen"])
@FUZZ
@given(actions=ACTIONS)
def test_any_text_is_contained_by_searchqa_over_http(retrieval_url, rules, actions):
    env = make_env("searchqa", rules=rules, retriever_url=retrieval_url, retriever_retries=0, max_steps=4)
    env.reset(1)
    assert_contained(env, actions)
    for action in actions:
        env.reset(1)  # a search that runs (RAGEN's rules end the episode on most text)
        assert "env_error" not in env.step(f"search[{action}]")[3]  # the server answers any query


@FUZZ
@given(actions=ACTIONS, seed=st.integers(0, 50))
def test_any_text_is_contained_by_webshop_with_a_log(webshop_kwargs, tmp_path_factory, actions, seed):
    log = tmp_path_factory.mktemp("fuzz") / "steps.jsonl"
    env = make_env("webshop", split="test", log_path=str(log), **webshop_kwargs)
    env.reset(seed)
    assert_contained(env, [*actions, *(f"search[{a}]" for a in actions)])
    lines = log.read_bytes().splitlines()
    assert len(lines) == 1 + 2 * len(actions)
    assert all(isinstance(json.loads(line), dict) for line in lines)  # UTF-8 JSON whatever the action


class SearchQARagenRulesToolEnv(SearchQAToolEnv):
    """SearchQA's TRL tools under RAGEN's rules."""

    def __init__(self, **env_config):
        super().__init__(rules="ragen", **env_config)


TOOL_ENVS = [
    SokobanToolEnv,
    FrozenLakeToolEnv,
    CountdownToolEnv,
    MetaMathQAToolEnv,
    SearchQAToolEnv,
    SearchQARagenRulesToolEnv,
]


def tools_of(adapter_class) -> list[str]:
    names = {name for name, _ in inspect.getmembers(adapter_class, predicate=inspect.isfunction)}
    return sorted(name for name in names - {"reset", "get_reward"} if not name.startswith("_"))


@pytest.mark.parametrize("adapter_class", TOOL_ENVS, ids=lambda cls: cls.__name__)
@FUZZ
@given(calls=st.lists(ANY_TEXT | ACTION_LIKE, min_size=1, max_size=6), seed=st.integers(0, 50))
def test_any_text_is_contained_by_the_trl_tools(adapter_class, calls, seed):
    tool_env = adapter_class()
    tool_env.reset(seed=seed)
    tools = tools_of(adapter_class)
    for index, text in enumerate(calls):
        reply = getattr(tool_env, tools[index % len(tools)])(text)
        assert isinstance(reply, str)
    assert math.isfinite(tool_env.get_reward())


@FUZZ
@given(calls=st.lists(ANY_TEXT | ACTION_LIKE, min_size=1, max_size=6))
def test_any_text_is_contained_by_the_webshop_tools(webshop_kwargs, tmp_path_factory, calls):
    from trl_ragen2_envs.webshop import WebShopToolEnv

    log = tmp_path_factory.mktemp("fuzz-tools") / "steps.jsonl"
    tool_env = WebShopToolEnv(split="test", log_path=str(log), **webshop_kwargs)
    tool_env.reset(seed=2)
    for index, text in enumerate(calls):
        assert isinstance((tool_env.search, tool_env.click)[index % 2](text), str)
    assert math.isfinite(tool_env.get_reward())
