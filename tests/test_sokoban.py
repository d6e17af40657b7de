"""Sokoban: rules and rewards on hand-made rooms, generation, the solver, rendering, fuzzed actions, TRL adapter."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.sokoban import SokobanEnv, SokobanToolEnv
from trl_ragen2_envs.sokoban.generation import SokobanRoom, generate_room, solve

from .tool_env_helpers import run_scripted_grpo_step


def load(text: str, **config) -> SokobanEnv:
    env = SokobanEnv(render_mode="grid", **config)
    env.load_room(SokobanRoom.from_text(text))
    return env


# ---------------------------------------------------------------------------------------------------------------
# Rules and rewards on fixed rooms


def test_walk_costs_a_step():
    env = load("#####\n#P__#\n#XO_#\n#####")
    observation, reward, done, info = env.step("Right")
    assert observation == "#####\n#_P_#\n#XO_#\n#####"
    assert reward == pytest.approx(-0.1)
    assert not done
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": True}


def test_box_onto_target_pays_one():
    # Two boxes, so putting one on its target does not finish the room.
    env = load("######\n#PXO_#\n#_X_O#\n######")
    observation, reward, done, info = env.step("Right")
    assert observation == "######\n#_P√_#\n#_X_O#\n######"
    assert reward == pytest.approx(-0.1 + 1.0)
    assert not done and not info["success"]


def test_box_off_target_costs_one():
    env = load("######\n#P√__#\n#_X_O#\n######")
    observation, reward, done, _ = env.step("Right")
    assert observation == "######\n#_SX_#\n#_X_O#\n######"  # the player now stands on the emptied target
    assert reward == pytest.approx(-0.1 - 1.0)
    assert not done


def test_push_into_wall_does_nothing_but_costs_the_step():
    env = load("#####\n#_PX#\n#O__#\n#####")
    before = env.room
    observation, reward, done, info = env.step("Right")
    assert env.room == before
    assert observation == "#####\n#_PX#\n#O__#\n#####"
    assert reward == pytest.approx(-0.1)
    assert info["action_is_valid"] and not info["action_is_effective"]
    assert env.num_steps == 1 and not done


def test_walk_into_wall_does_nothing():
    env = load("#####\n#_PX#\n#O__#\n#####")
    _, reward, _, info = env.step("Up")
    assert env.room.player == (1, 2)
    assert reward == pytest.approx(-0.1)
    assert not info["action_is_effective"]


def test_push_box_into_box_does_nothing():
    env = load("######\n#PXX_#\n#_OO_#\n######")
    before = env.room
    _, reward, _, info = env.step("Right")
    assert env.room == before
    assert reward == pytest.approx(-0.1)
    assert info["action_is_valid"] and not info["action_is_effective"]


def test_room_edge_without_wall_blocks_like_a_wall():
    env = load("PXO")  # no wall ring: off-grid cells behave as walls
    _, reward, _, info = env.step("Left")
    assert not info["action_is_effective"] and reward == pytest.approx(-0.1)
    assert env.step("Up")[3]["action_is_effective"] is False


def test_solving_pays_ten_and_ends_the_episode():
    env = load("######\n#PX_O#\n######")
    _, first, done, _ = env.step("Right")
    assert first == pytest.approx(-0.1) and not done
    observation, reward, done, info = env.step("Right")
    assert observation == "######\n#__P√#\n######"
    assert reward == pytest.approx(-0.1 + 1.0 + 10.0)
    assert done and info["success"]
    # After the end, moves are refused and change nothing.
    after, reward, done, info = env.step("Left")
    assert after == observation and reward == 0.0 and done
    assert not info["action_is_valid"] and info["success"]


def test_episode_ends_after_max_steps():
    env = load("######\n#P___#\n#X_O_#\n######", max_steps=3)
    results = [env.step("Right") for _ in range(3)]
    assert [done for _, _, done, _ in results] == [False, False, True]
    assert not results[-1][3]["success"]
    assert env.step("Left")[3]["action_is_valid"] is False


def test_actions_are_case_insensitive_and_stripped():
    for action in ["right", "RIGHT", "  Right\n", "\tright "]:
        env = load("#####\n#P__#\n#XO_#\n#####")
        assert env.step(action)[3]["action_is_effective"]


# ---------------------------------------------------------------------------------------------------------------
# Rendering


def test_room_text_round_trips_every_symbol():
    text = "#######\n#S_X√_#\n#__O_X#\n#######"
    room = SokobanRoom.from_text(text)
    assert room.player == (1, 1) and (1, 1) in room.targets
    assert room.boxes == {(1, 3), (1, 4), (2, 5)}
    assert room.targets == {(1, 1), (1, 4), (2, 3)}
    assert room.to_text() == text
    assert load(text).render() == text


def test_grid_coord_mode_lists_coordinates():
    env = SokobanEnv(render_mode="grid_coord")
    observation = env.load_room(SokobanRoom.from_text("######\n#PX_O#\n#_O_X#\n######"))
    assert observation.splitlines() == [
        "######",
        "#PX_O#",
        "#_O_X#",
        "######",
        "Board size: 4 rows x 6 columns",
        "Targets: (1, 4), (2, 2)",
        "Boxes: (1, 2), (2, 4)",
        "Player: (1, 1)",
    ]
    assert "(row, col)" in env.instructions and "(row, col)" not in SokobanEnv(render_mode="grid").instructions


def test_instructions_and_vocabulary():
    env = make_env("sokoban")
    assert env.action_vocabulary() == ["Up", "Down", "Left", "Right"]
    for symbol in ["#", "_", "O", "√", "X", "P", "S", "Up", "Down", "Left", "Right", "+10"]:
        assert symbol in env.instructions


@pytest.mark.parametrize(
    "text, message",
    [
        ("#P#\n#X", "same length"),
        ("#PX#", "as many boxes as targets"),
        ("#PXO#P", "exactly one player"),
        ("#PXQ#", "unknown room symbol"),
    ],
)
def test_bad_room_text_is_rejected(text, message):
    with pytest.raises(ValueError, match=message):
        SokobanRoom.from_text(text)


# ---------------------------------------------------------------------------------------------------------------
# Generation, determinism, solver


def test_same_seed_same_room_and_trajectory():
    first, second = SokobanEnv(), SokobanEnv()
    assert first.reset(seed=7) == second.reset(seed=7)
    for action in ["Up", "Left", "Down", "Right", "Right", "Up"]:
        assert first.step(action) == second.step(action)


def test_different_seeds_give_different_rooms():
    env = SokobanEnv(render_mode="grid")
    rooms = {env.reset(seed=seed) for seed in range(30)}
    assert len(rooms) >= 25


def test_reset_without_seed_continues_the_env_generator():
    env = SokobanEnv()
    env.seed_rng(3)
    assert env.reset() != env.reset()


def test_generated_rooms_are_solvable():
    env = SokobanEnv(render_mode="grid")
    for seed in range(200):
        env.reset(seed=seed)
        room = env.room
        assert len(room.boxes) == 1 and len(room.targets) == 1 and not room.is_solved
        # The wall ring is intact.
        ring = {(r, c) for r in range(6) for c in range(6) if r in (0, 5) or c in (0, 5)}
        assert ring <= room.walls
        moves = solve(room)
        assert moves, f"seed {seed}: generated room is not solvable\n{room.to_text()}"
        total = 0.0
        for move in moves:
            _, reward, done, info = env.step(move)
            total += reward
        assert done and info["success"]
        assert total == pytest.approx(-0.1 * len(moves) + 1.0 + 10.0)


@pytest.mark.parametrize("dim_room, num_boxes", [((7, 7), 2), ((8, 6), 1)])
def test_other_sizes_generate_solvable_rooms(dim_room, num_boxes):
    import numpy as np

    for seed in range(5):
        room = generate_room(dim_room, num_boxes, np.random.default_rng(seed))
        assert (room.height, room.width) == dim_room and len(room.boxes) == num_boxes
        assert solve(room)


def test_solver_finds_shortest_solution():
    assert solve(SokobanRoom.from_text("######\n#PX_O#\n######")) == ["Right", "Right"]
    # Walk around the box to push it left onto the target.
    assert solve(SokobanRoom.from_text("######\n#O_XP#\n#____#\n######")) == ["Left", "Left"]
    room = SokobanRoom.from_text("#####\n#O__#\n#_X_#\n#__P#\n#####")
    assert len(solve(room)) == 5  # Up, Left (push), Left... any shortest plan has 5 moves


def test_solver_answers_unsolvable_and_solved():
    assert solve(SokobanRoom.from_text("#####\n#X_P#\n#__O#\n#####")) is None  # box stuck in a corner
    assert solve(SokobanRoom.from_text("#####\n#√_P#\n#####")) == []


# ---------------------------------------------------------------------------------------------------------------
# Configuration errors


@pytest.mark.parametrize(
    "config, field",
    [
        ({"dim_room": (2, 6)}, "dim_room"),
        ({"dim_room": 6}, "dim_room"),
        ({"dim_room": (4, 4), "num_boxes": 3}, "dim_room"),
        ({"num_boxes": 0}, "num_boxes"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"search_depth": 0}, "search_depth"),
        ({"render_mode": "ascii"}, "render_mode"),
    ],
)
def test_bad_config_names_the_field(config, field):
    with pytest.raises(ValueError, match=field):
        SokobanEnv(**config)


def test_bad_seed_names_the_field():
    with pytest.raises(ValueError, match="seed"):
        SokobanEnv().reset(seed=-1)


# ---------------------------------------------------------------------------------------------------------------
# Untrusted actions never raise and change nothing

SPECIAL_ACTIONS = [
    "",
    " ",
    "Up || Down",
    "||||||||",
    "<answer>Up</answer>",
    "<think>go up</think><answer>Up</answer>",
    "Up" * 10,
    "x" * 1_000_000,
    " " * 100 + "Up",
    "Üp",
    "ＵＰ",
    "上",
    "\x00",
    "Up\x00",
    "None",
    "1",
]


@settings(max_examples=200, deadline=None)
@given(action=st.one_of(st.text(), st.sampled_from(SPECIAL_ACTIONS)))
def test_unusable_text_is_a_no_op(action):
    if action.strip().lower() in {"up", "down", "left", "right"} and len(action) <= 64:
        return  # a real move
    env = SokobanEnv()
    before = env.reset(seed=11)
    room = env.room
    observation, reward, done, info = env.step(action)
    assert (observation, reward, done) == (before, 0.0, False)
    assert info["action_is_valid"] is False and info["success"] is False
    assert env.room == room and env.num_steps == 0


@pytest.mark.parametrize("action", [None, 3, 2.5, b"Up", ["Up"], {"action": "Up"}])
def test_non_text_actions_are_no_ops(action):
    env = SokobanEnv()
    before = env.reset(seed=5)
    assert env.step(action) == (before, 0.0, False, env.step(action)[3])
    assert env.step(action)[3]["action_is_valid"] is False


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


def test_tool_schema():
    from transformers.utils import get_json_schema

    schema = get_json_schema(SokobanToolEnv().move)["function"]
    assert schema["name"] == "move"
    assert schema["parameters"]["required"] == ["direction"]
    assert schema["parameters"]["properties"]["direction"]["enum"] == ["Up", "Down", "Left", "Right"]


def test_tool_env_reset_move_and_reward():
    tool_env = SokobanToolEnv()
    config = json.dumps({"dim_room": [7, 7], "render_mode": "grid"})
    text = tool_env.reset(seed=3, env_config=config, prompt=[{"role": "user", "content": "hi"}], split="train")
    assert "`move`" in text and tool_env.env.dim_room == (7, 7)
    assert text.endswith(tool_env.env.render())
    moves = solve(tool_env.env.room)
    replies = [tool_env.move(direction) for direction in moves]
    assert "Reward: -0.1" in replies[0] or "Reward: 0.9" in replies[0]
    assert "solved" in replies[-1]
    assert tool_env.get_reward() == pytest.approx(-0.1 * len(moves) + 11.0)
    assert "over" in tool_env.move("Up")
    # The same row gives the same room; a new reset clears the return.
    assert tool_env.reset(seed=3, env_config=config).endswith(SokobanEnv(dim_room=(7, 7), render_mode="grid").reset(3))
    assert tool_env.get_reward() == 0.0


@pytest.mark.parametrize("direction", ["north", "", "x" * 10_000, None, 7, "Up || Down"])
def test_tool_returns_an_error_string_on_bad_input(direction):
    tool_env = SokobanToolEnv()
    tool_env.reset(seed=0)
    reply = tool_env.move(direction)
    assert reply.startswith("Error:") and len(reply) < 300
    assert tool_env.env.num_steps == 0 and tool_env.get_reward() == 0.0


def test_tool_env_rejects_bad_env_config():
    with pytest.raises(ValueError, match="env_config"):
        SokobanToolEnv().reset(seed=0, env_config="{not json")
    with pytest.raises(ValueError, match="num_boxes"):
        SokobanToolEnv().reset(seed=0, env_config='{"num_boxes": 0}')


def test_grpo_trainer_runs_the_tool(tiny_tokenizer, tiny_model, tmp_path):
    # Rollouts 0 and 1 move once; the "grid" rendering keeps the tool reply short.
    row = {"prompt": [{"role": "user", "content": "Play."}], "seed": 0, "env_config": '{"render_mode": "grid"}'}
    calls = [("move", {"direction": "Up"})] * 2
    trainer, logs = run_scripted_grpo_step(
        SokobanToolEnv, row, calls, tiny_model, tiny_tokenizer, tmp_path, max_completion_length=128
    )
    # Rollouts 0 and 1 called the tool once each; 2 and 3 never did.
    assert [env.env.num_steps for env in trainer.environments] == [1, 1, 0, 0]
    assert all(env.env.render_mode == "grid" for env in trainer.environments)  # env_config reached reset
    returns = [env.get_reward() for env in trainer.environments]
    assert returns[2:] == [0.0, 0.0] and all(r in (pytest.approx(-0.1), pytest.approx(0.9)) for r in returns[:2])
    assert logs["rewards/SokobanToolEnv/mean"] == pytest.approx(sum(returns) / 4)
    assert logs["tools/call_frequency"] == pytest.approx(0.5) and logs["tools/failure_frequency"] == 0.0
