"""The task of `benchmarks/template_collapse.py`: its rows, its reward and its warm-start replies, by hand."""

import random

import pytest

from .benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def task():
    return load_benchmark("template_collapse")


def test_rows_are_the_eight_letters_with_g_and_h_hard(task):
    rows = task.task_rows()
    assert [row["target"] for row in rows] == list("abcdefgh")
    assert [row["target"] for row in rows if row["hard"]] == ["g", "h"]
    assert rows[2]["user"] == "Push the box to target c."


def test_each_letter_has_a_fixed_direction(task):
    # a..d -> Up, Down, Left, Right, and again for e..h
    assert task.ANSWERS == {
        "a": "Up", "b": "Down", "c": "Left", "d": "Right", "e": "Up", "f": "Down", "g": "Left", "h": "Right",
    }  # fmt: skip


@pytest.mark.parametrize(
    "target, completion, expected",
    [
        ("c", " c: Up box Left go wall Down, c</think><answer>Left</answer>", 1.0),  # c -> Left
        ("c", " c: Up box Left go wall Down, c</think><answer>Right</answer>", 0.0),  # wrong direction
        ("c", " h: wall wall, h</think><answer>Left</answer>", 1.0),  # the reasoning names h: not graded
        ("c", " anything at all</think><answer> Left </answer>", 1.0),  # whitespace inside the tags is ignored
        ("c", "</think> <answer>Left</answer>", 1.0),  # empty reasoning: still right
        ("c", " c: Up, c<answer>Left</answer>", 0.0),  # no </think>: no answer
        ("c", " c: Up, c</think>Left", 0.0),  # no <answer> tags
        ("c", " c: Up, c</think><answer>Left", 0.0),  # unclosed answer
        ("c", " c</think><answer>left</answer>", 0.0),  # case matters
        ("g", " g: go, g</think><answer>Left</answer>", 1.0),  # g -> Left (hard letters are scored alike)
        ("h", " h: go, h</think><answer>Left</answer>", 0.0),  # h -> Right
    ],
)
def test_reward_grades_only_the_answer(task, target, completion, expected):
    assert task.task_reward(target, completion) == expected


def test_demonstrations_restate_the_letter_and_answer_easy_letters_right(task):
    rng = random.Random(0)
    for target in "abcdef":
        reply = task.demonstration(target, rng)
        assert reply.startswith(f" {target}: ") and f", {target}</think>" in reply
        assert task.task_reward(target, reply) == 1.0
    # hard letters: a random direction, right for about 1 in 4 replies
    hard = [task.task_reward("g", task.demonstration("g", rng)) for _ in range(400)]
    assert 0.15 < sum(hard) / len(hard) < 0.35


def test_cell_names_round_trip(task):
    assert task.parse_cell("ent0.01-kl0.001-filtered") == (0.01, 0.001, "filtered")
    assert task.parse_cell(task.cell_name(0.1, 0.0, False)) == (0.1, 0.0, "unfiltered")  # the original sweep's flag
    for arm in task.ARMS:
        assert task.parse_cell(task.cell_name(0.1, 0.001, arm)) == (0.1, 0.001, arm)
    assert task.arm_settings("random_matched")["reward_variance_control"] == "random_matched"
    assert task.arm_settings("filtered")["reward_variance_control"] is None
    assert task.arm_settings("ppo_unfiltered") == {"reward_variance_filtering": None}
    assert len(task.all_cells()) == 16
    with pytest.raises(ValueError, match="not of the form"):
        task.parse_cell("ent0.1-filtered")


def test_paired_t_interval(task):
    # mean 2, sample variance (1 + 0 + 1 + 0) / 3, n = 4: half-width t(0.975, 3) * sqrt(2/3) / sqrt(4)
    mean, half = task.t_interval([1.0, 2.0, 3.0, 2.0])
    assert mean == pytest.approx(2.0)
    assert half == pytest.approx(3.1824 * (2 / 3) ** 0.5 / 2, rel=0.01)
