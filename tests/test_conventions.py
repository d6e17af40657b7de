"""Source conventions of `docs/architecture.md`: a test module imports helper modules, never another test module,
every section divider has the one style, and code outside the sandbox uses its interface only."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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
# Section dividers

# The one divider: a full-line comment of dashes ending at column 113 (also when indented), then a comment line at
# the same indentation naming the section (`# Section name`); no closing rule.
DIVIDER_END_COLUMN = 113
REPEATED_MARK = re.compile(r"([-=#*~_])\1{3,}")  # four of one mark in a row: what every divider style draws with
HASH_HEADER = re.compile(r"#{2,}(\s|$)")  # `## name`, `### name`: a header drawn with the comment marks themselves
TRL_SECTION = re.compile(r"#{4} [A-Z]")  # a recipe's section header (Model, Trainer, ...), as in TRL's examples


def divider_problems(source: str, recipe: bool = False) -> list[str]:
    """`line: comment` for each comment of `source` that draws a divider other than the one style."""
    lines = source.splitlines()
    problems = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT or not (
            REPEATED_MARK.search(token.string) or HASH_HEADER.match(token.string)
        ):
            continue
        row, column = token.start
        indent = lines[row - 1][:column]
        own_line = indent.strip() == ""
        if recipe and own_line and TRL_SECTION.match(token.string):
            continue
        previous = lines[row - 2].strip() if row >= 2 else ""
        following = lines[row] if row < len(lines) else ""
        names_a_section = following.startswith(f"{indent}# ") and not REPEATED_MARK.search(following)
        if own_line and token.string == "# " + "-" * (DIVIDER_END_COLUMN - column - 2):
            if names_a_section and not previous.startswith("#"):
                continue
        problems.append(f"{row}: {token.string}")
    return problems


def test_each_other_divider_style_is_reported():
    rule = "# " + "-" * 111
    good = f"x = 1\n\n\n{rule}\n# Section\n\ny = 2\n\n\nclass A:\n    {rule[4:]}\n    # Methods\n\n    z = 3\n"
    assert divider_problems(good) == []
    others = {
        "closing rule": f"{rule}\n# Section\n{rule}\n",
        "hash banner": f"{'#' * 60}\n# Section\n{'#' * 60}\n",
        "hash header": "### prompts\n",
        "two-hash header": "## Section\n",
        "name after the dashes": "# ------------------------------------------------------------ section\n",
        "name between dashes": "# -- section --------------------------------------------------------------\n",
        "equals signs": f"# {'=' * 111}\n# Section\n",
        "a rule of another length": f"{rule}--\n# Section\n",
        "a rule naming nothing": f"{rule}\n\nx = 1\n",
        "a rule after code on its line": f"x = 1  {rule}\n# Section\n",
    }
    for style, source in others.items():
        assert divider_problems(source) != [], style
    recipe = "def main():\n    #### Model\n    x = 1\n"
    assert divider_problems(recipe, recipe=True) == []
    assert divider_problems(recipe) != []


def test_every_section_divider_has_the_one_style():
    problems = []
    for folder in SOURCE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found = divider_problems(path.read_text(encoding="utf-8"), recipe=folder == "recipes")
            problems += [f"{path.relative_to(ROOT)}:{problem}" for problem in found]
    assert problems == [], "draw these dividers as a rule of dashes to column 113 and a `# Name` line below it"


# ---------------------------------------------------------------------------------------------------------------
# The sandbox's interface

SANDBOX = "trl_ragen2_envs.sandbox"
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
    """DeepCoder (and any other code task), the recipes and the benchmarks import `trl_ragen2_envs.sandbox`, never
    one of its modules; only the sandbox's own tests reach inside."""
    inside = ROOT / "envs" / "sandbox"
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
