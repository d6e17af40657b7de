"""Source conventions of `docs/architecture.md`: a test module imports helper modules, never another test module,
and code outside the sandbox uses its interface only."""

from __future__ import annotations

import ast
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = ("trl_ragen2", "envs", "tests", "benchmarks", "recipes")


# ---------------------------------------------------------------------------------------------------------------
# Test modules and helper modules

# `from .test_x import`, `from tests.test_x import`, `import tests.test_x`, `from tests import test_x` (also in the
# source strings a test runs in another interpreter)
TEST_MODULE_IMPORT = re.compile(
    r"\s*(?:from\s+(?:\.|tests\.)test_\w+\s+import"
    r"|import\s+(?:tests\.)?test_\w+"
    r"|from\s+(?:\.|tests)\s+import\s.*\btest_\w+)"
)


def imports_of_test_modules(text: str) -> list[str]:
    """The lines of `text` that import a test module (`test_*.py`)."""
    return [line.strip() for line in text.splitlines() if TEST_MODULE_IMPORT.match(line)]


def test_the_pattern_finds_each_way_of_importing_a_test_module():
    lines = ["from .test_plots import make_history", "    from tests.test_grpo_trainer import scripted_trainer",
             "import tests.test_cli", "from . import scripted, test_cli", "from tests import test_cli"]  # fmt: skip
    assert [imports_of_test_modules(line) for line in lines] == [[line.strip()] for line in lines]
    helpers = "from .scripted import dataset\nfrom tests.torchrun import torchrun\nimport pytest\n"
    assert imports_of_test_modules(helpers) == []


def test_test_modules_import_only_helper_modules():
    offenders = [
        f"{path.relative_to(ROOT)}: {line}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line in imports_of_test_modules(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "move what these lines import into a helper module of tests/ (a name without test_)"


# ---------------------------------------------------------------------------------------------------------------
# The sandbox's interface

SANDBOX = "trl_ragen2_envs.deepcoder.sandbox"
PACKAGES = {"envs": "trl_ragen2_envs", "trl_ragen2": "trl_ragen2"}  # folder -> import name


def imported_modules(path: Path) -> list[str]:
    """The absolute names of the modules a file imports from (relative imports resolved against its package)."""
    folder, *subfolders = path.relative_to(ROOT).parent.parts
    package = [PACKAGES.get(folder, folder), *subfolders]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1]
            names.append(".".join([*base, *([node.module] if node.module else [])]))
    return names


def test_code_outside_the_sandbox_uses_its_interface_only():
    """DeepCoder (and any other code task), the recipes and the benchmarks import
    `trl_ragen2_envs.deepcoder.sandbox`, never one of its modules; only the sandbox's own tests reach inside."""
    inside = ROOT / "envs" / "deepcoder" / "sandbox"
    paths = [
        path for folder in ("envs", "recipes", "benchmarks", "trl_ragen2") for path in (ROOT / folder).rglob("*.py")
    ]
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(paths)
        if inside not in path.parents
        for name in imported_modules(path)
        if name.startswith(SANDBOX + ".")
    ]
    assert offenders == []
    deepcoder = [name for path in (ROOT / "envs" / "deepcoder").glob("*.py") for name in imported_modules(path)]
    assert SANDBOX in deepcoder  # relative imports are resolved: DeepCoder's own import of the sandbox is seen
