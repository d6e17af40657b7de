"""FrozenLake: hole, goal and edge on fixed maps, slip statistics, gymnasium's transition table, generation,
rendering, fuzzed actions and the TRL adapter."""

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.frozen_lake import FrozenLakeEnv, FrozenLakeMap, FrozenLakeToolEnv, transition_probabilities

from .tool_env_helpers import run_scripted_grpo_step


def load(rows: list[str], **config) -> FrozenLakeEnv:
    env = FrozenLakeEnv(render_mode="grid", **config)
    env.load_map(FrozenLakeMap.from_rows(rows))
    return env


# ---------------------------------------------------------------------------------------------------------------
# Hole, goal, edge


def test_walk_on_ice():
    env = load(["SFF", "FHF", "FFG"])
    observation, reward, done, info = env.step("Right")
    assert observation == "_P_\n_O_\n__G"
    assert (reward, done) == (0.0, False)
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": True, "slipped": False}


def test_hole_ends_the_episode_without_reward():
    env = load(["SH", "FG"])
    observation, reward, done, info = env.step("Right")
    assert observation == "_X\n_G"
    assert (reward, done, info["success"]) == (0.0, True, False)
    after = env.step("Down")  # the episode is over: refused, nothing changes
    assert after[0] == observation and after[2] and not after[3]["action_is_valid"]


def test_goal_pays_one_and_ends_the_episode():
    env = load(["SG", "FF"])
    observation, reward, done, info = env.step("right")
    assert observation == "_√\n__"
    assert (reward, done, info["success"]) == (1.0, True, True)


def test_moving_off_the_edge_stays_in_place():
    env = load(["SF", "FG"])
    for action in ["Left", "Up"]:
        observation, reward, done, info = env.step(action)
        assert observation == "P_\n_G" and env.player == (0, 0)
        assert (reward, done) == (0.0, False)
        assert info["action_is_valid"] and not info["action_is_effective"]
    assert env.num_steps == 2


def test_episode_ends_after_max_steps():
    env = load(["SF", "FG"], max_steps=3)
    results = [env.step("Left") for _ in range(3)]
    assert [done for _, _, done, _ in results] == [False, False, True]
    assert not results[-1][3]["success"]


def test_grid_coord_mode_lists_coordinates():
    env = FrozenLakeEnv()
    observation = env.load_map(FrozenLakeMap.from_rows(["FFH", "SHF", "FFG"]))
    assert observation.splitlines() == [
        "__O",
        "PO_",
        "__G",
        "Board size: 3 rows x 3 columns",
        "Player: (1, 0)",
        "Goal: (2, 2)",
        "Holes: (0, 2), (1, 1)",
    ]
    assert "(row, col)" in env.instructions


def test_instructions_and_vocabulary():
    env = make_env("frozen_lake")
    assert env.action_vocabulary() == ["Left", "Down", "Right", "Up"]
    for symbol in ["P", "_", "O", "G", "X", "√", "Left", "Down", "Right", "Up", "+1"]:
        assert symbol in env.instructions
    assert "slippery" not in env.instructions  # success_rate=1.0: no slip to explain
    assert "0.98" in FrozenLakeEnv(success_rate=0.98).instructions


def test_map_rows_round_trip():
    rows = ["SFFF", "FHFH", "FFFH", "HFFG"]
    lake = FrozenLakeMap.from_rows(rows)
    assert lake.start == (0, 0) and lake.goal == (3, 3) and len(lake.holes) == 4
    assert lake.to_rows() == rows


@pytest.mark.parametrize("rows", [["SF", "FF"], ["SFF", "FG"], ["SQ", "FG"], ["SS", "FG"]])
def test_bad_map_rows_are_rejected(rows):
    with pytest.raises(ValueError):
        FrozenLakeMap.from_rows(rows)


# ---------------------------------------------------------------------------------------------------------------
# Slip


def empirical_outcomes(success_rate: float, rows: list[str], action: str, trials: int, seed: int = 0) -> Counter:
    env = FrozenLakeEnv(success_rate=success_rate, render_mode="grid")
    env.seed_rng(seed)
    lake = FrozenLakeMap.from_rows(rows)
    outcomes = Counter()
    for _ in range(trials):
        env.load_map(lake)
        env.step(action)
        outcomes[env.player] += 1
    return outcomes


OPEN_LAKE = ["FFFFF", "FFFFF", "FFSFF", "FFFFF", "FFFFG"]


@pytest.mark.parametrize("success_rate", [0.0, 0.6, 0.98, 1.0])
def test_slip_frequencies_match_success_rate(success_rate):
    trials = 6000
    outcomes = empirical_outcomes(success_rate, OPEN_LAKE, "Down", trials)
    side = (1 - success_rate) / 2
    # Down from the centre (2, 2); the perpendicular sides of Down are Left and Right. 4 sigma is at most 0.026.
    expected = {(3, 2): success_rate, (2, 1): side, (2, 3): side}
    assert set(outcomes) <= set(expected)
    for cell, probability in expected.items():
        assert outcomes[cell] / trials == pytest.approx(probability, abs=0.026)
    if success_rate == 1.0:
        assert outcomes == {(3, 2): trials}


def test_slip_at_an_edge_merges_outcomes_like_the_transition_table():
    rows = ["SFF", "FFF", "FFG"]
    trials = 6000
    outcomes = empirical_outcomes(0.5, rows, "Up", trials, seed=1)  # Up from (0, 0): stays, or slides left/right
    table = transition_probabilities(FrozenLakeMap.from_rows(rows), (0, 0), 3, 0.5)
    assert table == pytest.approx({(0, 0): 0.75, (0, 1): 0.25})
    assert set(outcomes) == set(table)
    for cell, probability in table.items():
        assert outcomes[cell] / trials == pytest.approx(probability, abs=0.03)


@pytest.mark.parametrize("success_rate", [1.0, 0.98, 0.8, 0.5, 0.0])
def test_transition_table_matches_gymnasium(success_rate):
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymnasiumFrozenLake

    env = FrozenLakeEnv()
    for seed in range(6):
        env.reset(seed=seed)
        lake = env.lake
        reference = GymnasiumFrozenLake(desc=lake.to_rows(), is_slippery=True, success_rate=success_rate)
        size = lake.size
        for state in range(size * size):
            cell = divmod(state, size)
            if cell in lake.holes or cell == lake.goal:
                continue  # terminal: never stepped from
            for action in range(4):
                theirs = Counter()
                for probability, next_state, reward, terminated in reference.P[state][action]:
                    if probability > 0:
                        theirs[(next_state, float(reward), bool(terminated))] += probability
                ours = {
                    (r * size + c, 1.0 if (r, c) == lake.goal else 0.0, (r, c) in lake.holes or (r, c) == lake.goal): p
                    for (r, c), p in transition_probabilities(lake, cell, action, success_rate).items()
                }
                assert ours == pytest.approx(dict(theirs)), (seed, cell, action)


# ---------------------------------------------------------------------------------------------------------------
# Generation and determinism


def reachable(lake: FrozenLakeMap) -> bool:
    frontier, seen = [lake.start], {lake.start}
    while frontier:
        r, c = frontier.pop()
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            nxt = (nr, nc)
            if 0 <= nr < lake.size and 0 <= nc < lake.size and nxt not in lake.holes and nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return lake.goal in seen


def test_generated_maps_have_a_path_and_distinct_start_and_goal():
    env = FrozenLakeEnv(p=0.7)  # many holes, so redraws happen
    starts, goals = set(), set()
    for seed in range(200):
        env.reset(seed=seed)
        lake = env.lake
        assert lake.start != lake.goal and reachable(lake)
        assert env.player == lake.start
        starts.add(lake.start)
        goals.add(lake.goal)
    assert len(starts) == 16 and len(goals) == 16  # start and goal are anywhere, not pinned to corners


def test_frozen_probability_sets_hole_density():
    holes = []
    env = FrozenLakeEnv(size=8, p=0.9)
    for seed in range(100):
        env.reset(seed=seed)
        holes.append(len(env.lake.holes))
    assert np.mean(holes) / 62 == pytest.approx(0.1, abs=0.02)  # 62 cells besides start and goal
    env = FrozenLakeEnv(p=1.0)
    env.reset(seed=0)
    assert not env.lake.holes


def test_same_seed_same_map_and_slippery_trajectory():
    first, second = FrozenLakeEnv(success_rate=0.5), FrozenLakeEnv(success_rate=0.5)
    assert first.reset(seed=4) == second.reset(seed=4)
    for action in ["Left", "Down", "Right", "Up"] * 10:
        result = first.step(action)
        assert result == second.step(action)
        if result[2]:
            break
    slips = set()
    for seed in range(20):  # the slips themselves depend on the seed
        env = FrozenLakeEnv(success_rate=0.5, p=1.0, size=6)
        env.reset(seed=seed)
        slips.add(tuple(env.step("Down")[3]["slipped"] for _ in range(3)))
    assert len(slips) > 3


def test_different_seeds_give_different_maps():
    env = FrozenLakeEnv()
    assert len({env.reset(seed=seed) for seed in range(30)}) >= 25


# ---------------------------------------------------------------------------------------------------------------
# Configuration errors


@pytest.mark.parametrize(
    "config, field",
    [
        ({"size": 1}, "size"),
        ({"size": 4.0}, "size"),
        ({"p": 0.0}, "p must"),
        ({"p": 1.5}, "p must"),
        ({"success_rate": -0.1}, "success_rate"),
        ({"success_rate": "high"}, "success_rate"),
        ({"max_steps": 0}, "max_steps"),
        ({"render_mode": "image"}, "render_mode"),
    ],
)
def test_bad_config_names_the_field(config, field):
    with pytest.raises(ValueError, match=field):
        FrozenLakeEnv(**config)


# ---------------------------------------------------------------------------------------------------------------
# Untrusted actions never raise and change nothing

SPECIAL_ACTIONS = ["", "Left || Down", "||||", "<answer>Left</answer>", "x" * 1_000_000, "Ｌｅｆｔ", "左", "\x00", "0"]


@settings(max_examples=200, deadline=None)
@given(action=st.one_of(st.text(), st.sampled_from(SPECIAL_ACTIONS)))
def test_unusable_text_is_a_no_op(action):
    if action.strip().lower() in {"left", "down", "right", "up"} and len(action) <= 64:
        return  # a real move
    env = FrozenLakeEnv(success_rate=0.5)
    before = env.reset(seed=2)
    observation, reward, done, info = env.step(action)
    assert (observation, reward, done) == (before, 0.0, False)
    assert info["action_is_valid"] is False and info["success"] is False
    assert env.player == env.lake.start and env.num_steps == 0


@pytest.mark.parametrize("action", [None, 1, b"Left", ["Left"]])
def test_non_text_actions_are_no_ops(action):
    env = FrozenLakeEnv()
    before = env.reset(seed=5)
    observation, reward, done, info = env.step(action)
    assert (observation, reward, done, info["action_is_valid"]) == (before, 0.0, False, False)


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


def test_tool_schema():
    from transformers.utils import get_json_schema

    schema = get_json_schema(FrozenLakeToolEnv().move)["function"]
    assert schema["name"] == "move"
    assert schema["parameters"]["properties"]["direction"]["enum"] == ["Left", "Down", "Right", "Up"]


def test_tool_env_reaches_the_goal():
    tool_env = FrozenLakeToolEnv()
    # A fixed map through the env (seeded resets draw random maps): walk right twice to the goal.
    tool_env.reset(seed=0, env_config=json.dumps({"render_mode": "grid"}), prompt="ignored")
    tool_env.env.load_map(FrozenLakeMap.from_rows(["SFG", "FFF", "FFF"]))
    assert tool_env.move("Right").endswith("Reward: 0")
    reply = tool_env.move("right")
    assert reply.startswith("__√") and "goal" in reply
    assert tool_env.get_reward() == 1.0
    assert "over" in tool_env.move("Left")


def test_tool_env_reports_a_fall():
    tool_env = FrozenLakeToolEnv()
    tool_env.reset(seed=0)
    tool_env.env.load_map(FrozenLakeMap.from_rows(["SH", "FG"]))
    assert "hole" in tool_env.move("Right") and tool_env.get_reward() == 0.0


def test_tool_env_uses_seed_and_env_config():
    tool_env = FrozenLakeToolEnv()
    config = json.dumps({"size": 6, "success_rate": 0.5})
    text = tool_env.reset(seed=9, env_config=config)
    assert tool_env.env.size == 6 and tool_env.env.success_rate == 0.5
    assert text.endswith(FrozenLakeEnv(size=6, success_rate=0.5).reset(seed=9))
    assert "slippery" in text


@pytest.mark.parametrize("direction", ["north", "", "x" * 10_000, None, 7])
def test_tool_returns_an_error_string_on_bad_input(direction):
    tool_env = FrozenLakeToolEnv()
    tool_env.reset(seed=0)
    reply = tool_env.move(direction)
    assert reply.startswith("Error:") and len(reply) < 300
    assert tool_env.env.num_steps == 0


def test_grpo_trainer_runs_the_tool(tiny_tokenizer, tiny_model, tmp_path):
    # Rollouts 0 and 1 move once: on map 8 the goal lies just above the start.
    row = {"prompt": [{"role": "user", "content": "Play."}], "seed": 8, "env_config": '{"render_mode": "grid"}'}
    calls = [("move", {"direction": "Up"})] * 2
    trainer, logs = run_scripted_grpo_step(
        FrozenLakeToolEnv, row, calls, tiny_model, tiny_tokenizer, tmp_path, max_completion_length=128
    )
    # Rollouts 0 and 1 called the tool once each; 2 and 3 never did.
    assert [env.env.num_steps for env in trainer.environments] == [1, 1, 0, 0]
    assert all(env.env.render_mode == "grid" for env in trainer.environments)  # env_config reached reset
    returns = [env.get_reward() for env in trainer.environments]
    assert returns == [1.0, 1.0, 0.0, 0.0]
    assert logs["rewards/FrozenLakeToolEnv/mean"] == pytest.approx(sum(returns) / 4)
    assert logs["tools/call_frequency"] == pytest.approx(0.5) and logs["tools/failure_frequency"] == 0.0
