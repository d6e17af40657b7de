"""The `accelerate launch recipes/<task>.py ...` commands of docs/reproduction.md, read from its bash blocks, and the
recipes that parse them (shared by the fast parse test and the slow smoke runs)."""

from __future__ import annotations

import importlib.util
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reproduction.md"
RECIPES = ROOT / "recipes"
CONFIGS = RECIPES / "configs"
ACCELERATE_OPTIONS = ("--config_file",)  # the launcher's options the page uses, each with one value
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
TABLE_HEADING = re.compile(r"^## (Table \d+)\b", re.MULTILINE)


@dataclass(frozen=True)
class Command:
    """One command of the page: the table whose section holds it, the recipe, the launcher's and the recipe's
    arguments."""

    table: str
    recipe: str
    launcher: tuple[str, ...]
    args: tuple[str, ...]

    def value(self, flag: str) -> str:
        """The value the command gives `flag` (the last one, as argparse reads it)."""
        positions = [i for i, arg in enumerate(self.args) if arg == flag]
        assert positions, f"{flag} is not in {self}"
        return self.args[positions[-1] + 1]

    @property
    def name(self) -> str:
        """The command's output folder, relative to `outputs/` (unique on the page)."""
        return self.value("--output_dir").removeprefix("outputs/")


def parse_line(table: str, line: str) -> Command:
    """`accelerate launch [--config_file FILE] recipes/<task>.py ARGS` as a `Command`."""
    tokens = shlex.split(line, comments=True)
    assert tokens[:2] == ["accelerate", "launch"], f"not an accelerate launch command: {line}"
    launcher, rest = [], tokens[2:]
    while rest and rest[0].startswith("--"):
        assert rest[0] in ACCELERATE_OPTIONS, f"unknown accelerate option {rest[0]} in: {line}"
        launcher += rest[:2]
        rest = rest[2:]
    script, *args = rest
    match = re.fullmatch(r"recipes/(\w+)\.py", script)
    assert match, f"not a recipe script: {script}"
    return Command(table, match.group(1), tuple(launcher), tuple(args))


def page_commands(text: str | None = None) -> list[Command]:
    """Every command in the bash blocks of the page, with the `## Table N` section it is in."""
    text = PAGE.read_text(encoding="utf-8") if text is None else text
    commands = []
    for block in BASH_BLOCK.finditer(text):
        headings = TABLE_HEADING.findall(text[: block.start()])
        table = headings[-1] if headings else "none"
        for line in block.group(1).replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(parse_line(table, line))
    return commands


def command(name: str) -> Command:
    """The page's command whose output folder is `outputs/<name>`."""
    (found,) = [c for c in page_commands() if c.name == name]
    return found


@cache
def load_recipe(name: str):
    """A recipe file as a module (its `__main__` block does not run)."""
    spec = importlib.util.spec_from_file_location(f"reproduction_recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
