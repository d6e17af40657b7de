"""DeepCoder: Python programs judged by tests in a real sandbox (procedural problems, HumanEval, DeepCoder files)."""

from .env import DeepCoderEnv, DeepCoderToolEnv
from .extraction import assemble_program, extract_code, syntax_error
from .judging import CodeTest, TestOutcome, format_feedback, outputs_match, run_tests, values_match
from .problems import CodingProblem, load_deepcoder, load_humaneval
from .procedural import FAMILIES, generate_problem
from .sandbox import Execution, Sandbox, SandboxConfig


__all__ = [
    "FAMILIES",
    "CodeTest",
    "CodingProblem",
    "DeepCoderEnv",
    "DeepCoderToolEnv",
    "Execution",
    "Sandbox",
    "SandboxConfig",
    "TestOutcome",
    "assemble_program",
    "extract_code",
    "format_feedback",
    "generate_problem",
    "load_deepcoder",
    "load_humaneval",
    "outputs_match",
    "run_tests",
    "syntax_error",
    "values_match",
]
