"""Every name the README, the docs, the recipes and the notebooks import from `trl_ragen2` or `trl_ragen2_envs`
imports, so a moved or renamed name fails here rather than in a reader's session.

What is read:

- the import statements (`from trl_ragen2... import ...`, `import trl_ragen2...`) of the fenced code blocks of
  `README.md` and `docs/**/*.md`, of `recipes/*.py` and of the code cells of `notebooks/*.ipynb`;
- the modules run with `python -m trl_ragen2...` in those places;
- the dotted names in the pages' inline code (`trl_ragen2_envs.sokoban.SokobanToolEnv`): a module, or a module and
  the attributes after it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import textwrap
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent

DOTTED = r"trl_ragen2(?:_envs)?(?:\.\w+)*"
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$", re.M | re.S
)
FROM_IMPORT = re.compile(rf"^[ \t]*from[ \t]+(?P<module>{DOTTED})[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n]+)", re.M)
PLAIN_IMPORT = re.compile(rf"^[ \t]*import[ \t]+(?P<modules>{DOTTED}(?:[ \t]*,[ \t]*[\w.]+)*)", re.M)
RUN_MODULE = re.compile(rf"python3? -m (?P<module>{DOTTED})")
INLINE_CODE = re.compile(rf"`(?:python3? -m )?(?P<dotted>{DOTTED})[^`\n]*`")


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def code_of(path: Path) -> list[str]:
    """The code of a file: the fenced blocks of a page (dedented), a recipe's source, a notebook's code cells."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return [textwrap.dedent(match.group("body")) for match in FENCE.finditer(text)]
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    return [text]


def imported_names(code: str) -> list[str]:
    """`module:name` for each name of each `from trl_ragen2... import` line, `module:` for `import trl_ragen2...`."""
    found = []
    for match in FROM_IMPORT.finditer(code):
        names = re.sub(r"#[^\n]*", "", match.group("names")).strip("() \t\n")
        for entry in names.split(","):
            name = entry.split(" as ")[0].strip()
            if name and name != "*":
                found.append(f"{match.group('module')}:{name}")
    for match in PLAIN_IMPORT.finditer(code):
        modules = [entry.split(" as ")[0].strip() for entry in match.group("modules").split(",")]
        found += [f"{module}:" for module in modules if re.fullmatch(DOTTED, module)]
    return found


def missing_import(entry: str) -> str | None:
    """Why `module:name` (or `module:`) does not import, or None when it does."""
    module_name, _, name = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        return f"import {module_name}: {error}"
    if not name or hasattr(module, name):
        return None
    try:
        importlib.import_module(f"{module_name}.{name}")  # a submodule (`from trl_ragen2_envs import datasets`)
    except ModuleNotFoundError as error:
        if error.name != f"{module_name}.{name}":
            return f"from {module_name} import {name}: {error}"
        return f"from {module_name} import {name}: no such name"
    return None


def missing_dotted(dotted: str) -> str | None:
    """Why `a.b.c` names no module and no attribute of a module, or None when it does."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and module_name.startswith(error.name):
                continue  # not a module: try the shorter name
            return f"{dotted}: {error}"
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return f"{dotted}: {'.'.join(parts[:cut])} has no attribute {attribute!r}"
            obj = getattr(obj, attribute)
        return None
    return f"{dotted}: no such module"


def sources() -> list[Path]:
    return [*markdown_pages(), *sorted((ROOT / "recipes").glob("*.py")), *sorted((ROOT / "notebooks").glob("*.ipynb"))]


def label(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---------------------------------------------------------------------------------------------------------------
# The checks


@pytest.mark.parametrize("path", sources(), ids=label)
def test_every_imported_name_imports(path):
    entries = [entry for code in code_of(path) for entry in imported_names(code)]
    problems = [problem for entry in dict.fromkeys(entries) if (problem := missing_import(entry))]
    assert problems == [], f"{label(path)} imports names that do not import:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", sources(), ids=label)
def test_every_module_run_with_python_m_exists(path):
    text = path.read_text(encoding="utf-8")
    modules = dict.fromkeys(match.group("module") for match in RUN_MODULE.finditer(text))
    problems = [module for module in modules if importlib.util.find_spec(module) is None]
    assert problems == [], f"{label(path)} runs modules that do not exist: {problems}"


@pytest.mark.parametrize("path", markdown_pages(), ids=label)
def test_every_dotted_name_in_the_prose_resolves(path):
    prose = FENCE.sub("", path.read_text(encoding="utf-8"))
    names = dict.fromkeys(match.group("dotted") for match in INLINE_CODE.finditer(prose))
    problems = [problem for name in names if (problem := missing_dotted(name))]
    assert problems == [], f"{label(path)} names what does not exist:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------------------------
# The reader itself


PAGE = """\
Text with `trl_ragen2_envs.make_env` and `trl_ragen2_envs.not_a_name`.

```python
from trl_ragen2_envs import make_env, NotAName  # a comment
from trl_ragen2_envs.sokoban import (
    SokobanEnv,
    solve as solve_room,
)
import trl_ragen2_envs.datasets, json
```

- In a list:

  ```bash
  python -m trl_ragen2_envs.not_a_module --port 3000
  ```
"""


def test_the_reader_finds_each_form_and_a_missing_name_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    entries = [entry for code in code_of(page) for entry in imported_names(code)]
    assert entries == [
        "trl_ragen2_envs:make_env",
        "trl_ragen2_envs:NotAName",
        "trl_ragen2_envs.sokoban:SokobanEnv",
        "trl_ragen2_envs.sokoban:solve",
        "trl_ragen2_envs.datasets:",
    ]
    assert [entry for entry in entries if missing_import(entry)] == ["trl_ragen2_envs:NotAName"]
    assert [m.group("module") for m in RUN_MODULE.finditer(PAGE)] == ["trl_ragen2_envs.not_a_module"]
    assert importlib.util.find_spec("trl_ragen2_envs.not_a_module") is None
    prose = FENCE.sub("", PAGE)
    names = [match.group("dotted") for match in INLINE_CODE.finditer(prose)]
    assert names == ["trl_ragen2_envs.make_env", "trl_ragen2_envs.not_a_name"]
    assert [name for name in names if missing_dotted(name)] == ["trl_ragen2_envs.not_a_name"]


def test_the_sources_hold_imports():
    """The patterns still match the pages: the README's own import and a recipe's and a notebook's are found."""
    readme = [entry for code in code_of(ROOT / "README.md") for entry in imported_names(code)]
    assert "trl_ragen2:SNRFilteredGRPOTrainer" in readme
    assert "trl_ragen2_envs.datasets:build_rows" in readme
    recipe = [entry for code in code_of(ROOT / "recipes" / "webshop.py") for entry in imported_names(code)]
    assert "trl_ragen2_envs:make_env" in recipe
    notebook = ROOT / "notebooks" / "webshop_agent.ipynb"
    assert "trl_ragen2_envs:make_env" in [entry for code in code_of(notebook) for entry in imported_names(code)]
