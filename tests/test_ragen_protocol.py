"""`RolloutConfig(protocol="ragen")` against RAGEN's EnvStateManager and ContextManager rules, worked out by hand.

Every expected string and number below follows from RAGEN's code (read, not run here):

- user turn: "\\nTurn {t}:\\nState:\\n{state}\\n{warning}You have {k} actions left. Always output: <think> [Your
  thoughts] </think> <answer> [your answer] </answer> with no extra text. Strictly follow this format. Max response
  length: {n} words (tokens).\\n", after turn 1 preceded by "Reward:\\n{r}\\n";
- r = str(0 + r_1 + ... + r_k) over the actions that ran, in the environment's number types;
- the warning line appears after a turn in which no parsed action was in the action table;
- the penalty (-0.1, once) applies when a parsed action is not in the table, or none is, before the valid ones are
  cut to the actions left and run until the episode ends;
- the return is (sum of the turns' rewards) + (sum of the penalties).

The scripted replies run through the real rollout engine on fixed rooms.
"""

import pytest

import trl_ragen2.agents.rollout as rollout_module
from trl_ragen2.agents.generation import ScriptedPolicy
from trl_ragen2.agents.rollout import EpisodeSpec, RolloutConfig, RolloutEngine
from trl_ragen2_envs import make_env
from trl_ragen2_envs.datasets import build_rows
from trl_ragen2_envs.frozen_lake import FrozenLakeMap
from trl_ragen2_envs.prompts import parse_response, system_prompt, turn_prompt
from trl_ragen2_envs.sokoban import SokobanRoom


FORMAT = (
    "Always output: <think> [Your thoughts] </think> <answer> [your answer] </answer> with no extra text. "
    "Strictly follow this format. Max response length: 120 words (tokens)."
)
WARNING = "No valid action provided previously. Environment state remains the same. Please try again.\n"

# make_env("sokoban").reset(seed=0): the box at (2, 3), its target at (4, 1), the player at (1, 4)
SEED0_GRID = "######\n##__P#\n###X_#\n###__#\n#O___#\n######"
SEED0_STATE = (
    "Coordinates: \nBoard size: 6 rows x 6 cols (zero-indexed).\nTargets: (4, 1)\nBoxes: (2, 3)\nPlayer: (1, 4)\n"
    "Grid Map: \n" + SEED0_GRID
)
# after Down: the player at (2, 4), next to the box
SEED0_DOWN_STATE = (
    "Coordinates: \nBoard size: 6 rows x 6 cols (zero-indexed).\nTargets: (4, 1)\nBoxes: (2, 3)\nPlayer: (2, 4)\n"
    "Grid Map: \n######\n##___#\n###XP#\n###__#\n#O___#\n######"
)
# One push solves this room: Right moves the box onto the target (-0.1 + 1 + 10 = 10.9).
ONE_PUSH_ROOM = "#####\n#PXO#\n#####"
# Two boxes, one already on a target: Right pushes it onto the other target, Up walks into the wall.
TWO_TARGETS_ROOM = "######\n#P√O_#\n#X___#\n######"
LAKE = ["SFFF", "FHFH", "FFFH", "HFFG"]


def replies_policy(replies):
    """Turn t (0-based) gets replies[t]; the last reply repeats."""
    return lambda episode: replies[min(episode.turns, len(replies) - 1)]


@pytest.fixture
def fixed_rooms(monkeypatch):
    """Make the rollout's Sokoban and FrozenLake episodes start on given rooms (by env name) whatever the seed."""
    rooms = {}

    def make(name, **config):
        env = make_env(name, **config)
        if name in rooms:
            start = rooms[name]
            load = env.load_room if name == "sokoban" else env.load_map
            env.reset = lambda seed=None: load(start)
        return env

    monkeypatch.setattr(rollout_module, "make_env", make)
    return rooms


def play(tokenizer, replies, env="sokoban", protocol="ragen", seed=0, **config):
    engine = RolloutEngine(tokenizer, RolloutConfig(protocol=protocol, **config))
    (episode,) = engine.run([EpisodeSpec(env, seed)], ScriptedPolicy(replies_policy(replies), tokenizer))
    return episode


def user_turns(episode):
    return [message["content"] for message in episode.messages if message["role"] == "user"]


def test_seed_zero_room_is_the_one_worked_out_here():
    assert make_env("sokoban", render_mode="grid").reset(seed=0) == SEED0_GRID


# ---------------------------------------------------------------------------------------------------------------
# User turns


def test_first_and_later_user_turns_to_the_character(tiny_tokenizer):
    # Down walks (-0.1); Left pushes the box against the wall at (2, 2): nothing moves, still -0.1.
    episode = play(tiny_tokenizer, ["go</think><answer>Down || Left</answer>"], max_turns=2)
    first, second = user_turns(episode)
    assert first == f"\nTurn 1:\nState:\n{SEED0_STATE}\nYou have 10 actions left. {FORMAT}\n"
    assert second == f"Reward:\n-0.2\n\nTurn 2:\nState:\n{SEED0_DOWN_STATE}\nYou have 8 actions left. {FORMAT}\n"


def test_the_first_user_turn_ends_the_prompt_ids_with_its_newline(tiny_tokenizer):
    episode = play(tiny_tokenizer, ["go</think><answer>Down</answer>"], max_turns=1)
    text = tiny_tokenizer.decode(episode.prompt_ids)
    assert text.endswith(f"Player: (1, 4)\nGrid Map: \n{SEED0_GRID}\nYou have 10 actions left. {FORMAT}\n"
                         "<|im_end|>\n<|im_start|>assistant\n<think>")  # fmt: skip


def test_rows_show_the_prompt_the_rollout_renders(tiny_tokenizer):
    (row,) = build_rows("sokoban", "train", 1, protocol="ragen")
    episode = play(tiny_tokenizer, ["go</think><answer>Down</answer>"], seed=row["seed"], max_turns=1)
    assert row["prompt"] == episode.messages[:2]
    (default_row,) = build_rows("sokoban", "train", 1)
    assert default_row["prompt"][1]["content"] != row["prompt"][1]["content"]


# (replies of turns 1 and 2, the "Reward:" number in turn 2's message, the warning in turn 2's message)
FEEDBACK_CASES = [
    (["x</think><answer>Up</answer>"], "-0.1", False),  # one move into the wall: 0 + (-0.1)
    (["x</think><answer>Up || Up</answer>"], "-0.2", False),  # 0 + (-0.1) + (-0.1)
    (["no tags at all"], "0", True),  # nothing ran: RAGEN's int 0
    (["x</think><answer>Jump || Fly</answer>"], "0", True),  # parsed, but no action is in the table
    (["x</think><answer></answer>"], "0", True),  # an empty answer
    (["x</think><answer>Jump || Up</answer>"], "-0.1", False),  # one valid action ran: no warning
    (["x</think><answer>uP</answer>"], "-0.1", False),  # the table is case-insensitive
]


@pytest.mark.parametrize(("replies", "number", "warned"), FEEDBACK_CASES)
def test_feedback_number_and_warning(tiny_tokenizer, replies, number, warned):
    episode = play(tiny_tokenizer, replies, max_turns=2)
    second = user_turns(episode)[1]
    assert second.startswith(f"Reward:\n{number}\n\nTurn 2:\nState:\n")
    assert (WARNING in second) is warned
    if warned:
        assert f"{SEED0_GRID}\n{WARNING}You have 10 actions left." in second


def test_warning_follows_only_the_turn_without_a_valid_action(tiny_tokenizer):
    episode = play(tiny_tokenizer, ["nothing", "x</think><answer>Up</answer>"], max_turns=3)
    second, third = user_turns(episode)[1:]
    assert WARNING in second and WARNING not in third


def test_int_rewards_of_frozen_lake_show_as_ints(tiny_tokenizer, fixed_rooms):
    fixed_rooms["frozen_lake"] = FrozenLakeMap.from_rows(LAKE)
    # Down, Down: (0, 0) -> (1, 0) -> (2, 0), two int 0 rewards: "0", not "0.0"
    episode = play(tiny_tokenizer, ["x</think><answer>Down || Down</answer>"], env="frozen_lake", max_turns=2)
    assert user_turns(episode)[1].startswith("Reward:\n0\n\nTurn 2:\n")


def test_a_push_from_target_to_target_costs_the_step_alone(tiny_tokenizer, fixed_rooms):
    fixed_rooms["sokoban"] = SokobanRoom.from_text(TWO_TARGETS_ROOM)
    # Right: the box moves from one target onto the other, the count on targets stays 1: -0.1 (gym-sokoban counts
    # boxes on targets, it does not add -1 and +1). Up walks into the wall: -0.1.
    episode = play(tiny_tokenizer, ["x</think><answer>Right || Up</answer>"], max_turns=2)
    assert user_turns(episode)[1].startswith("Reward:\n-0.2\n")


def test_a_push_off_a_target_then_a_move_prints_the_float_sum(tiny_tokenizer, fixed_rooms):
    # Right pushes the box off its target (-0.1 - 1 = -1.1), Down walks (-0.1): 0 + (-1.1) + (-0.1) is
    # -1.2000000000000002 in binary floating point, which is what RAGEN shows.
    fixed_rooms["sokoban"] = SokobanRoom.from_text("#######\n#P√__O#\n#X____#\n#######")
    episode = play(tiny_tokenizer, ["x</think><answer>Right || Down</answer>"], max_turns=2)
    assert user_turns(episode)[1].startswith("Reward:\n-1.2000000000000002\n")
    default = play(tiny_tokenizer, ["x</think><answer>Right || Down</answer>"], protocol="trl_ragen2", max_turns=2)
    assert user_turns(default)[1].startswith("Reward:\n-1.2\n")


# ---------------------------------------------------------------------------------------------------------------
# Penalties

# (room, actions per episode, reply, the turn's reward, actions left after it, the player's cell or "solved"),
# with protocol="ragen"; the room is make_env("sokoban").reset(seed=0) unless given (player at (1, 4))
PENALTY_CASES = [
    # the action that solves the room comes first: Jump is still checked, so the turn is penalised
    pytest.param(ONE_PUSH_ROOM, 10, "Right || Jump", 10.8, 9, "solved", id="invalid-after-the-end"),
    pytest.param(ONE_PUSH_ROOM, 10, "Right || Left", 10.9, 9, "solved", id="valid-after-the-end"),
    # with 1 action left every parsed action is checked first, then the valid ones are cut to 1
    pytest.param(None, 1, "Jump || Down", -0.2, 0, (2, 4), id="one-left-invalid-first"),
    pytest.param(None, 1, "Down || Jump", -0.2, 0, (2, 4), id="one-left-invalid-second"),
    pytest.param(None, 1, "Down || Up", -0.1, 0, (2, 4), id="one-left-both-valid"),
    # more actions than max_actions_per_turn: the third is dropped before the check
    pytest.param(None, 10, "Down || Up || Jump", -0.2, 8, (1, 4), id="third-action-dropped-unchecked"),
    pytest.param(None, 10, "Jump", -0.1, 10, (1, 4), id="nothing-valid"),
]


@pytest.mark.parametrize(("room", "budget", "reply", "reward", "left", "where"), PENALTY_CASES)
def test_penalties(tiny_tokenizer, fixed_rooms, room, budget, reply, reward, left, where):
    if room is not None:
        fixed_rooms["sokoban"] = SokobanRoom.from_text(room)
    episode = play(tiny_tokenizer, [f"x</think><answer>{reply}</answer>"], max_turns=1, max_actions_per_episode=budget)
    assert episode.turn_rewards == [reward] and episode.total_return == reward
    assert episode.actions_left == left
    if where == "solved":
        assert episode.success and episode.env.is_done
    else:
        assert episode.env.room.player == where


def test_default_protocol_differs_on_exactly_those_cases(tiny_tokenizer, fixed_rooms):
    """The library's default: actions after the end go unchecked, and the answer is cut to the actions left
    before the check."""
    fixed_rooms["sokoban"] = SokobanRoom.from_text(ONE_PUSH_ROOM)
    after_end = play(tiny_tokenizer, ["x</think><answer>Right || Jump</answer>"], protocol="trl_ragen2", max_turns=1)
    assert after_end.turn_rewards == [pytest.approx(10.9)]
    del fixed_rooms["sokoban"]
    one_left = play(tiny_tokenizer, ["x</think><answer>Jump || Down</answer>"], protocol="trl_ragen2",
                    max_turns=1, max_actions_per_episode=1)  # fmt: skip
    assert one_left.turn_rewards == [pytest.approx(-0.1)] and one_left.env.room.player == (1, 4)  # Down never ran


def test_return_sums_rewards_and_penalties_apart(tiny_tokenizer):
    # Rewards -0.2, -0.2, -0.1 and one penalty: RAGEN computes (-0.2 + -0.2 + -0.1) + (-0.1) = -0.6 exactly;
    # summing turn by turn (-0.2, -0.2, -0.2) gives -0.6000000000000001.
    replies = ["x</think><answer>Up || Up</answer>"] * 2 + ["x</think><answer>Up || Jump</answer>"]
    episode = play(tiny_tokenizer, replies, max_turns=3)
    assert episode.total_return == -0.6
    assert play(tiny_tokenizer, replies, protocol="trl_ragen2", max_turns=3).total_return == -0.6000000000000001


FREE_FORM_CASES = [
    ("webshop", {"procedural": True, "procedural_products": 50, "max_turns": 2}, "click[no such button]", 9),
    ("searchqa", {}, "I would rather not say", 10),  # neither search[...] nor finish[...]
    ("deepcoder", {}, "```python\n```", 1),  # an empty code block
]


@pytest.mark.parametrize(("env", "config", "action", "budget"), FREE_FORM_CASES)
def test_free_form_environments_accept_every_action(tiny_tokenizer, env, config, action, budget):
    """RAGEN has no action table for free-form environments: an action the environment rejects is not penalised
    and uses one action of the budget."""
    reply = [f"x</think><answer>{action}</answer>"]
    results = {}
    for protocol in ("ragen", "trl_ragen2"):
        engine = RolloutEngine(tiny_tokenizer, RolloutConfig(protocol=protocol, max_turns=1, max_actions_per_turn=1))
        (episode,) = engine.run([EpisodeSpec(env, 0, config)], ScriptedPolicy(replies_policy(reply), tiny_tokenizer))
        assert episode.actions_valid == 0  # the environment did reject it
        results[protocol] = (episode.turn_rewards, episode.actions_left)
    assert results["ragen"] == ([0.0], budget - 1)
    assert results["trl_ragen2"] == ([pytest.approx(-0.1)], budget)


def test_stray_tokens_of_each_protocol():
    reply = "x</think><answer>Up<|endoftext|> || <|im_end|>Down</answer>"
    assert parse_response(reply, max_actions=2, protocol="ragen").actions == ["Up<|endoftext|>", "Down"]
    assert parse_response(reply, max_actions=2).actions == ["Up", "Down"]


# ---------------------------------------------------------------------------------------------------------------
# Deliberate differences: the token ids are the ones the model generated and saw


def test_assistant_turns_keep_the_raw_reply_ids(tiny_tokenizer):
    """RAGEN rebuilds later contexts from the cleaned `<think>…</think><answer>a || b</answer>`; the ids here are
    the sampled reply, unchanged."""
    reply = "I think. </think>  <answer> Down ||  Jump || Up </answer>"
    episode = play(tiny_tokenizer, [reply], max_turns=2)
    start, end = episode.turn_spans[0]
    assert episode.completion_ids[start:end] == tiny_tokenizer.encode(reply) + [tiny_tokenizer.eos_token_id]
    cleaned = "<think>I think.</think><answer>Down || Jump</answer>"  # RAGEN's rebuilt assistant turn
    assert cleaned not in tiny_tokenizer.decode(episode.completion_ids)


def test_the_warning_stays_in_the_trained_tokens(tiny_tokenizer):
    """RAGEN's update batch rebuilds the user turns without the warning line; here the loss sees the feedback
    tokens the model was prompted with, warning included (masked out by env_mask)."""
    episode = play(tiny_tokenizer, ["nothing", "x</think><answer>Up</answer>"], max_turns=2)
    (first_end, second_start) = episode.turn_spans[0][1], episode.turn_spans[1][0]
    feedback = tiny_tokenizer.decode(episode.completion_ids[first_end:second_start])
    assert WARNING in feedback and set(episode.env_mask[first_end:second_start]) == {0}


# ---------------------------------------------------------------------------------------------------------------
# Observation layouts

SOKOBAN_LAYOUTS = [
    pytest.param(
        "######\n#√X_S#\n######",
        "Coordinates: \nBoard size: 3 rows x 6 cols (zero-indexed).\nTargets: (1, 1), (1, 4)\nBoxes: (1, 2)\n"
        "Boxes on target: (1, 1)\nPlayer on target: (1, 4)\nGrid Map: \n######\n#√X_S#\n######",
        id="every-kind",
    ),
    pytest.param(
        "#####\n#_P√#\n#####",
        "Coordinates: \nBoard size: 3 rows x 5 cols (zero-indexed).\nTargets: (1, 3)\nBoxes on target: (1, 3)\n"
        "Player: (1, 2)\nGrid Map: \n#####\n#_P√#\n#####",
        id="solved-no-boxes-line",
    ),
    pytest.param(
        "#######\n#OX_P_#\n#_X__O#\n#######",
        "Coordinates: \nBoard size: 4 rows x 7 cols (zero-indexed).\nTargets: (1, 1), (2, 5)\nBoxes: (1, 2), (2, 2)\n"
        "Player: (1, 4)\nGrid Map: \n#######\n#OX_P_#\n#_X__O#\n#######",
        id="reading-order",
    ),
]


@pytest.mark.parametrize(("room", "expected"), SOKOBAN_LAYOUTS)
def test_sokoban_ragen_layout(room, expected):
    env = make_env("sokoban")
    observation = env.load_room(SokobanRoom.from_text(room))
    assert env.protocol_observation(observation, "ragen") == expected
    assert env.protocol_observation(observation, "trl_ragen2") == observation
    grid_only = make_env("sokoban", render_mode="grid")
    grid = grid_only.load_room(SokobanRoom.from_text(room))
    assert grid_only.protocol_observation(grid, "ragen") == grid == room  # RAGEN's "grid" format


LAKE_GRID = "P___\n_O_O\n___O\nO__G"
LAKE_COORDS = "Coordinates: \nBoard size: 4 rows x 4 cols (zero-indexed).\nStart: (0, 0)\nGoal: (3, 3)\n"
LAKE_HOLES = "Holes: (1, 1), (1, 3), (2, 3), (3, 0)\n"
FROZEN_LAKE_LAYOUTS = [
    pytest.param([], f"{LAKE_COORDS}Player: (0, 0)\n{LAKE_HOLES}Grid Map: \n{LAKE_GRID}", id="start"),
    pytest.param(["Down"], f"{LAKE_COORDS}Player: (1, 0)\n{LAKE_HOLES}Grid Map: \n____\nPO_O\n___O\nO__G",
                 id="moved"),  # fmt: skip
    pytest.param(["Down", "Right"], f"{LAKE_COORDS}Player in hole: (1, 1)\n{LAKE_HOLES}Grid Map: \n____\n_X_O\n___O\nO__G",
                 id="in-a-hole"),  # fmt: skip
    pytest.param(["Right", "Right", "Down", "Down", "Down", "Right"],
                 f"{LAKE_COORDS}Player on goal: (3, 3)\n{LAKE_HOLES}Grid Map: \n____\n_O_O\n___O\nO__√", id="on-the-goal"),
]  # fmt: skip


@pytest.mark.parametrize(("moves", "expected"), FROZEN_LAKE_LAYOUTS)
def test_frozen_lake_ragen_layout(moves, expected):
    env = make_env("frozen_lake")
    observation = env.load_map(FrozenLakeMap.from_rows(LAKE))
    for move in moves:
        observation = env.step(move)[0]
    assert env.protocol_observation(observation, "ragen") == expected
    assert env.protocol_observation(observation, "trl_ragen2") == observation


def test_frozen_lake_without_holes_has_no_holes_line():
    env = make_env("frozen_lake")
    observation = env.load_map(FrozenLakeMap.from_rows(["FS", "GF"]))
    assert env.protocol_observation(observation, "ragen") == (
        "Coordinates: \nBoard size: 2 rows x 2 cols (zero-indexed).\nStart: (0, 1)\nGoal: (1, 0)\nPlayer: (0, 1)\n"
        "Grid Map: \n_P\nG_"
    )


def test_frozen_lake_rewards_are_gymnasiums_ints_under_the_ragen_protocol():
    env = make_env("frozen_lake")
    env.load_map(FrozenLakeMap.from_rows(["SG", "FF"]))
    rewards = [env.step("Down")[1], env.step("Up")[1], env.step("Right")[1]]
    assert rewards == [0.0, 0.0, 1.0] and all(type(r) is float for r in rewards)  # the env's own contract
    assert [repr(env.protocol_reward(r, "ragen")) for r in rewards] == ["0", "0", "1"]  # gymnasium's ints
    assert env.protocol_reward(0.0, "trl_ragen2") == 0.0


# ---------------------------------------------------------------------------------------------------------------
# System prompt: own words, RAGEN's structure


@pytest.mark.parametrize(
    ("env_name", "legend", "actions"),
    [
        ("sokoban", "#: wall, _: floor, O: target, √: box on a target, X: box, P: you, S: you on a target",
         "Up, Down, Left, Right"),
        ("frozen_lake", "P: you, _: frozen ice, O: hole, G: goal, X: you in a hole, √: you on the goal",
         "Left, Down, Right, Up"),
    ],
)  # fmt: skip
def test_system_prompt_structure(env_name, legend, actions):
    env = make_env(env_name)
    text = system_prompt(env, "ragen", max_actions=10)
    # RAGEN: preamble + instruction + "\n", then "\n" + legend header + "\n" + legend, "\n" + action header + "\n"
    # + actions, "\n" + budget line + "\n"
    instruction = "You're a helpful assistant. " + env.task_instructions + "\n"
    assert text.startswith(instruction)
    tail = text[len(instruction) :].split("\n")
    assert tail == [
        "",
        "Symbols in the state:",
        legend,
        "Actions you can take:",
        actions,
        'An episode allows at most 10 actions in all; put " || " between two actions of one answer.',
        "",
    ]
    for listed in ("Symbols:", "Actions:", "Rewards:"):  # each listed once, in its own block
        assert listed not in env.task_instructions
    assert "Above the grid" in env.task_instructions  # the coordinates come first in RAGEN's layout


def test_system_prompt_of_free_form_environments_is_unchanged():
    env = make_env("countdown")
    assert system_prompt(env, "ragen") == system_prompt(env) == "You're a helpful assistant. " + env.instructions


def test_turn_prompt_protocols():
    state = "Target: 24, nums: [3, 5, 8, 1]"
    default = turn_prompt(2, state, 1, 120)
    assert turn_prompt(2, state, 1, 120, "ragen") == default + "\n"
    assert (
        turn_prompt(2, state, 1, 120, "ragen", no_valid_action=True)
        == default.replace("You have", WARNING + "You have") + "\n"
    )
    assert turn_prompt(2, state, 1, 120, no_valid_action=True) == default  # the default shows no warning


def test_unknown_protocol_is_rejected_with_the_choices():
    with pytest.raises(
        ValueError, match=r"RolloutConfig.protocol must be one of \('trl_ragen2', 'ragen'\), got 'RAGEN'"
    ):
        RolloutConfig(protocol="RAGEN")
    with pytest.raises(ValueError, match="protocol must be one of"):
        build_rows("sokoban", "train", 1, protocol="paper")


def test_sokoban_rewards_are_gym_sokobans_sum():
    env = make_env("sokoban")
    env.load_room(SokobanRoom.from_text(TWO_TARGETS_ROOM))
    # A push from one target onto another: the count of boxes on targets is unchanged, so only the step's -0.1
    # (adding -1 then +1 would give -0.10000000000000009).
    assert repr(env.step("Right")[1]) == "-0.1"


def test_boxes_already_on_targets_at_the_start_earn_nothing():
    """RAGEN resets its count of boxes on targets to 0, so in a room that starts with a box on a target its first
    move earns +1 (-0.1 + 1 = 0.9); here the count starts from the room, and a plain move costs -0.1."""
    env = make_env("sokoban")
    env.load_room(SokobanRoom.from_text(TWO_TARGETS_ROOM))
    assert env.step("Down")[1] == -0.1  # (1, 1) -> the box at (2, 1) cannot move (wall below): nothing moves
