"""Countdown: RAGEN's scoring and the strict rule, generator, file loader, env protocol and TRL adapter."""

import ast
import json
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.countdown import (
    CountdownEnv,
    CountdownToolEnv,
    generate_problem,
    load_problems,
    solvable_with_plus_minus,
)
from trl_ragen2_envs.countdown.python_arithmetic import MAX_DEPTH, MAX_SOURCE_CHARS
from trl_ragen2_envs.countdown.rules import (
    MAX_EXPRESSION_CHARS,
    MAX_NESTING,
    RAGEN_MAX_DIGITS,
    ExpressionError,
    evaluate_expression,
    ragen_numbers_match,
    score_answer,
)

from .tool_env_helpers import run_scripted_grpo_step


# ---------------------------------------------------------------------------------------------------------------
# RAGEN's rule (the default), worked out by hand from ragen/env/countdown/env.py: 0 unless the digit runs of the
# answer, read with int(), are the numbers (sorted lists equal); then 1 if eval(answer) is within 1e-5 of the
# target, else 0.1 (any exception included).

N = [3, 5, 8, 1]  # target 24

RAGEN_CASES = [
    ("(5 - 3 + 1) * 8", 24, N, 1.0),  # runs 5 3 1 8; value 24
    ("8*(1+5-3)", 24, N, 1.0),
    ("  (5 - 3 + 1) * 8", 24, N, 1.0),  # eval strips leading spaces
    ("\n(5 - 3 + 1) * 8", 24, N, 1.0),  # a blank first line is fine for eval
    ("\n (5 - 3 + 1) * 8", 24, N, 0.1),  # an indented line is an IndentationError
    ("3 + 5 + 8 + 1", 24, N, 0.1),  # the right numbers, value 17
    ("3 5 8 1", 24, N, 0.1),  # the right numbers, a syntax error: the format score
    ("(5 - 3 + 1) * 8)", 24, N, 0.1),  # odd brackets: the numbers match, eval fails
    ("((5 - 3 + 1) * 8", 24, N, 0.1),
    ("The answer: (5-3+1)*8", 24, N, 0.1),  # words make a syntax error; their digits would count
    ("(5 - 3 + 1) * 8 = 24", 24, N, 0.0),  # runs 5 3 1 8 24: one number too many
    ("3 * 8", 24, N, 0.0),  # numbers missing
    ("(3 + 3) * (5 - 1)", 24, N, 0.0),  # 3 twice, 8 missing
    ("", 24, N, 0.0),  # no digits
    ("7 // 2 * 3", 9, [7, 2, 3], 1.0),  # // is evaluated: 3 * 3 (7 / 2 * 3 would be 10.5)
    ("8 / (3 - 8 / 3)", 24, [8, 3, 8, 3], 1.0),  # 23.99999999999999 is within 1e-5
    ("6 / (4 - 4)", 24, [4, 4, 6], 0.1),  # ZeroDivisionError
    ("-3 + 5 + 2", 4, [3, 5, 2], 1.0),  # unary minus
    ("1 + 2 / 3", 1, [1, 2, 3], 0.1),  # 1.667
    ("2 ** 3 - 4", 4, [2, 3, 4], 1.0),  # ** is evaluated: 8 - 4
    ("7 % 3", 1, [7, 3], 1.0),  # so is %
    ("2.5 * 2", 5, [2, 5, 2], 1.0),  # runs 2 5 2; a float literal, 5.0
    ("1_0", 10, [1, 0], 1.0),  # runs 1 and 0; Python reads 10
    ("24+0j", 24, [24, 0], 1.0),  # a complex value: abs(0j) = 0
    ("True+23", 24, [23], 1.0),  # True is 1
    ("1/1000000", 0, [1, 1000000], 1.0),  # 1e-6 is within 1e-5 of 0
    ("1/100000", 0, [1, 100000], 0.1),  # 1e-5 is not strictly within
    ("007", 7, [7], 0.1),  # int("007") = 7 matches; eval refuses leading zeros
    ("٢٤", 24, [24], 0.1),  # Arabic-Indic digits: int() reads 24, eval does not
    ("x + 3", 3, [3], 0.1),  # NameError
    ("abs(3 - 5)", 2, [3, 5], 0.1),  # no builtins in RAGEN's eval: an error
    ("'2' '4'", 24, [2, 4], 0.1),  # a string, '24' - 24 is a TypeError
    ("__import__('os')", 0, [0], 0.0),  # no digits
    ("9**9**9", 24, [9, 9, 9], 0.1),  # far from 24 (eval would take minutes; refused here at once)
    ("1e999 - 1e999", 0, [1, 999, 1, 999], 0.1),  # inf - inf is nan
    ("0" * RAGEN_MAX_DIGITS + "3", 3, [3], 0.0),  # 4,301 digits: int() raises, the format check fails
    ("0" * (RAGEN_MAX_DIGITS - 1) + "3", 3, [3], 0.1),  # 4,300 digits: int() reads 3; eval: leading zeros
    ("1 " * 100_000, 1, [1], 0.0),  # 100,000 numbers for one
    (None, 24, N, 0.0),  # not text: the regex raises, the check fails
]


@pytest.mark.parametrize("answer, target, nums, reward", RAGEN_CASES)
def test_ragen_rewards_by_hand(answer, target, nums, reward):
    assert score_answer(answer, target, nums) == reward  # "ragen" is the default rule


@pytest.mark.parametrize(
    "answer, target, nums, note",
    [
        ("5 > 3", 1, [5, 3], "a comparison, True - 1 == 0"),
        ("(1).__add__(23)", 24, [1, 23], "a method call"),
        ("24 if 1 else 0", 24, [24, 1, 0], "a conditional expression"),
        ("24" + " " * MAX_SOURCE_CHARS, 24, [24], "longer than MAX_SOURCE_CHARS"),
        ("-" * (MAX_DEPTH + 1) + "24", -24, [24], "nested deeper than MAX_DEPTH"),
        ("2**20000 - 2**20000 + 24", 24, [2, 20000, 2, 20000, 24], "an intermediate wider than MAX_INT_BITS"),
    ],
)
def test_ragen_differences_outside_the_evaluator(answer, target, nums, note):
    """The documented difference: where RAGEN's eval reaches the target through Python outside the arithmetic
    subset or beyond the bounds, it pays 1; the safe evaluator refuses, so the answer earns the format score."""
    assert abs(eval(answer, {"__builtins__": None}, {}) - target) < 1e-5  # RAGEN's check (test-written strings)
    assert score_answer(answer, target, nums) == 0.1


def test_ragen_numbers_match_reads_runs_as_integers():
    assert ragen_numbers_match("(05 - 3) * 8 + 1", [3, 5, 8, 1])  # "05" is 5
    assert ragen_numbers_match("3,5;8 and 1", [1, 3, 5, 8])  # any separator, any order
    assert not ragen_numbers_match("3 5 8", [3, 5, 8, 1])
    assert not ragen_numbers_match("3 5 8 1 1", [3, 5, 8, 1])
    assert ragen_numbers_match("0 + 00", [0, 0])


# ---------------------------------------------------------------------------------------------------------------
# The strict rule (reward_rule="strict")


@pytest.mark.parametrize(
    "answer, target, nums, reward",
    [
        ("(5 - 3 + 1) * 8", 24, [3, 5, 8, 1], 1.0),  # correct
        ("8*(1+5-3)", 24, [3, 5, 8, 1], 1.0),  # no spaces, any order
        ("3 + 5 + 8 + 1", 24, [3, 5, 8, 1], 0.1),  # right numbers, value 17
        ("3 * 8", 24, [3, 5, 8, 1], 0.0),  # numbers missing
        ("3 * 8 * 1 * 5 / 5", 24, [3, 5, 8, 1], 0.0),  # an extra number
        ("(3 + 3) * (5 - 1)", 24, [3, 5, 8, 1], 0.0),  # 3 reused, 8 unused
        ("6 / (4 - 4)", 24, [4, 4, 6], 0.1),  # division by zero: right numbers, no value
        ("8 / (3 - 8 / 3)", 24, [8, 3, 8, 3], 1.0),  # 8/3 is not an integer, the result is exactly 24
        ("-3 + 5 + 2", 4, [3, 5, 2], 1.0),  # unary minus
        ("2 - (3 - 5)", 4, [3, 5, 2], 1.0),
        ("(1 + 2) / 3", 1, [1, 2, 3], 1.0),
        ("1 + 2 / 3", 1, [1, 2, 3], 0.1),  # precedence: 5/3
        ("2 ** 3 - 4", 4, [2, 3, 4], 0.0),  # power is not allowed
        ("8 // 2", 4, [8, 2], 0.0),
        ("7 % 3", 1, [7, 3], 0.0),
        ("x + 3", 3, [3], 0.0),  # names
        ("abs(3 - 5)", 2, [3, 5], 0.0),  # calls
        ("__import__('os')", 0, [0], 0.0),
        ("2.5 * 2", 5, [2, 2], 0.0),  # decimals
        ("3 + 5 + 8 + 1 = 17", 17, [3, 5, 8, 1], 0.0),  # '=' is not part of an expression
        ("99999999999 - 99999999975", 24, [99999999999, 99999999975], 0.0),  # literal too long
        ("", 24, [3, 5, 8, 1], 0.0),
        ("(3 + 5", 8, [3, 5], 0.0),
        ("3 5 +", 8, [3, 5], 0.0),
    ],
)
def test_strict_rewards_by_hand(answer, target, nums, reward):
    assert score_answer(answer, target, nums, reward_rule="strict") == reward


def test_evaluator_precedence_and_associativity():
    assert evaluate_expression("2 + 3 * 4").value == 14
    assert evaluate_expression("8 - 3 - 2").value == 3
    assert evaluate_expression("8 / 4 / 2").value == 1
    assert evaluate_expression("-(2 - 7) * -2").value == -10
    assert evaluate_expression("1 / 3").value == Fraction(1, 3)
    assert evaluate_expression("1 / (2 - 2) + 5").value is None
    assert evaluate_expression(" 12 +\n 3 ").literals == (12, 3)


@pytest.mark.parametrize(
    "text",
    ["2 ** 3", "2 * * 3", "1e3", "0x10", "1_000", "3 +", "(1))", "()", "True", "1 + 2; 3", "١ + 2", "--"],
)
def test_evaluator_rejects(text):
    with pytest.raises(ExpressionError):
        evaluate_expression(text)


def test_evaluator_bounds():
    nested = "(" * MAX_NESTING + "1" + ")" * MAX_NESTING
    assert evaluate_expression(nested).value == 1
    with pytest.raises(ExpressionError, match="nested"):
        evaluate_expression("(" + nested + ")")
    with pytest.raises(ExpressionError, match="nested"):
        evaluate_expression("-" * (MAX_NESTING + 1) + "1")
    with pytest.raises(ExpressionError, match="longer than"):
        evaluate_expression("1+" * MAX_EXPRESSION_CHARS + "1")


def _reference_value(node):
    """Python's own parse tree of the same text, evaluated with Fractions (an independent reference)."""
    if isinstance(node, ast.Expression):
        return _reference_value(node.body)
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp):
        return -_reference_value(node.operand)
    left, right = _reference_value(node.left), _reference_value(node.right)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    return None if right == 0 else left / right


@st.composite
def flat_expressions(draw):
    numbers = draw(st.lists(st.integers(0, 30), min_size=1, max_size=6))
    text = str(numbers[0])
    for number in numbers[1:]:
        operator = draw(st.sampled_from(["+", "-", "*", "/"]))
        wrap = draw(st.booleans())
        text = f"({text}) {operator} {number}" if wrap else f"{text} {operator} {number}"
    return text, numbers


@settings(max_examples=300, deadline=None)
@given(flat_expressions())
def test_evaluator_matches_python_parse_tree(case):
    text, numbers = case
    evaluation = evaluate_expression(text)
    assert evaluation.literals == tuple(numbers)
    assert evaluation.value == _reference_value(ast.parse(text, mode="eval"))


# ---------------------------------------------------------------------------------------------------------------
# Generator


@pytest.mark.parametrize("plus_minus_only", [False, True])
def test_generated_targets_are_reachable_positive_integers(plus_minus_only):
    rng = np.random.default_rng(0)
    counts = Counter()
    for _ in range(300):
        problem = generate_problem(rng, plus_minus_only=plus_minus_only)
        counts[len(problem.nums)] += 1
        assert 3 <= len(problem.nums) <= 4
        assert all(1 <= n <= 99 for n in problem.nums)
        assert 1 <= problem.target <= 1000
        # Solving check: the generating expression uses each number once and evaluates to the target.
        assert score_answer(problem.solution, problem.target, problem.nums, reward_rule="strict") == 1.0
        if plus_minus_only:
            assert "*" not in problem.solution and "/" not in problem.solution
            assert solvable_with_plus_minus(problem.target, problem.nums)
    assert counts[3] > 100 and counts[4] > 100


def test_generator_options():
    rng = np.random.default_rng(1)
    for _ in range(50):
        problem = generate_problem(rng, min_numbers=4, max_numbers=4, max_number=9, max_target=20)
        assert len(problem.nums) == 4 and max(problem.nums) <= 9 and 1 <= problem.target <= 20
    unbounded = [generate_problem(rng, max_target=None).target for _ in range(200)]
    assert max(unbounded) > 1000


def test_solvable_with_plus_minus():
    assert solvable_with_plus_minus(4, [3, 5, 2])  # 5 + 2 - 3
    assert solvable_with_plus_minus(-10, [3, 5, 2])  # -3 - 5 - 2
    assert not solvable_with_plus_minus(30, [3, 5, 2])
    # The documented difference: every number takes a sign. RAGEN's filter pads to four numbers and reads only the
    # first four, so it would keep this record (1 + 2 + 3 + 4 = 10, the 100 ignored); Countdown-Tasks-3to4 has no
    # record with more than four numbers.
    assert not solvable_with_plus_minus(10, [1, 2, 3, 4, 100])


# ---------------------------------------------------------------------------------------------------------------
# Env protocol


def test_observation_and_determinism_per_seed():
    first, second = make_env("countdown"), CountdownEnv()
    observation = first.reset(seed=11)
    assert observation == second.reset(seed=11) == first.render()
    problem = first.problem
    assert observation == f"Target: {problem.target}, nums: {list(problem.nums)}"
    observations = {first.reset(seed=seed) for seed in range(40)}
    assert len(observations) > 35
    assert first.action_vocabulary() is None


@pytest.mark.parametrize("reward_rule, reply", [("ragen", "Your answer get 1 points."), ("strict", "Correct: ")])
def test_correct_answer_ends_episode(reward_rule, reply):
    env = CountdownEnv(reward_rule=reward_rule)
    env.reset(seed=5)
    observation, reward, done, info = env.step(env.problem.solution)
    assert (reward, done, info["success"], info["action_is_valid"]) == (1.0, True, True, True)
    assert observation.startswith(reply) and env.render() == observation
    # after the end nothing more is scored
    _, reward, done, info = env.step(env.problem.solution)
    assert (reward, done, info["action_is_valid"]) == (0.0, True, False)


@pytest.mark.parametrize("reward_rule", ["ragen", "strict"])
def test_wrong_value_and_wrong_numbers(reward_rule):
    env = CountdownEnv(reward_rule=reward_rule)
    env.reset(seed=6)
    plus_all = " + ".join(str(n) for n in env.problem.nums)
    expected = 1.0 if sum(env.problem.nums) == env.problem.target else 0.1
    _, reward, done, info = env.step(plus_all)
    assert (reward, done, info["success"]) == (expected, True, expected == 1.0)
    env.reset(seed=6)
    _, reward, done, info = env.step("1 + 1")
    assert (reward, done, info["success"], info["action_is_valid"]) == (0.0, True, False, True)


def test_ragen_rule_scores_every_answer_and_ends_the_episode():
    env = CountdownEnv()  # reward_rule="ragen"
    env.reset(seed=7)
    nums = " ".join(str(n) for n in env.problem.nums)
    assert env.step(nums) == ("Your answer get 0.1 points.", 0.1, True, {"success": False, "action_is_valid": True,
                                                                         "action_is_effective": True})  # fmt: skip
    env.reset(seed=7)
    assert env.step("the answer is 24")[1:3] == (0.0, True)
    assert env.render() == "Your answer get 0 points."


def test_strict_rule_malformed_answer_is_invalid_and_keeps_state():
    env = CountdownEnv(reward_rule="strict")
    observation = env.reset(seed=7)
    result = env.step("the answer is 24")
    assert result[:3] == (observation, 0.0, False)
    assert result[3]["action_is_valid"] is False and "not an accepted expression" in result[3]["invalid_reason"]
    assert env.step(env.problem.solution)[1] == 1.0  # the episode was still open


def test_constructor_validation():
    with pytest.raises(ValueError, match="reward_rule must be one of \\('ragen', 'strict'\\), got 'exact'"):
        CountdownEnv(reward_rule="exact")
    with pytest.raises(ValueError, match="min_numbers"):
        CountdownEnv(min_numbers=5, max_numbers=4)
    with pytest.raises(ValueError, match="max_target"):
        CountdownEnv(max_target=0)


@settings(max_examples=200, deadline=None)
@given(
    action=st.one_of(st.text(max_size=300), st.text(alphabet="0123456789+-*/() .=x", max_size=60)),
    reward_rule=st.sampled_from(["ragen", "strict"]),
)
def test_step_never_raises(action, reward_rule):
    env = CountdownEnv(reward_rule=reward_rule)
    observation = env.reset(seed=3)
    problem = env.problem
    result_observation, reward, done, info = env.step(action)
    assert env.problem == problem
    assert info["action_is_valid"] or reward_rule == "strict", "RAGEN's rule accepts every answer"
    if info["action_is_valid"]:
        assert done and reward in (0.0, 0.1, 1.0)
    else:
        assert (result_observation, reward, done) == (observation, 0.0, False)
        assert env.render() == observation and env.done is False


# ---------------------------------------------------------------------------------------------------------------
# Loader


RECORDS = [
    {"target": 4, "nums": [3, 5, 2]},
    {"target": 24, "nums": [8, 3, 8, 3]},  # needs * and /
    {"target": 98, "nums": [44, 19, 35]},
]


def _write(tmp_path, suffix, records=RECORDS):
    path = tmp_path / f"countdown{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    elif suffix == ".json":
        path.write_text(json.dumps(records))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_loader_round_trip_and_seed_choice(tmp_path, suffix):
    path = _write(tmp_path, suffix)
    problems = load_problems(path)
    assert [(p.target, list(p.nums)) for p in problems] == [(r["target"], r["nums"]) for r in RECORDS]
    env = make_env("countdown", data_path=str(path))
    assert env.reset(seed=4) == "Target: 24, nums: [8, 3, 8, 3]"  # 4 % 3 == 1
    assert env.step("8 / (3 - 8 / 3)")[1] == 1.0
    assert CountdownEnv(data_path=str(path)).reset(seed=7) == "Target: 24, nums: [8, 3, 8, 3]"  # a fresh instance


def test_loader_plus_minus_filter_and_limit(tmp_path):
    path = _write(tmp_path, ".jsonl")
    kept = load_problems(path, plus_minus_only=True)
    assert [p.target for p in kept] == [4, 98]  # 24 from [8, 3, 8, 3] needs * or /
    assert [p.target for p in load_problems(path, max_problems=1)] == [4]
    only_24 = _write(tmp_path, ".json", [RECORDS[1]])
    with pytest.raises(
        ValueError, match="none of its 1 Countdown problems is left after the filter plus_minus_solvable"
    ):
        load_problems(only_24, plus_minus_only=True)


@pytest.mark.parametrize(
    "records, error_type, message",
    [
        ([{"target": 4}], ValueError, r"record 0: missing field 'nums'"),
        ([{"target": 4, "nums": [1, 3]}, {"nums": [1]}], ValueError, r"record 1: missing field 'target'"),
        ([{"target": "four", "nums": [1, 3]}], TypeError, r"field 'target' must be an integer"),
        ([{"target": 4, "nums": [1.5, 3]}], ValueError, r"field 'nums' must be an integer"),
        ([{"target": 4, "nums": "1 3"}], ValueError, r"field 'nums' must be a list"),
        ([{"target": 4, "nums": []}], ValueError, r"non-empty list"),
    ],
)
def test_loader_errors_name_the_field(tmp_path, records, error_type, message):
    path = _write(tmp_path, ".json", records)
    with pytest.raises(error_type, match=message) as error:
        load_problems(path)
    assert str(path) in str(error.value)


def test_loader_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_path"):
        CountdownEnv(data_path=str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"target": 4, "nums": [3, 1]}\n{oops\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        load_problems(bad)
    csv = tmp_path / "data.csv"
    csv.write_text("target,nums\n")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_problems(csv)


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


def test_tool_env_contract():
    from transformers.utils import get_json_schema

    schema = get_json_schema(CountdownToolEnv().answer)
    assert schema["function"]["name"] == "answer"
    assert schema["function"]["parameters"]["required"] == ["expression"]
    assert schema["function"]["parameters"]["properties"]["expression"]["type"] == "string"

    tool_env = CountdownToolEnv(reward_rule="strict")  # constructor keywords apply to every row
    text = tool_env.reset(prompt=[], seed=9, env_config='{"plus_minus_only": true}', split="train")
    problem = tool_env.env.problem
    assert text.startswith(f"Target: {problem.target}, nums: {list(problem.nums)}")
    assert "*" not in problem.solution
    assert tool_env.answer("2 ** 99999").startswith("Invalid expression")
    assert tool_env.answer(None).startswith("Invalid expression")  # type: ignore[arg-type]
    assert tool_env.get_reward() == 0.0
    assert tool_env.answer(problem.solution).startswith("Correct")
    assert tool_env.get_reward() == 1.0
    assert "already answered" in tool_env.answer("1")
    tool_env.reset(seed=9, env_config={"plus_minus_only": True})
    assert tool_env.get_reward() == 0.0 and tool_env.env.problem == problem  # same seed, same puzzle
    ragen = CountdownToolEnv()
    ragen.reset(seed=9, env_config={"plus_minus_only": True})
    assert ragen.answer("2 ** 99999") == "Your answer get 0 points."  # RAGEN's rule: scored, and over
    assert "already answered" in ragen.answer(problem.solution) and ragen.get_reward() == 0.0


def test_grpo_trainer_runs_the_answer_tool(tiny_tokenizer, tiny_model, tmp_path):
    """One GRPO step with `environment_factory`; the first turn of 2 rollouts is a scripted, correct tool call."""
    from trl_ragen2_envs.datasets import build_rows

    row = build_rows("countdown", "train", 1)[0]
    probe = CountdownToolEnv()
    probe.reset(**row)  # the same row gives the trainer's environments the same puzzle
    calls = [("answer", {"expression": probe.env.problem.solution})] * 2
    trainer, metrics = run_scripted_grpo_step(
        CountdownToolEnv, row, calls, tiny_model, tiny_tokenizer, tmp_path, max_tool_calling_iterations=2
    )
    assert [env.get_reward() for env in trainer.environments] == [1.0, 1.0, 0.0, 0.0]
    assert metrics["rewards/CountdownToolEnv/mean"] == pytest.approx(0.5)
    assert metrics["tools/call_frequency"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------------------------
# The card's examples


CARD = Path(__file__).resolve().parent.parent / "docs" / "environments" / "countdown.md"


def card_rows(intro: str) -> list[tuple[list[str], float, str, str]]:
    """(answers, reward, done, observation cell) of the table that follows the card line starting with `intro`."""
    lines = CARD.read_text(encoding="utf-8").splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(intro))
    rows = []
    for line in lines[start + 1 :]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("| `"):
            answers, reward, done, observation = [cell.strip() for cell in line.strip().strip("|").split("|")]
            rows.append((re.findall(r"`([^`]*)`", answers), float(reward), done, observation))
    return rows


@pytest.mark.parametrize("reward_rule, intro", [("ragen", "The answer is an arithmetic"), ("strict", "With `reward")])
def test_card_examples_are_what_the_environment_does(reward_rule, intro):
    rows = card_rows(intro)
    assert len(rows) >= 4
    for answers, reward, done, observation_cell in rows:
        for answer in answers:
            env = CountdownEnv(reward_rule=reward_rule)
            first = env.reset(seed=0)
            observation, got_reward, got_done, _ = env.step(answer)
            assert (got_reward, got_done) == (reward, done == "yes"), answer
            shown = re.match(r"`([^`]*)`", observation_cell)
            assert observation == (shown.group(1) if shown else first), answer
