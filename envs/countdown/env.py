"""Countdown: combine the given numbers with + - * / into an expression that equals the target.

One episode is one answer. The observation is RAGEN's `Target: 24, nums: [3, 5, 8, 1]`; the answer is an
arithmetic expression such as `(8 - 5) * (1 + 7)`. Two reward rules (`reward_rule`):

`"ragen"` (default): RAGEN's Countdown scoring, reproduced exactly without `eval`.

- 0.0 unless the digit runs of the answer, read as integers, are exactly the given numbers (a multiset; any other
  text is ignored, so `3 5 8 1` or `(3+5)*(8-1` pass this check);
- then 1.0 if Python evaluates the answer to within 1e-5 of the target, else 0.1 (a syntax error, a division by
  zero or any other failure included).

Every answer ends the episode. RAGEN evaluates with `eval`; here [`python_arithmetic.evaluate`] reaches the same
value for Python's arithmetic (literals, parentheses, `+ - * / // % ** << >> & | ^ ~`) within bounds on size,
nesting and integer width, and refuses the rest (names, calls, attributes, comparisons...), which then scores 0.1
(see the card's "Differences from RAGEN" for what that changes).

`"strict"`: the library's own rule, for a clean signal. The answer must be an expression of a small grammar:
non-negative integer literals (at most `MAX_LITERAL_DIGITS` digits), binary `+ - * /`, parentheses (nesting at
most `MAX_NESTING` deep) and unary minus, at most `MAX_EXPRESSION_CHARS` characters, evaluated exactly with
`fractions.Fraction` (so `8 / (3 - 8 / 3) = 24` counts). 1.0 when it uses exactly the given numbers and equals the
target; 0.1 when it uses them but has another value (division by zero included); 0.0 when it uses other numbers.
An answer outside the grammar is an invalid action: reward 0, state unchanged, episode not over (the rollout's turn
budget, 1 turn in RAGEN, decides whether the model may answer again).

Problems come from a procedural generator (default) or a local file in the Countdown-Tasks-3to4 format. The
generator draws 3-4 integers in 1-99 from the environment's generator, builds a random expression over all of
them, and keeps it when its value is a positive integer no larger than `max_target` (default 1000, so targets
stay mental-arithmetic sized; `None` lifts the bound); `plus_minus_only` restricts the operators to + and -,
which reproduces RAGEN's filter to +/- solvable problems. With a file, the problem is
`problems[seed % len(problems)]`, and `plus_minus_only` keeps only the +/- solvable records, as RAGEN does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..base import StepResult, TextEnv, finished_step, invalid_step, not_started_step
from ..problem_files import load_problem_file
from ..tool_adapter import ToolEnvAdapter
from .rules import (
    CORRECT_REWARD,
    FORMAT_REWARD,
    MAX_LITERAL_DIGITS,
    REWARD_RULES,
    ExpressionError,
    evaluate_expression,
    ragen_score,
    score_answer,  # noqa: F401 -- public here as before: the reward of an answer text under a rule
    score_evaluation,
)


# ---------------------------------------------------------------------------------------------------------------
# Prompts

INSTRUCTIONS = (
    "You are solving the Countdown puzzle. Combine every number in the list exactly once with +, -, * and / "
    "(parentheses allowed) into an expression whose value is the target. Put only the expression in the answer. "
    "Example: for target 4 and nums [3, 5, 2], <think>2 + 5 = 7 and 7 - 3 = 4.</think><answer>2 + 5 - 3</answer>"
)
TOOL_INSTRUCTIONS = (
    "Use every number in nums exactly once with +, -, * and / (parentheses allowed) to reach the target, "
    "then submit the expression with the `answer` tool."
)


def render_problem(target: int, nums: list[int] | tuple[int, ...]) -> str:
    """RAGEN's observation text."""
    return f"Target: {target}, nums: {list(nums)}"


# ---------------------------------------------------------------------------------------------------------------
# Game logic (pure functions)


def solvable_with_plus_minus(target: int, nums: list[int] | tuple[int, ...]) -> bool:
    """Whether some choice of signs gives `±n1 ± n2 ± ... = target` (RAGEN's data filter)."""
    return any(
        sum(sign * number for sign, number in zip(signs, nums, strict=True)) == target
        for signs in itertools.product((1, -1), repeat=len(nums))
    )


@dataclass(frozen=True)
class CountdownProblem:
    """One puzzle; `solution` is an expression reaching the target when known (generated problems)."""

    target: int
    nums: tuple[int, ...]
    solution: str | None = None


def generate_problem(
    rng: np.random.Generator,
    *,
    min_numbers: int = 3,
    max_numbers: int = 4,
    max_number: int = 99,
    max_target: int | None = 1000,
    plus_minus_only: bool = False,
) -> CountdownProblem:
    """Draw numbers and a random expression over all of them until its value is a positive integer target."""
    operators = ("+", "-") if plus_minus_only else ("+", "-", "*", "/")
    count = int(rng.integers(min_numbers, max_numbers + 1))  # drawn once, so counts stay uniform
    while True:  # rejection sampling; most configurations keep a large share of the draws
        nums = tuple(int(n) for n in rng.integers(1, max_number + 1, size=count))
        drawn = _random_expression(rng, nums, operators)
        if drawn is None:
            continue
        text, value = drawn
        if value.denominator == 1 and value > 0 and (max_target is None or value <= max_target):
            return CountdownProblem(target=int(value), nums=nums, solution=text)


def _random_expression(
    rng: np.random.Generator, nums: tuple[int, ...], operators: tuple[str, ...]
) -> tuple[str, Fraction] | None:
    """A random expression using every number once, with its value; `None` if it divides by zero."""
    # Combining random pairs until one expression is left gives a random binary tree over the numbers.
    parts = [(str(n), Fraction(n)) for n in nums]
    while len(parts) > 1:
        i, j = (int(k) for k in rng.choice(len(parts), size=2, replace=False))
        (left_text, left), (right_text, right) = parts[i], parts[j]
        operator = operators[int(rng.integers(len(operators)))]
        if operator == "+":
            value = left + right
        elif operator == "-":
            value = left - right
        elif operator == "*":
            value = left * right
        elif right == 0:
            return None
        else:
            value = left / right
        parts = [part for k, part in enumerate(parts) if k not in (i, j)]
        parts.append((f"({left_text} {operator} {right_text})", value))
    text, value = parts[0]
    return text[1:-1], value


def problem_from_record(record: dict[str, Any], *, where: str) -> CountdownProblem:
    """A problem from a Countdown-Tasks-3to4 record (`target`, `nums`); `where` locates it in error messages."""
    for key in ("target", "nums"):
        if key not in record:
            raise ValueError(f"{where}: missing field {key!r} (Countdown records need 'target' and 'nums')")
    target, nums = record["target"], record["nums"]

    def as_int(value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where}: field {field!r} must be an integer, got {value!r}")
        if int(value) != value:
            raise ValueError(f"{where}: field {field!r} must be an integer, got {value!r}")
        return int(value)

    if isinstance(nums, (str, bytes, dict)) or not hasattr(nums, "__iter__"):
        raise ValueError(f"{where}: field 'nums' must be a list of integers, got {nums!r}")
    numbers = tuple(as_int(n, "nums") for n in nums)
    if not numbers or any(n < 0 for n in numbers):
        raise ValueError(f"{where}: field 'nums' must be a non-empty list of non-negative integers, got {nums!r}")
    if any(len(str(n)) > MAX_LITERAL_DIGITS for n in numbers):
        raise ValueError(f"{where}: numbers in 'nums' must have at most {MAX_LITERAL_DIGITS} digits, got {nums!r}")
    return CountdownProblem(target=as_int(target, "target"), nums=numbers)


def plus_minus_solvable(problem: CountdownProblem) -> bool:
    """Whether a problem can be solved with + and - alone (RAGEN's data filter)."""
    return solvable_with_plus_minus(problem.target, problem.nums)


def load_problems(
    path: str | Path, *, max_problems: int | None = None, plus_minus_only: bool = False
) -> tuple[CountdownProblem, ...]:
    """Countdown-Tasks-3to4 records from a local .jsonl, .json or .parquet file (cached per file version).

    `max_problems` keeps the first records (RAGEN uses 20,000) before `plus_minus_only` filters them.
    """
    return load_problem_file(
        path,
        problem_from_record,
        what="Countdown problems",
        expected="a Countdown-Tasks-3to4 file",
        max_records=max_problems,
        keep=plus_minus_solvable if plus_minus_only else None,
    )


# ---------------------------------------------------------------------------------------------------------------
# Env class


class CountdownEnv(TextEnv):
    """Countdown puzzles, generated (default) or read from `data_path`. See the module docstring for the rules."""

    name = "countdown"

    def __init__(
        self,
        data_path: str | None = None,
        *,
        reward_rule: str = "ragen",
        plus_minus_only: bool = False,
        min_numbers: int = 3,
        max_numbers: int = 4,
        max_number: int = 99,
        max_target: int | None = 1000,
        max_problems: int | None = None,
    ) -> None:
        super().__init__()
        if reward_rule not in REWARD_RULES:
            raise ValueError(
                f"reward_rule must be one of {REWARD_RULES}, got {reward_rule!r}; 'ragen' scores as RAGEN's "
                "Countdown (the paper's numbers), 'strict' checks a small + - * / grammar exactly"
            )
        self.reward_rule = reward_rule
        if not 2 <= min_numbers <= max_numbers <= 8:
            raise ValueError(
                f"need 2 <= min_numbers <= max_numbers <= 8, got min_numbers={min_numbers}, max_numbers={max_numbers}"
            )
        if not 1 <= max_number < 10**MAX_LITERAL_DIGITS:
            raise ValueError(f"max_number must be in [1, {10**MAX_LITERAL_DIGITS - 1}], got {max_number}")
        if max_target is not None and max_target < 1:
            raise ValueError(f"max_target must be >= 1 or None (no bound), got {max_target}")
        self.generator_config = dict(
            min_numbers=min_numbers,
            max_numbers=max_numbers,
            max_number=max_number,
            max_target=max_target,
            plus_minus_only=plus_minus_only,
        )
        self.problems = (
            load_problems(data_path, max_problems=max_problems, plus_minus_only=plus_minus_only)
            if data_path is not None
            else None
        )
        self.problem: CountdownProblem | None = None
        self.done = False
        self.success = False
        self.observation = ""

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS

    def reset(self, seed: int | None = None) -> str:
        self.seed_rng(seed)
        if self.problems is not None:
            self.problem = self.pick_for_seed(self.problems, seed)
        else:
            self.problem = generate_problem(self.rng, **self.generator_config)
        self.done, self.success = False, False
        self.observation = render_problem(self.problem.target, self.problem.nums)
        return self.observation

    def step(self, action: str) -> StepResult:
        """Score one answer; a valid one ends the episode."""
        if self.problem is None:
            return not_started_step()
        if self.done:
            return finished_step(self.observation, self.success, "the episode is over")
        if self.reward_rule == "ragen":
            return self._ragen_step(action)
        try:
            evaluation = evaluate_expression(action)
        except ExpressionError as error:
            return invalid_step(self.observation, f"not an accepted expression: {error}")
        reward = score_evaluation(evaluation, self.problem.target, self.problem.nums)
        self.done, self.success = True, reward == CORRECT_REWARD
        if self.success:
            self.observation = f"Correct: {action.strip()} = {self.problem.target}."
        elif reward > 0:
            shown = "undefined (division by zero)" if evaluation.value is None else str(evaluation.value)
            self.observation = f"Wrong value: {action.strip()} = {shown}, not {self.problem.target}."
        else:
            self.observation = f"Wrong numbers: the expression must use each of {list(self.problem.nums)} once."
        info = {"success": self.success, "action_is_valid": True, "action_is_effective": reward > 0}
        return self.observation, reward, True, info

    def _ragen_step(self, action: str) -> StepResult:
        """RAGEN's step: every answer is valid and ends the episode; its reply names the points."""
        reward = ragen_score(action, self.problem.target, self.problem.nums)
        self.done, self.success = True, reward == CORRECT_REWARD
        points = {CORRECT_REWARD: "1", FORMAT_REWARD: "0.1", 0.0: "0"}[reward]  # RAGEN's values are 1, 0.1 and 0
        self.observation = f"Your answer get {points} points."
        info = {"success": self.success, "action_is_valid": True, "action_is_effective": reward > 0}
        return self.observation, reward, True, info

    def render(self) -> str:
        return self.observation


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


class CountdownToolEnv(ToolEnvAdapter):
    """Countdown for `trl.GRPOTrainer(environment_factory=CountdownToolEnv)`: one `answer` tool.

    `reset(**row)` reads `seed` and the optional `env_config` (JSON text or dict of `CountdownEnv` keywords, e.g.
    `reward_rule`) from the dataset row; the reward is the environment's (1.0, 0.1 or 0).
    """

    env_class = CountdownEnv
    tool_instructions = TOOL_INSTRUCTIONS
    reset_layout = "{observation}\n{instructions}"
    not_started_reply = "No puzzle is loaded yet."
    episode_over_reply = "The puzzle is already answered; no further answers are scored."
    invalid_reply = "Invalid expression ({reason}). Try again."

    def answer(self, expression: str) -> str:
        """Submit the final arithmetic expression for the current Countdown puzzle.

        Args:
            expression: An expression over the given numbers, each used exactly once, with + - * / and
                parentheses, for example "(8 - 5) * (1 + 7)".

        Returns:
            Whether the expression reaches the target, or why it could not be read.
        """
        return self._act(expression)
