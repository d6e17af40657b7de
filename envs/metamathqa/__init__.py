"""MetaMathQA: answer a math word problem; retries pay less.

Modules: `env` (`MetaMathQAEnv`, registered as `make_env("metamathqa")`, the TRL tool adapter `MetaMathQAToolEnv`,
answer extraction and matching, the procedural problems and the problem-file loader) and `judge` (math-verify's
equivalence judgement under a wall-clock budget, from any thread).
"""

from .env import (
    PROBLEM_FAMILIES,
    REWARD_RULES,
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
from .judge import math_verify_verdict


__all__ = [
    "PROBLEM_FAMILIES",
    "REWARD_RULES",
    "MathProblem",
    "MetaMathQAEnv",
    "MetaMathQAToolEnv",
    "answers_match",
    "extract_answer",
    "generate_problem",
    "load_problems",
    "math_verify_verdict",
    "normalize_answer",
    "numeric_value",
    "ragen_answers_match",
    "ragen_reference",
]
