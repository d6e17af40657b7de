"""DeepCoder: Python programs judged by tests in a real sandbox (procedural problems, HumanEval, DeepCoder files).

Modules: `problems`, `procedural`, `families` + `families_search` (the problems), `extraction` (code out of a
reply), `judging` + `assertions` (the tests and their verdicts), `env` (`DeepCoderEnv`, registered as
`make_env("deepcoder")`, and the TRL tool adapter `DeepCoderToolEnv`), and `sandbox/`, the package that runs the
programs (`trl_ragen2_envs.deepcoder.sandbox`: `Sandbox`, `SandboxConfig`, ...).
"""

from .env import DeepCoderEnv, DeepCoderToolEnv
from .extraction import assemble_program, extract_code, syntax_error
from .judging import CodeTest, TestOutcome, format_feedback, outputs_match, run_tests, values_match
from .problems import CodingProblem, load_deepcoder, load_humaneval
from .procedural import FAMILIES, generate_problem


def sandbox_isolation(**env_config) -> str:
    """How `DeepCoderEnv(**env_config)` would isolate programs here (probed once), for logs and model cards."""
    return DeepCoderEnv(**env_config).isolation


__all__ = [
    "FAMILIES",
    "CodeTest",
    "CodingProblem",
    "DeepCoderEnv",
    "DeepCoderToolEnv",
    "TestOutcome",
    "assemble_program",
    "extract_code",
    "format_feedback",
    "generate_problem",
    "load_deepcoder",
    "load_humaneval",
    "outputs_match",
    "run_tests",
    "sandbox_isolation",
    "syntax_error",
    "values_match",
]
