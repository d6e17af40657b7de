"""WebShop environment: page transitions, pagination, RAGEN's action list, parser fuzzing, logs, the TRL adapter."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.webshop import MAX_TURNS, WebShopEnv, WebShopToolEnv, tool_dataset_rows
from trl_ragen2_envs.webshop.engine import parse_action
from trl_ragen2_envs.webshop.episode_log import read_episodes

from .tool_env_helpers import run_scripted_grpo_step
from .webshop_data import DATA_DIR, index_cache_dir, needs_data


pytestmark = needs_data


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return {"data_dir": str(DATA_DIR), "cache_dir": index_cache_dir(tmp_path_factory)}


@pytest.fixture
def env(config):
    return WebShopEnv(split="test", **config)


def buy_goal(env):
    """Search the goal product's title, open it, select the goal options, buy; returns the last step."""
    goal = env.goal
    env.step(f"search[{env.shop.by_asin[goal.asin].title}]")
    env.step(f"click[{goal.asin.lower()}]")
    for _, value in goal.goal_options:
        env.step(f"click[{value}]")
    return env.step("click[buy now]")


# ---------------------------------------------------------------------------------------------------------------
# Protocol and observations


def test_registry_builds_the_env_with_catalogue_name(config):
    env = make_env("webshop", split="validation", **config)
    assert isinstance(env, WebShopEnv) and env.catalog_name == "webshop-small-1k"
    assert env.max_turns == MAX_TURNS == 9 and env.action_vocabulary() is None
    assert "search[" in env.instructions and "click[" in env.instructions and "9 actions" in env.instructions


def test_reset_shows_the_search_page_and_is_deterministic(env):
    observation = env.reset(seed=3)
    instruction = env.goal.instruction_text
    assert (
        observation
        == f"WebShop [SEP] Instruction: [SEP] {instruction} [SEP] Search\nAvailable actions: search[<content>]"
    )
    assert env.available_actions() == ["search[<content>]"]
    assert env.reset(seed=3) == observation and env.reset(seed=503).startswith(observation.split("\n")[0])
    assert env.goal.goal_id == env.shop.goal_for("test", 3).goal_id
    assert env.reset(seed=4) != observation


def test_results_pages_paginate_and_drop_next_past_the_end(env):
    env.reset(seed=0)
    observation, reward, done, info = env.step("search[women]")
    assert (reward, done, info["action_is_valid"], info["page"]) == (0.0, False, True, "results")
    assert "Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP]" in observation
    results = env.shop.search("women")
    actions = env.available_actions()
    assert actions[:2] == ["click[back to search]", "click[next >]"]
    assert actions[2:] == [f"click[{asin.lower()}]" for asin in results[:10]]
    first = env.shop.by_asin[results[0]]
    assert f"Next > [SEP] {first.asin} [SEP] {first.title} [SEP] {first.price_text}" in observation
    for page in range(2, 6):
        observation, *_ = env.step("click[next >]")
        assert f"Page {page} (Total results: 50) [SEP] < Prev [SEP] Next > [SEP]" in observation
        assert env.available_actions()[3] == f"click[{results[(page - 1) * 10].lower()}]"
    observation, *_, info = env.step("click[next >]")  # page 6 holds nothing
    assert info["action_is_valid"] and env.available_actions() == ["click[back to search]", "click[< prev]"]
    assert env.step("click[next >]")[3]["action_is_valid"] is False
    env.step("click[< prev]")
    assert env.session.state.results_page == 5


def test_item_page_options_sub_pages_and_back_navigation(env):
    env.reset(seed=0)
    goal = env.goal
    product = env.shop.by_asin[goal.asin]
    env.step(f"search[{product.title}]")
    observation, *_, info = env.step(f"click[{goal.asin.lower()}]")
    assert info["page"] == "item" and f"[SEP] {product.title} [SEP] Price: {product.price_text} [SEP]" in observation
    assert observation.split("\n")[0].endswith(
        "Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    buttons = ["back to search", "< prev", "description", "features", "reviews", "buy now"]
    values = [v for vs in product.options.values() for v in vs]
    assert env.available_actions() == [f"click[{b}]" for b in buttons] + [f"click[{v}]" for v in dict.fromkeys(values)]
    name, value = goal.goal_options[0]
    env.step(f"click[{value}]")
    assert env.session.state.options == {name: value}
    observation, *_ = env.step("click[features]")
    assert observation.split("\n")[0] == " [SEP] ".join(
        ["Instruction:", goal.instruction_text, "Back to Search", "< Prev"]
        + [b.strip() for b in product.bullet_points if b.strip()]
    )
    assert env.available_actions() == ["click[back to search]", "click[< prev]"]
    env.step("click[< prev]")  # sub-page -> item, options kept
    assert env.session.state.page == "item" and env.session.state.options == {name: value}
    env.step("click[< prev]")  # item -> results, options cleared
    assert env.session.state.page == "results" and env.session.state.options == {}
    env.step("click[back to search]")
    assert env.session.state.page == "search" and env.available_actions() == ["search[<content>]"]


def test_buying_the_goal_succeeds_with_score_parts_in_info(env):
    env.reset(seed=0)
    observation, reward, done, info = buy_goal(env)
    assert done and reward == 1.0 and info["success"] is True and info["raw_reward"] == 1.0
    assert observation == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0"
    assert info["purchased_asin"] == env.goal.asin and info["purchased_options"] == env.goal.options_dict()
    for key in ("r_type", "attribute_hits", "option_hits", "price_ok", "query_match", "category_match", "title_score"):
        assert key in info
    observation, reward, done, info = env.step("click[buy now]")
    assert done and reward == 0.0 and info["action_is_valid"] is False


def test_raw_reward_mode_pays_partial_scores(config):
    env = WebShopEnv(split="test", binary_reward=False, **config)
    env.reset(seed=0)
    goal = env.goal
    env.step(f"search[{env.shop.by_asin[goal.asin].title}]")
    env.step(f"click[{goal.asin.lower()}]")
    _, reward, done, info = env.step("click[buy now]")  # no options selected
    assert done and 0.0 < reward < 1.0 and reward == pytest.approx(info["raw_reward"]) and not info["success"]
    assert info["option_hits"] == 0 and info["num_options"] == len(goal.goal_options)


def test_step_log_records_every_step(config, tmp_path):
    log = tmp_path / "steps.jsonl"
    env = WebShopEnv(split="test", log_path=str(log), **config)
    env.reset(seed=1)
    buy_goal(env)
    env.reset(seed=2)
    env.step("click[nothing]")
    episodes = read_episodes(log)
    assert len(episodes) == 2
    first, second = episodes.values()
    assert [r["step"] for r in first] == list(range(len(first))) and first[0]["action"] is None
    assert first[-1]["done"] and first[-1]["reward"] == 1.0 and first[-1]["info"]["success"]
    assert (
        {r["catalog"] for r in first} == {"webshop-small-1k"} and first[0]["split"] == "test" and first[0]["seed"] == 1
    )
    assert second[1]["info"]["action_is_valid"] is False and second[1]["observation"] == second[0]["observation"]


# ---------------------------------------------------------------------------------------------------------------
# Untrusted actions


def test_parse_action_follows_webshop_pattern():
    assert parse_action("click[Buy Now]") == ("click", "buy now")
    assert parse_action("  search[Red Shoes]  ") == ("search", "red shoes")
    assert parse_action("click[x] trailing") == ("click", "x")
    assert parse_action("search[a[b]c]") == ("search[a", "b]c")  # greedy, as in WebShop
    assert parse_action("click[]") is None and parse_action("buy now") is None


@pytest.mark.parametrize(
    "page_actions, action, reason",
    [
        ([], "click[buy now]", "not clickable"),
        (["search[shoes]"], "search[boots]", "no search box"),
        ([], "search[   ]", "empty"),
        ([], "jump[shoes]", "unknown action"),
        ([], "x" * 1001, "characters long"),
        (["search[shoes]"], "click[B000000000]", "not clickable"),
        ([], None, "must be text"),
    ],
)
def test_invalid_actions_are_reported_and_change_nothing(env, page_actions, action, reason):
    env.reset(seed=5)
    for page_action in page_actions:
        env.step(page_action)
    before_state, before_observation = env.session.state, env.render()
    observation, reward, done, info = env.step(action)
    assert (observation, reward, done) == (before_observation, 0.0, False)
    assert info["action_is_valid"] is False and reason in info["invalid_reason"] and env.session.state == before_state


SPECIAL_ACTIONS = ["", " ", "[]", "click[", "click[]]", "click[[next >]]", "click[NEXT >]", "search[\x00]", "click[ünïcödé]",
                   "search[" + "a" * 2000 + "]", "click[buy now] || click[next >]", "<answer>click[next >]</answer>"]  # fmt: skip


@pytest.fixture(scope="module")
def fuzz_env(config):
    return WebShopEnv(split="test", **config)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    page=st.sampled_from(["search", "results", "item", "features"]),
    action=st.one_of(
        st.text(max_size=60),
        st.sampled_from(SPECIAL_ACTIONS),
        st.builds(
            lambda verb, arg: f"{verb}[{arg}]",
            st.sampled_from(["click", "search", "Click", "buy"]),
            st.text(max_size=30),
        ),
    ),
)
def test_fuzzed_actions_never_raise_and_invalid_ones_change_nothing(fuzz_env, page, action):
    env = fuzz_env
    env.reset(seed=11)
    steps = {"search": [], "results": ["search[shoes]"], "item": ["search[shoes]", "click[{first}]"]}
    steps["features"] = steps["item"] + ["click[features]"]
    for step in steps[page]:
        env.step(step.format(first=env.shop.search("shoes")[0].lower()))
    before_state, before_observation = env.session.state, env.render()
    observation, reward, done, info = env.step(action)
    assert isinstance(observation, str) and isinstance(info["action_is_valid"], bool)
    if not info["action_is_valid"]:
        assert (observation, reward, done) == (before_observation, 0.0, False) and env.session.state == before_state
    else:
        assert parse_action(action) is not None


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


def test_tool_schemas():
    from transformers.utils import get_json_schema

    search_schema = get_json_schema(WebShopToolEnv.search)["function"]
    click_schema = get_json_schema(WebShopToolEnv.click)["function"]
    assert search_schema["name"] == "search" and search_schema["parameters"]["required"] == ["query"]
    assert click_schema["name"] == "click" and click_schema["parameters"]["properties"]["element"]["type"] == "string"


def test_tool_env_plays_an_episode(config):
    tool_env = WebShopToolEnv(cache_dir=config["cache_dir"])
    row = tool_dataset_rows(1, split="test", start_seed=7, data_dir=config["data_dir"])[0]
    text = tool_env.reset(**row)
    assert "`search`" in text and text.endswith(tool_env.env.render()) and tool_env.env.split == "test"
    goal = tool_env.env.goal
    assert "Total results" in tool_env.search(tool_env.env.shop.by_asin[goal.asin].title)
    assert tool_env.click(goal.asin.lower()).count("Buy Now") == 1
    for _, value in goal.goal_options:
        tool_env.click(value)
    assert "Thank you" in tool_env.click("buy now") and tool_env.get_reward() == 1.0
    assert tool_env.click("buy now").startswith("Error:")
    tool_env.reset(**row)
    assert tool_env.get_reward() == 0.0


def test_tool_env_errors_and_turn_budget(config):
    tool_env = WebShopToolEnv(max_turns=2, **config)
    tool_env.reset(seed=0)
    assert tool_env.click("buy now").startswith("Error: 'buy now' is not clickable")
    assert tool_env.search("x" * 5000).startswith("Error: the action is")
    assert tool_env.search("shoes").startswith("Error: no actions left") and tool_env.env.turn == 2
    with pytest.raises(ValueError, match="env_config"):
        WebShopToolEnv(**config).reset(seed=0, env_config="{not json")
    with pytest.raises(ValueError, match="split"):
        WebShopToolEnv(**config).reset(seed=0, env_config=json.dumps({"split": "dev"}))


def test_grpo_trainer_runs_the_tools(tiny_tokenizer, tiny_model, tmp_path, config):
    row = {**tool_dataset_rows(1, split="test", **config)[0], "seed": 0}  # one group: 4 rollouts of one goal
    calls = [("search", {"query": "zzqx"})] * 2  # matches nothing: a short results page
    trainer, logs = run_scripted_grpo_step(
        WebShopToolEnv, row, calls, tiny_model, tiny_tokenizer, tmp_path, max_completion_length=512
    )
    pages = [tool_env.env.session.state.page for tool_env in trainer.environments]
    assert pages == ["results", "results", "search", "search"]
    assert all(tool_env.env.catalog_name == "webshop-small-1k" for tool_env in trainer.environments)
    assert logs["rewards/WebShopToolEnv/mean"] == 0.0 and logs["tools/call_frequency"] == pytest.approx(0.5)
