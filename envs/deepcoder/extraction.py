"""Getting a program out of a model's answer: fenced code blocks or raw code, then a syntax check.

`extract_code` prefers the last ```python (or ```py) block, then the last unlabelled block, then the last block
of any language; a block left open at the end (a truncated answer) counts. Without fences the whole text is
taken as code. Extraction takes time linear in the answer's length (no backtracking regex over the answer), and
the env rejects over-long answers before extracting anything. `assemble_program` puts a problem's prefix (HumanEval's signature and docstring) in front,
so both a full function and a bare body complete it. `syntax_error` reports a syntax error without running
anything (`ast.parse` only).
"""

from __future__ import annotations

import ast
import re


PYTHON_LABELS = {"python", "python3", "py", "py3"}
_LABEL = re.compile(r"[ \t]*([A-Za-z0-9_+.\-]*)")
_ANSWER_TAGS = re.compile(r"</?answer>")
FENCE = "```"


def code_blocks(text: str) -> list[tuple[str, str]]:
    """`(label, body)` of every fenced block, in order, in one left-to-right pass (linear time).

    A block opens with ```` ``` ```` and the rest of its line (the label is that line's leading word) and closes at
    the next ```` ``` ```` or the end of the text. A fence with no line break after it opens nothing, and neither
    can any later one, so the scan stops there.
    """
    blocks, position = [], 0
    while True:
        start = text.find(FENCE, position)
        if start < 0:
            return blocks
        line_end = text.find("\n", start + len(FENCE))
        if line_end < 0:
            return blocks
        label = _LABEL.match(text, start + len(FENCE), line_end).group(1)
        close = text.find(FENCE, line_end + 1)
        blocks.append((label, text[line_end + 1 : close if close >= 0 else len(text)]))
        if close < 0:
            return blocks
        position = close + len(FENCE)


def extract_code(text: str) -> str | None:
    """The program in `text`, or None when there is none (empty text or only empty blocks)."""
    if not isinstance(text, str):
        return None
    blocks = [(label.lower(), body) for label, body in code_blocks(text)]
    if blocks:
        for wanted in (lambda label: label in PYTHON_LABELS, lambda label: label == "", lambda label: True):
            chosen = [body for label, body in blocks if wanted(label) and body.strip()]
            if chosen:
                return chosen[-1].strip("\n")
        return None
    code = _ANSWER_TAGS.sub("", text).strip("\n")
    return code if code.strip() else None


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body)


def assemble_program(code: str, prefix: str = "", entry_point: str = "") -> str:
    """The program to run: `code` alone, or after `prefix`.

    With a prefix (a signature and docstring), code defining `entry_point` is appended after it (helpers of the
    prefix stay available; the new definition wins); other code is taken as the function body and indented
    under the prefix when it is not indented already.
    """
    if not prefix:
        return code
    if not entry_point or _defines(code, entry_point):
        return f"{prefix.rstrip()}\n\n\n{code}\n"
    lines = code.splitlines()
    indented = all(not line.strip() or line[:1] in " \t" for line in lines)
    body = code if indented else "\n".join(f"    {line}" if line.strip() else line for line in lines)
    return f"{prefix.rstrip()}\n{body}\n"


def syntax_error(program: str) -> str | None:
    """A readable description of the first syntax error of `program`, or None when it parses."""
    try:
        ast.parse(program)
    except SyntaxError as error:
        where = f"line {error.lineno}" if error.lineno else "unknown line"
        line = (error.text or "").rstrip("\n")
        caret = " " * max((error.offset or 1) - 1, 0) + "^" if line else ""
        return "\n".join(part for part in (f"SyntaxError: {error.msg} ({where})", line, caret) if part)
    except (ValueError, RecursionError, MemoryError) as error:  # null bytes, absurd nesting
        return f"{type(error).__name__}: the program cannot be parsed ({error})"
    return None
