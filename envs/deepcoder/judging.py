"""Tests of coding problems, how outputs are compared, and the feedback a failed attempt gets.

Three kinds of test ([`CodeTest`]):

- `stdio`: the program reads `input` on stdin; its stdout must match `output` token by token (whitespace
  and line breaks do not matter; numbers that parse as floats match within `FLOAT_TOLERANCE`);
- `function`: `fn_name(*args, **kwargs)` must return `expected` (or one of `also_accept`), compared as JSON
  values in this process (tuples equal lists, floats within `FLOAT_TOLERANCE`);
- `assertion`: test code (HumanEval's `check(candidate)` asserts) must not raise. It runs in this process after
  the problem's trusted `context` (HumanEval's prompt), calling `fn_name` in the sandbox (`assertions.py`).

Function and assertion tests call the program through a sandbox session (`Sandbox.serve`): only plain values
come back, rebuilt here, so every comparison uses Python's own `==` on built-in objects, and a returned object
cannot claim equality with everything. `run_tests` runs each test in its own sandboxed process and classifies
the outcome; the reward of an attempt is the fraction of tests passed.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from .assertions import run_assertion_test
from .sandbox import CandidateFailure, Execution, Sandbox


FLOAT_TOLERANCE = 1e-6
TEST_KINDS = ("stdio", "function", "assertion")


@dataclass(frozen=True)
class CodeTest:
    """One test of a kind in `TEST_KINDS`; only the fields of its kind are used (see the module docstring)."""

    kind: str
    input: str = ""  # stdio: stdin
    output: str = ""  # stdio: expected stdout
    fn_name: str = ""  # function: the function (or Solution method) to call; assertion: the one the test calls
    args: tuple = ()  # function: positional arguments (JSON values)
    kwargs: dict[str, Any] = field(default_factory=dict)  # function: keyword arguments
    expected: Any = None  # function: the return value
    also_accept: tuple = ()  # function: other accepted return values
    code: str = ""  # assertion: the test code (trusted: it runs in the judge's process)
    context: str = ""  # assertion: trusted code run before it, e.g. HumanEval's prompt with its helpers

    def __post_init__(self) -> None:
        if self.kind not in TEST_KINDS:
            raise ValueError(f"test kind must be one of {TEST_KINDS}, got {self.kind!r}")
        if self.kind in ("function", "assertion") and not self.fn_name:
            raise ValueError(f"a {self.kind} test needs fn_name (the function it calls), got {self.fn_name!r}")
        if self.kind == "assertion" and not self.code.strip():
            raise ValueError("an assertion test needs code")

    def to_dict(self) -> dict[str, Any]:
        """The test as a plain dict (the inverse of `from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CodeTest:
        """A test from a `to_dict` dict, e.g. after a JSON round trip (lists become the tuple fields)."""
        values = dict(data)
        values["args"] = tuple(values.get("args", ()))
        values["also_accept"] = tuple(values.get("also_accept", ()))
        return cls(**values)


@dataclass(frozen=True)
class TestOutcome:
    """How one test went: pass/fail, a status, feedback, the program's shortened output and wall-clock seconds."""

    passed: bool
    status: str  # passed, wrong_answer, runtime_error, timeout, memory_limit, output_limit, not_run
    detail: str = ""  # what went wrong, for the feedback
    got: str = ""  # what the program produced (stdout or the returned value), shortened
    wall_s: float = 0.0


# ---------------------------------------------------------------------------------------------------------------
# Comparison (pure functions)


def _numbers_close(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)


def outputs_match(actual: str, expected: str) -> bool:
    """Token-wise comparison of stripped outputs; float tokens may differ by `FLOAT_TOLERANCE`."""
    got, want = actual.split(), expected.split()
    return len(got) == len(want) and all(g == w or _numbers_close(g, w) for g, w in zip(got, want, strict=True))


def values_match(actual: Any, expected: Any) -> bool:
    """Equality of JSON values: lists (and tuples) item by item, dicts key by key, numbers within tolerance."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if isinstance(expected, int) and isinstance(actual, int):
            return actual == expected
        return math.isclose(actual, expected, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE) or (
            math.isnan(actual) and math.isnan(expected)
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(expected)
            and all(values_match(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == {str(k) for k in expected}
            and all(values_match(actual[str(k)], v) for k, v in expected.items())
        )
    return actual == expected


def as_json_value(value: Any) -> Any:
    """A plain value as the JSON value it stands for: tuples and sets become lists (sets sorted when they can
    be), dict keys strings; what `values_match` compares with a test's JSON `expected`."""
    if isinstance(value, (list, tuple)):
        return [as_json_value(item) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [as_json_value(item) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, dict):
        return {str(key): as_json_value(item) for key, item in value.items()}
    return value


def shorten(text: str, limit: int = 200) -> str:
    """`text` (or the repr of a non-string) cut to about `limit` characters, its full length noted when cut."""
    text = text if isinstance(text, str) else repr(text)
    return text if len(text) <= limit else text[: limit - 15] + f"... ({len(text)} chars)"


# ---------------------------------------------------------------------------------------------------------------
# Running tests


def _failure(execution: Execution, timeout_s: float) -> TestOutcome | None:
    """The outcome when the process itself failed (time, memory, crash), else None."""
    wall = execution.wall_s
    if execution.memory_exceeded:
        return TestOutcome(False, "memory_limit", "memory limit exceeded (the program as a whole)", wall_s=wall)
    if execution.timed_out:
        return TestOutcome(False, "timeout", f"time limit exceeded ({timeout_s:g} s)", wall_s=wall)
    if execution.signal_name == "SIGXCPU" or (execution.signal_name == "SIGKILL" and not execution.killed_by_judge):
        return TestOutcome(False, "timeout", f"CPU time limit exceeded ({execution.signal_name})", wall_s=wall)
    last_line = execution.stderr.strip().splitlines()[-1] if execution.stderr.strip() else ""
    if "MemoryError" in last_line:
        return TestOutcome(False, "memory_limit", "memory limit exceeded (MemoryError)", wall_s=wall)
    if "File too large" in last_line or execution.stdout_truncated:
        return TestOutcome(False, "output_limit", "output limit exceeded", wall_s=wall)
    return None


def judge(test: CodeTest, execution: Execution, timeout_s: float) -> TestOutcome:
    """Classify one execution of a stdio test."""
    if test.kind != "stdio":
        raise ValueError(f"judge() classifies stdio executions; {test.kind} tests are judged by run_test")
    failure = _failure(execution, timeout_s)
    if failure is not None:
        return failure
    wall = execution.wall_s
    if execution.returncode != 0:
        detail = shorten(execution.stderr.strip()[-600:], 600) or f"exit code {execution.returncode}"
        detail = "; ".join([*execution.notes, detail]) if execution.notes else detail
        return TestOutcome(False, "runtime_error", detail, shorten(execution.stdout), wall)
    passed = outputs_match(execution.stdout, test.output)
    return TestOutcome(passed, "passed" if passed else "wrong_answer", got=shorten(execution.stdout), wall_s=wall)


def _failed_call(failure: CandidateFailure, execution: Execution, timeout_s: float) -> TestOutcome:
    """The outcome of a session whose program did not answer a call (timed out, died, or replied garbage)."""
    wall = execution.wall_s
    if failure.kind == "too_large":
        return TestOutcome(False, "output_limit", f"the returned value is too large ({failure})", wall_s=wall)
    if failure.kind == "malformed":
        return TestOutcome(False, "runtime_error", str(failure), wall_s=wall)
    if failure.kind == "timeout":
        return TestOutcome(False, "timeout", f"time limit exceeded ({timeout_s:g} s)", wall_s=wall)
    outcome = _failure(execution, timeout_s)
    if outcome is not None:
        return outcome
    stderr = execution.stderr.strip()[-400:]
    ended = f"the program ended ({_exit_status(execution)}) without answering the call"
    reason = "; ".join([*execution.notes, ended])
    return TestOutcome(False, "runtime_error", shorten(f"{reason}\n{stderr}".strip(), 600), wall_s=wall)


def _exit_status(execution: Execution) -> str:
    """How the process ended, in words: `exit code 1`, `SIGSEGV`, or `still running` (ended by the judge)."""
    if execution.signal_name is not None:
        return execution.signal_name
    return "still running" if execution.returncode is None else f"exit code {execution.returncode}"


def _raised(error: Exception, test: CodeTest) -> tuple[str, str]:
    """`(status, detail)` for an exception out of a call or out of the test code."""
    if isinstance(error, AssertionError) and test.kind == "assertion":
        return "wrong_answer", "an assertion of the test failed"
    if isinstance(error, MemoryError):
        return "memory_limit", "memory limit exceeded (MemoryError)"
    trace = getattr(error, "candidate_traceback", "")
    return "runtime_error", shorten(trace or f"{type(error).__name__}: {error}", 600)


def run_test(sandbox: Sandbox, program: str, test: CodeTest, *, start_attempts: int = 2) -> TestOutcome:
    """Run one test of `program` in its own sandboxed process and judge it in this process.

    A sandbox that did not come up (not one line of the program ran: the machine was out of processes or
    memory, or start-up outlasted the time limit on a busy machine) is the judge's failure, not the program's:
    it is started again, up to `start_attempts` times in all, and the test is `not_run` if it never starts.
    """
    for _ in range(start_attempts):
        try:
            outcome = _run_test(sandbox, program, test)
        except OSError as error:  # the machine could not start the sandbox (no processes, files or memory left)
            outcome = TestOutcome(False, "not_run", f"the sandbox could not start: {error}")
        if outcome.status != "not_run":
            return outcome
    return outcome


def _not_started(execution: Execution) -> TestOutcome:
    """The outcome of an execution whose sandbox never ran the program."""
    reason = "; ".join([*execution.notes, execution.stderr.strip()[-400:]]).strip("; ")
    return TestOutcome(
        False, "not_run", shorten(f"the sandbox could not start: {reason}", 600), wall_s=execution.wall_s
    )


def _run_test(sandbox: Sandbox, program: str, test: CodeTest) -> TestOutcome:
    timeout_s = sandbox.config.timeout_s
    if test.kind == "stdio":
        execution = sandbox.run(program, stdin=test.input)
        return judge(test, execution, timeout_s) if execution.started else _not_started(execution)
    failure, status, detail, got = None, "passed", "", ""
    with sandbox.serve(program, test.fn_name) as session:
        try:
            if test.kind == "function":
                value = session(*test.args, **test.kwargs)
                got = shorten(repr(value))
                accepted = (test.expected, *test.also_accept)
                if not any(values_match(as_json_value(value), expected) for expected in accepted):
                    status = "wrong_answer"
            else:
                run_assertion_test(session, test.fn_name, test.code, test.context)
        except CandidateFailure as error:
            failure = error
        except Exception as error:  # raised by the program (mirrored here) or by the test code itself
            status, detail = _raised(error, test)
    execution = session.execution
    if not execution.started:
        return _not_started(execution)
    if failure is not None:
        return _failed_call(failure, execution, timeout_s)
    return TestOutcome(status == "passed", status, detail, got, execution.wall_s)


def run_tests(
    sandbox: Sandbox,
    program: str,
    tests: list[CodeTest] | tuple[CodeTest, ...],
    *,
    max_workers: int = 1,
    total_timeout_s: float | None = None,
) -> list[TestOutcome]:
    """Run every test in its own process (`max_workers` at a time). Tests not started within
    `total_timeout_s` are reported as `not_run` (failed)."""
    deadline = None if total_timeout_s is None else time.monotonic() + total_timeout_s

    def one(test: CodeTest) -> TestOutcome:
        if deadline is not None and time.monotonic() > deadline:
            return TestOutcome(False, "not_run", f"not run: the {total_timeout_s:g} s budget of the attempt is spent")
        return run_test(sandbox, program, test)

    if max_workers <= 1 or len(tests) <= 1:
        return [one(test) for test in tests]
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(one, tests))


# ---------------------------------------------------------------------------------------------------------------
# Feedback


def describe_test(test: CodeTest) -> list[str]:
    """Feedback lines saying what a test checks: input and expected output, the call, or the assertion."""
    if test.kind == "stdio":
        return [f"input: {shorten(test.input)!r}", f"expected output: {shorten(test.output)!r}"]
    if test.kind == "function":
        call_args = [repr(a) for a in test.args] + [f"{k}={v!r}" for k, v in test.kwargs.items()]
        return [f"call: {test.fn_name}({shorten(', '.join(call_args))})", f"expected: {shorten(repr(test.expected))}"]
    # the test's own last statement, before the closing `check(entry_point)` call of HumanEval programs
    lines = [line.strip() for line in test.code.strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[-1].startswith("check("):
        lines.pop()
    return [f"test: {shorten(lines[-1] if lines else '')}"]


def format_feedback(tests, outcomes: list[TestOutcome], max_shown: int = 3) -> str:
    """ "Passed k/n tests." and, for the first failures, the test, what was expected and what happened."""
    passed = sum(o.passed for o in outcomes)
    lines = [f"Passed {passed}/{len(outcomes)} tests."]
    failures = [(i, t, o) for i, (t, o) in enumerate(zip(tests, outcomes, strict=True)) if not o.passed]
    for i, test, outcome in failures[:max_shown]:
        lines.append(f"Test {i + 1} failed ({outcome.status.replace('_', ' ')}):")
        lines += [f"  {line}" for line in describe_test(test)]
        if outcome.status == "wrong_answer" and test.kind != "assertion":
            lines.append(f"  got: {outcome.got!r}" if test.kind == "stdio" else f"  got: {outcome.got}")
        elif outcome.detail:
            lines += [f"  {line}" for line in outcome.detail.splitlines()[-6:]]
    if len(failures) > max_shown:
        lines.append(f"({len(failures) - max_shown} more failed tests not shown)")
    return "\n".join(lines)
