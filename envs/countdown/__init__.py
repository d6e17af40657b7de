"""Countdown: combine the given numbers with + - * / into an expression that equals the target.

Modules: `env` (`CountdownEnv`, registered as `make_env("countdown")`, the TRL tool adapter `CountdownToolEnv`,
the problem generator and the problem-file loader), `rules` (the two reward rules, pure functions of the answer)
and `python_arithmetic` (the safe evaluator of Python arithmetic that RAGEN's rule scores with instead of `eval`).
"""

from .env import (
    CountdownEnv,
    CountdownProblem,
    CountdownToolEnv,
    generate_problem,
    load_problems,
    solvable_with_plus_minus,
)
from .rules import REWARD_RULES, score_answer


__all__ = [
    "REWARD_RULES",
    "CountdownEnv",
    "CountdownProblem",
    "CountdownToolEnv",
    "generate_problem",
    "load_problems",
    "score_answer",
    "solvable_with_plus_minus",
]
