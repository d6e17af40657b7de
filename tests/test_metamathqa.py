"""MetaMathQA: RAGEN's exact match and the lenient check, retry rewards, problem generator, file loader, TRL adapter."""

import json
import re
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.metamathqa import (
    PROBLEM_FAMILIES,
    MathProblem,
    MetaMathQAEnv,
    MetaMathQAToolEnv,
    answers_match,
    extract_answer,
    generate_problem,
    load_problems,
    normalize_answer,
    numeric_value,
    ragen_answers_match,
    ragen_reference,
)

from .tool_env_helpers import run_scripted_grpo_step


# ---------------------------------------------------------------------------------------------------------------
# RAGEN's rule (the default), worked out by hand from ragen/env/metamathqa/env.py: the reference is what follows the
# first "The answer is: " of the record's response, stripped; an answer is correct when answer.strip().lower() with
# every whitespace character then removed equals the reference treated the same way, and the reference is not
# empty. A correct answer at step k earns 1 / 2**k.


@pytest.mark.parametrize(
    "answer, reference, match",
    [
        ("5", "5", True),
        (" 5 \n", "5", True),  # whitespace is removed
        ("12.", "12", False),  # exact strings: a trailing dot is wrong
        ("5.0", "5", False),
        ("1/2", "0.5", False),
        (".5", "0.5", False),
        ("0.5", "0.5", True),
        ("The answer is: 5", "5", False),  # the whole answer is compared: nothing is extracted
        ("\\boxed{5}", "5", False),
        ("$5", "5", False),
        ("1234", "1,234", False),
        ("\\FRAC{3} {4}", "\\frac{3}{4}", True),  # lower-cased, spaces removed
        ("Blue", "blue", True),
        ("x+1", "x + 1", True),
        ("\u00a05\u2003", "5", True),  # Unicode whitespace (no-break space, em space) is removed too
        ("5\u200b", "5", False),  # a zero-width space is not whitespace
        ("ΑΣΒ", "ΑΣ Β", False),  # lower() runs first: "ΑΣ Β" gives "ας β", a final sigma before the space
        ("ας β", "ΑΣ Β", True),
        ("5", "", False),  # no reference: nothing is correct
    ],
)
def test_ragen_match_by_hand(answer, reference, match):
    assert ragen_answers_match(answer, reference) is match


@pytest.mark.parametrize(
    "response, reference",
    [
        ("2 + 3 = 5. The answer is: 5", "5"),
        ("The answer is:  \\frac{1}{2} \n\n", "\\frac{1}{2}"),  # stripped
        ("The answer is: 3. Check: The answer is: 18", "3. Check: The answer is: 18"),  # from the first marker on
        ("The answer is:18", ""),  # no space after the colon: RAGEN finds no reference
        ("the answer is: 7", ""),  # case matters
    ],
)
def test_ragen_reference_by_hand(response, reference):
    assert ragen_reference(response) == reference


def test_ragen_rule_in_the_environment():
    env = MetaMathQAEnv(max_attempts=3)  # reward_rule="ragen"
    env.reset(seed=1)
    answer = env.problem.answer
    assert env.step(answer + ".") == ("Incorrect. Please think again.", 0.0, False,
                                      {"success": False, "action_is_valid": True, "action_is_effective": True,
                                       "attempt": 0})  # fmt: skip
    assert env.step(f"The answer is: {answer}")[:3] == ("Incorrect. Please think again.", 0.0, False)
    assert env.step(f" {answer} ")[:3] == ("Correct!", 0.25, True)  # the third step: 1 / 2**2
    one = make_env("metamathqa")  # one attempt, as RAGEN runs it
    one.reset(seed=1)
    assert one.step(answer + ".0")[1:3] == (0.0, True)
    one.problem = MathProblem(question="q", answer="18", family="metamathqa", ragen_answer="")
    one.done, one.attempt = False, 0
    assert one.step("18")[1] == 0.0  # a record without RAGEN's marker can never be answered


# ---------------------------------------------------------------------------------------------------------------
# Extraction and checking


@pytest.mark.parametrize(
    "reply, extracted",
    [
        ("We add 3 and 4. The answer is: 7", "7"),
        ("The answer is: 3\nCheck... The answer is: 18 ", "18"),  # the last statement counts
        ("so the answer is 12.", "12."),
        ("42", "42"),  # a bare answer
        ("  x = 5  ", "x = 5"),
    ],
)
def test_extract_answer(reply, extracted):
    assert extract_answer(reply) == extracted


@pytest.mark.parametrize(
    "text, normalized",
    [
        (" $1,234.50 ", "1234.50"),
        ("1,000,000.", "1000000"),
        ("\\$ 12", "12"),
        ("\\boxed{3/4}", "3/4"),
        ("Forty Two", "fortytwo"),
        ("1,2", "1,2"),  # not a thousands separator
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


@pytest.mark.parametrize(
    "predicted, reference, match",
    [
        ("5", "5.0", True),
        ("5.00", "5", True),
        ("$1,000", "1000", True),
        ("1/2", "0.5", True),
        ("\\frac{3}{4}", ".75", True),
        ("-2", "-2.0", True),
        ("The answer is: 18.", "18", True),
        ("Blue", "blue", True),
        ("x + 1", "x+1", True),  # RAGEN's whitespace-insensitive string match
        ("5", "6", False),
        ("0.33", "1/3", False),  # exact comparison
        ("1/0", "1/0", True),  # equal strings
        ("1/0", "0", False),
        ("", "0", False),
        ("5", "", False),
    ],
)
def test_answers_match(predicted, reference, match):
    assert answers_match(extract_answer(predicted), reference) is match


def test_numeric_value_is_bounded_and_exact():
    assert numeric_value("0.1") == numeric_value("1/10")
    assert numeric_value("1" * 41) is None  # beyond the digit bound: compared as text only
    assert numeric_value("1e999999") is None  # no exponents (Fraction would build a huge integer)
    assert numeric_value("٣") is None  # ASCII digits only


def test_math_verify_is_opt_in():
    pytest.importorskip("math_verify")
    plain = MetaMathQAEnv(data_path=None, reward_rule="lenient")
    plain.reset(seed=0)
    plain.problem = plain.problem.__class__(question="q", answer="(x+1)^2", family="test")
    assert not plain.is_correct("x^2+2x+1")
    verified = MetaMathQAEnv(reward_rule="lenient", use_math_verify=True)
    verified.reset(seed=0)
    verified.problem = plain.problem
    assert verified.is_correct("x^2+2x+1")
    assert not verified.is_correct("x^2+2x+2")
    assert not verified.is_correct("\\frac{")  # unparsable input is simply wrong


def test_math_verify_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` fail
    with pytest.raises(ImportError, match=re.escape('pip install "trl-ragen2[math]"')):
        MetaMathQAEnv(reward_rule="lenient", use_math_verify=True)


# ---------------------------------------------------------------------------------------------------------------
# Retries


@pytest.mark.parametrize("correct_at, reward", [(0, 1.0), (1, 0.5), (2, 0.25), (3, 0.125)])
def test_retry_reward_halves_per_attempt(correct_at, reward):
    env = MetaMathQAEnv(max_attempts=4, reward_rule="lenient")
    env.reset(seed=1)
    wrong = str(int(env.problem.answer) + 1)
    for attempt in range(correct_at):
        observation, step_reward, done, info = env.step(wrong)
        assert (step_reward, done, info["success"], info["attempt"]) == (0.0, False, False, attempt)
        assert observation == f"Incorrect. Please think again. You have {4 - attempt - 1} attempt(s) left."
    observation, step_reward, done, info = env.step(f"The answer is: {env.problem.answer}")
    assert (observation, step_reward, done, info["success"], info["attempt"]) == (
        "Correct!",
        reward,
        True,
        True,
        correct_at,
    )


def test_attempts_run_out():
    env = MetaMathQAEnv(max_attempts=2, reward_rule="lenient")
    env.reset(seed=2)
    assert env.step("-1")[2] is False
    observation, reward, done, info = env.step("-1")
    assert (observation, reward, done, info["success"]) == ("Incorrect. No attempts left.", 0.0, True, False)
    assert env.step(env.problem.answer)[1:3] == (0.0, True)  # over: nothing more is scored


def test_default_is_one_attempt():
    env = make_env("metamathqa")
    env.reset(seed=3)
    assert env.max_attempts == 1
    assert env.step("-1")[2] is True


@pytest.mark.parametrize("reward_rule, empty", [("lenient", "The answer is:  $ "), ("ragen", " \n\t\u00a0")])
def test_empty_answer_is_invalid_and_keeps_state(reward_rule, empty):
    """RAGEN's rollout drops empty actions before they reach the environment, so they use no attempt."""
    env = MetaMathQAEnv(max_attempts=2, reward_rule=reward_rule)
    question = env.reset(seed=4)
    observation, reward, done, info = env.step(empty)
    assert (observation, reward, done, info["action_is_valid"], env.attempt) == (question, 0.0, False, False, 0)
    assert env.step(env.problem.answer)[1] == 1.0  # still the first attempt


@settings(max_examples=200, deadline=None)
@given(action=st.text(max_size=300), reward_rule=st.sampled_from(["ragen", "lenient"]))
def test_step_never_raises(action, reward_rule):
    env = MetaMathQAEnv(max_attempts=3, reward_rule=reward_rule)
    question = env.reset(seed=5)
    problem = env.problem
    observation, reward, done, info = env.step(action)
    assert env.problem == problem
    if info["action_is_valid"]:
        assert reward in (0.0, 1.0) and env.attempt == (0 if reward else 1)
    else:
        assert (observation, reward, done, env.attempt, env.render()) == (question, 0.0, False, 0, question)


def test_constructor_validation():
    with pytest.raises(ValueError, match="max_attempts"):
        MetaMathQAEnv(max_attempts=0)
    with pytest.raises(ValueError, match="reward_rule must be one of \\('ragen', 'lenient'\\), got 'exact'"):
        MetaMathQAEnv(reward_rule="exact")
    with pytest.raises(ValueError, match="use_math_verify=True needs reward_rule='lenient', got reward_rule='ragen'"):
        MetaMathQAEnv(use_math_verify=True)
    with pytest.raises(ValueError, match="families"):
        MetaMathQAEnv(families=["algebra"])


# ---------------------------------------------------------------------------------------------------------------
# Generator


def _solve(family: str, question: str) -> int:
    """Recompute the answer from the numbers in the question text, family by family."""
    n = [int(x) for x in re.findall(r"\d+", question)]
    if family == "packs_left":
        return n[0] * n[1] - n[2] - n[3]
    if family == "savings":
        return n[0] * n[1] * n[2] - n[3]
    if family == "trip":
        return n[0] * n[1] + n[2] * n[3]
    if family == "equal_shares":
        total = n[0] + n[1] * n[2]
        assert total % n[3] == 0
        return total // n[3]
    if family == "discount":
        assert n[0] * (100 - n[1]) % 100 == 0
        return n[2] * n[0] * (100 - n[1]) // 100
    if family == "ages":
        factor, years, total = n
        assert (total - 2 * years) % (factor + 1) == 0
        return factor * (total - 2 * years) // (factor + 1)
    if family == "fence":
        return 2 * (n[0] + n[1]) * n[2]
    if family == "bakery":
        return n[0] * n[1] * n[2] - n[3] - n[4]
    raise AssertionError(family)


def test_generated_answers_follow_from_the_question():
    rng = np.random.default_rng(0)
    families = Counter()
    for _ in range(400):
        problem = generate_problem(rng)
        families[problem.family] += 1
        answer = int(problem.answer)
        assert answer >= 0 and answer == _solve(problem.family, problem.question)
    assert set(families) == set(PROBLEM_FAMILIES)


def test_generation_is_deterministic_per_seed():
    assert MetaMathQAEnv().reset(seed=8) == make_env("metamathqa").reset(seed=8)
    questions = {MetaMathQAEnv().reset(seed=seed) for seed in range(30)}
    assert len(questions) == 30
    only_trips = MetaMathQAEnv(families=["trip"])
    only_trips.reset(seed=0)
    assert only_trips.problem.family == "trip"


# ---------------------------------------------------------------------------------------------------------------
# Loader


METAMATH = [
    {"query": "What is 2 + 3?", "response": "2 + 3 = 5. The answer is: 5", "type": "GSM_Rephrased"},
    {"query": "Simplify 6/8.", "response": "Divide by 2. The answer is: \\frac{3}{4}"},
]
GSM8K = [{"question": "Tom has 1200 apples and buys 34 more. How many?", "answer": "1200 + 34 = 1234\n#### 1,234"}]


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_loader_round_trip(tmp_path, suffix):
    path = tmp_path / f"math{suffix}"
    records = METAMATH + GSM8K
    text = "\n".join(json.dumps(r) for r in records) if suffix == ".jsonl" else json.dumps(records)
    path.write_text(text)
    problems = load_problems(path)
    assert [(p.question, p.answer, p.family) for p in problems] == [
        ("What is 2 + 3?", "5", "metamathqa"),
        ("Simplify 6/8.", "\\frac{3}{4}", "metamathqa"),
        ("Tom has 1200 apples and buys 34 more. How many?", "1,234", "gsm8k"),
    ]
    env = make_env("metamathqa", data_path=str(path), reward_rule="lenient")
    assert env.reset(seed=4) == "Simplify 6/8."  # 4 % 3 == 1
    assert env.step("The answer is: 0.75")[1] == 1.0
    env.reset(seed=2)
    assert env.step("1234")[1] == 1.0
    ragen = make_env("metamathqa", data_path=str(path))  # RAGEN's exact match against RAGEN's reference
    ragen.reset(seed=4)
    assert ragen.step("0.75")[1] == 0.0
    ragen.reset(seed=4)
    assert ragen.step("\\frac{3}{4}")[1] == 1.0
    ragen.reset(seed=2)
    assert ragen.step("1234")[1] == 0.0  # the GSM8K reference is "1,234"


@pytest.mark.parametrize(
    "record, message",
    [
        ({"prompt": "x"}, "expected MetaMathQA fields"),
        ({"query": "q", "response": "no final statement"}, "must be text containing 'The answer is:'"),
        ({"query": "q", "response": "The answer is: "}, "has nothing after"),  # RAGEN keeps it, unanswerable
        ({"question": "q", "answer": "12"}, "must be text containing '####'"),
        ({"question": "q", "answer": "#### "}, "has nothing after"),
        ({"question": "", "answer": "#### 1"}, "must be non-empty text"),
    ],
)
def test_loader_errors_name_the_field(tmp_path, record, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(METAMATH[0]) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        load_problems(path)
    assert f"{path}: record 1" in str(error.value)


def test_loader_keeps_the_question_as_stored_and_ragens_reference(tmp_path):
    path = tmp_path / "math.jsonl"
    records = [
        {"query": " What is 2 + 3?\n", "response": "The answer is: 4. No: The answer is: 5"},
        {"query": "q", "response": "The answer is:18"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records))
    first, second = load_problems(path)
    assert first.question == " What is 2 + 3?\n"  # RAGEN shows the query as is
    assert (first.answer, first.ragen_reference) == ("5", "4. No: The answer is: 5")  # last vs first marker
    assert (second.answer, second.ragen_reference) == ("18", "")
    env = make_env("metamathqa", data_path=str(path))
    assert env.reset(seed=0) == " What is 2 + 3?\n"
    assert env.step("5")[1] == 0.0  # RAGEN's reference is the text after the first marker
    lenient = make_env("metamathqa", data_path=str(path), reward_rule="lenient")
    lenient.reset(seed=1)
    assert lenient.step("18")[1] == 1.0


def test_loader_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_path"):
        MetaMathQAEnv(data_path=str(tmp_path / "nope.json"))


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


def test_tool_env_contract():
    from transformers.utils import get_json_schema

    schema = get_json_schema(MetaMathQAToolEnv().answer)
    assert schema["function"]["parameters"]["required"] == ["value"]
    assert schema["function"]["parameters"]["properties"]["value"]["type"] == "string"

    tool_env = MetaMathQAToolEnv(reward_rule="lenient")
    text = tool_env.reset(prompt=[], seed=12, env_config=json.dumps({"max_attempts": 3}))
    problem = tool_env.env.problem
    assert text.startswith(problem.question)
    assert tool_env.answer("").startswith("Invalid answer")
    assert tool_env.answer(str(int(problem.answer) + 1)).endswith("You have 2 attempt(s) left.")
    assert tool_env.answer(int(problem.answer)) == "Correct!"  # type: ignore[arg-type]
    assert tool_env.get_reward() == 0.5
    assert "already finished" in tool_env.answer(problem.answer)
    tool_env.reset(seed=12)  # default config: a new env with one attempt
    assert tool_env.get_reward() == 0.0 and tool_env.env.max_attempts == 1


def test_grpo_trainer_runs_the_answer_tool(tiny_tokenizer, tiny_model, tmp_path):
    """One GRPO step with `environment_factory`; the first turn of 2 rollouts is a scripted, correct tool call."""
    from trl_ragen2_envs.datasets import build_rows

    row = build_rows("metamathqa", "train", 1)[0]
    probe = MetaMathQAToolEnv()
    probe.reset(**row)  # the same row gives the trainer's environments the same problem
    calls = [("answer", {"value": probe.env.problem.answer})] * 2
    trainer, metrics = run_scripted_grpo_step(
        MetaMathQAToolEnv, row, calls, tiny_model, tiny_tokenizer, tmp_path, max_tool_calling_iterations=2
    )
    assert [env.get_reward() for env in trainer.environments] == [1.0, 1.0, 0.0, 0.0]
    assert metrics["rewards/MetaMathQAToolEnv/mean"] == pytest.approx(0.5)
    assert metrics["tools/call_frequency"] == pytest.approx(0.5)


def test_card_examples_are_what_the_environment_does():
    """The card's table of answers to `reset(seed=0)` under RAGEN's rule, checked against the environment."""
    from pathlib import Path

    card = Path(__file__).resolve().parent.parent / "docs" / "environments" / "metamathqa.md"
    lines = card.read_text(encoding="utf-8").splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("The answer is the final value"))
    table = lines[start + 2 :]  # after the blank line: the table, up to the next blank line
    rows = [line for line in table[: table.index("")] if line.startswith("| `")]
    assert len(rows) == 4
    for row in rows:
        answers, reward, done, observation = [cell.strip() for cell in row.strip().strip("|").split("|")]
        for answer in re.findall(r"`([^`]*)`", answers):
            env = make_env("metamathqa")
            question = env.reset(seed=0)
            got = env.step("" if answer == '""' else answer)
            assert got[1:3] == (float(reward), done.startswith("yes")), answer
            shown = re.match(r"`([^`]*)`", observation)
            assert got[0] == (shown.group(1) if shown else question), answer
