"""Evaluate Python's arithmetic expressions exactly as `eval` would, without running the text.

RAGEN's Countdown scores an answer with `eval(answer, {"__builtins__": None}, {})`. [`evaluate`] reaches the same
value for every expression built from number literals (integers in any base, floats, imaginary numbers, `True`,
`False`), parentheses and Python's unary (`+ - ~ not`) and binary (`+ - * / // % ** << >> & | ^ @`) operators:
the text is parsed by `ast.parse` (Python's own grammar; parsing runs nothing), like `eval` after it strips leading
spaces and tabs, and the operators are Python's own, applied to Python numbers, so precedence, integer and float
semantics, rounding and errors (`ZeroDivisionError`, `OverflowError`, `TypeError`) are the interpreter's.

Everything else is refused: names, calls, attributes, subscripts, comparisons, `and`/`or`, conditional
expressions, containers, strings and lambdas (through which `eval` runs arbitrary code), and expressions beyond
these bounds, which keep hostile text from exhausting time or memory:

- `MAX_SOURCE_CHARS` characters of text;
- `MAX_NODES` syntax-tree nodes and `MAX_DEPTH` levels of nesting (well below CPython's own parser and compiler
  limits, so everything evaluated here is something `eval` evaluates too);
- integers of at most `MAX_INT_BITS` bits, checked before `**` and `<<` build a larger one (so `9**9**9` is
  refused at once instead of running for minutes) and after every other operation.
"""

from __future__ import annotations

import ast
import operator


MAX_SOURCE_CHARS = 10_000
MAX_NODES = 1_000
MAX_DEPTH = 100
MAX_INT_BITS = 16_384  # wider than the largest decimal literal Python reads from text (4,300 digits)

Number = int | float | complex  # bool is an int


class Refused(Exception):
    """The text is outside the arithmetic subset or beyond the bounds; `eval` might run code or not finish."""


def _power(base: Number, exponent: Number) -> Number:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        # |base| ** exponent has more than (bit_length - 1) * exponent bits
        if (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS:
            raise Refused(f"a power with more than {MAX_INT_BITS} bits")
    return base**exponent


def _left_shift(value: Number, shift: Number) -> Number:
    if isinstance(value, int) and isinstance(shift, int) and value != 0 and shift > MAX_INT_BITS:
        raise Refused(f"a shift by more than {MAX_INT_BITS} bits")
    return value << shift


UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert, ast.Not: operator.not_}
BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
    ast.LShift: _left_shift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.MatMult: operator.matmul,  # numbers raise TypeError, as in eval
}


def _bounded(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise Refused(f"an integer with more than {MAX_INT_BITS} bits")
    return value


def _parse(text: str) -> ast.Expression:
    if not isinstance(text, str):
        raise Refused(f"the expression must be text, got {type(text).__name__}")
    if len(text) > MAX_SOURCE_CHARS:
        raise Refused(f"the expression is longer than {MAX_SOURCE_CHARS} characters")
    try:
        return ast.parse(text.lstrip(" \t"), mode="eval")  # eval strips leading spaces and tabs the same way
    except (RecursionError, MemoryError):  # CPython's parser reports its nesting limit as these
        raise Refused("nested too deeply for Python's parser") from None


def evaluate(text: str) -> Number:
    """The value `eval(text, {"__builtins__": None}, {})` gives, for the arithmetic subset of Python.

    Raises:
        `SyntaxError` (or `ValueError` for text Python cannot read, such as a null byte), as `eval` would;
        `ArithmeticError`, `TypeError` or `ValueError` raised by an operator, as `eval` would;
        [`Refused`] for anything outside the subset or the bounds (see the module docstring).
    """
    tree = _parse(text)
    # Iterative post-order walk: (node, depth, children_done). Left operands are evaluated before right ones and
    # the first error stops the walk, as in Python.
    pending: list[tuple[ast.AST, int, bool]] = [(tree.body, 1, False)]
    values: list[Number] = []
    visited = 0
    while pending:
        node, depth, children_done = pending.pop()
        if children_done:
            if isinstance(node, ast.UnaryOp):
                values.append(_bounded(UNARY[type(node.op)](values.pop())))
            else:
                right = values.pop()
                values.append(_bounded(BINARY[type(node.op)](values.pop(), right)))
            continue
        visited += 1
        if visited > MAX_NODES:
            raise Refused(f"more than {MAX_NODES} syntax-tree nodes")
        if depth > MAX_DEPTH:
            raise Refused(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, ast.Constant) and type(node.value) in (bool, int, float, complex):
            values.append(_bounded(node.value))
        elif isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            pending += [(node, depth, True), (node.operand, depth + 1, False)]
        elif isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            pending += [(node, depth, True), (node.right, depth + 1, False), (node.left, depth + 1, False)]
        else:
            raise Refused(f"{type(node).__name__} is not part of the arithmetic subset")
    return values.pop()
