"""Countdown's two reward rules, as pure functions of (answer, target, nums); see `env.py` for the rules.

- `"ragen"`: RAGEN's format check on the answer's digit runs, then its `eval`-based correctness check, reached
  with the safe evaluator of [`python_arithmetic`].
- `"strict"`: a small + - * / grammar, parsed by recursive descent and evaluated exactly with fractions.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from .python_arithmetic import evaluate


MAX_EXPRESSION_CHARS = 256
MAX_LITERAL_DIGITS = 6
MAX_NESTING = 16
CORRECT_REWARD = 1.0
FORMAT_REWARD = 0.1


class ExpressionError(ValueError):
    """The text is not an expression of the accepted form."""


@dataclass(frozen=True)
class Evaluation:
    """A parsed expression: its literals in order of appearance and its exact value (`None` on division by 0)."""

    literals: tuple[int, ...]
    value: Fraction | None


def _tokenize(text: str) -> list[str]:
    tokens, position = [], 0
    while position < len(text):
        char = text[position]
        if char in " \t\r\n":
            position += 1
        elif char in "+-*/()":
            if char in "*/" and text[position + 1 : position + 2] == char:
                raise ExpressionError(f"{char * 2!r} is not allowed; use only + - * /")
            tokens.append(char)
            position += 1
        elif "0" <= char <= "9":
            end = position
            while end < len(text) and "0" <= text[end] <= "9":
                end += 1
            if end - position > MAX_LITERAL_DIGITS:
                raise ExpressionError(f"number {text[position:end][:20]}... has more than {MAX_LITERAL_DIGITS} digits")
            tokens.append(text[position:end])
            position = end
        else:
            raise ExpressionError(f"character {char!r} at position {position} is not allowed")
    return tokens


class _Parser:
    """Recursive descent over `expr := term (('+'|'-') term)*`, `term := unary (('*'|'/') unary)*`,
    `unary := '-' unary | '(' expr ')' | integer`. Division by zero poisons the value to `None`."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.position, self.depth = tokens, 0, 0
        self.literals: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("the expression ends too early")
        self.position += 1
        return token

    def expression(self) -> Fraction | None:
        value = self.term()
        while self.peek() in ("+", "-"):
            operator, right = self.take(), self.term()
            if value is not None and right is not None:
                value = value + right if operator == "+" else value - right
            else:
                value = None
        return value

    def term(self) -> Fraction | None:
        value = self.unary()
        while self.peek() in ("*", "/"):
            operator, right = self.take(), self.unary()
            if value is None or right is None or (operator == "/" and right == 0):
                value = None
            else:
                value = value * right if operator == "*" else value / right
        return value

    def unary(self) -> Fraction | None:
        token = self.take()
        if token == "-":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise ExpressionError(f"more than {MAX_NESTING} nested signs or parentheses")
            value = self.unary()
            self.depth -= 1
            return None if value is None else -value
        if token == "(":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise ExpressionError(f"more than {MAX_NESTING} nested signs or parentheses")
            value = self.expression()
            if self.take() != ")":
                raise ExpressionError("a '(' is not closed")
            self.depth -= 1
            return value
        if token.isdigit():
            self.literals.append(int(token))
            return Fraction(int(token))
        raise ExpressionError(f"expected a number, '-' or '(' but found {token!r}")


def evaluate_expression(text: str) -> Evaluation:
    """Parse and evaluate `text` exactly; raises `ExpressionError` when it is not an accepted expression."""
    if not isinstance(text, str):
        raise ExpressionError(f"the answer must be text, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    tokens = _tokenize(text)
    if not tokens:
        raise ExpressionError("the expression is empty")
    parser = _Parser(tokens)
    value = parser.expression()
    if parser.position != len(tokens):
        raise ExpressionError(f"unexpected {tokens[parser.position]!r} after a complete expression")
    return Evaluation(literals=tuple(parser.literals), value=value)


def score_evaluation(evaluation: Evaluation, target: int, nums: list[int] | tuple[int, ...]) -> float:
    """The strict rule's reward of a parsed expression."""
    if Counter(evaluation.literals) != Counter(nums):
        return 0.0
    return CORRECT_REWARD if evaluation.value == target else FORMAT_REWARD


def strict_score(answer: str, target: int, nums: list[int] | tuple[int, ...]) -> float:
    """The strict rule's reward of an answer text (0 when it is not an accepted expression)."""
    try:
        return score_evaluation(evaluate_expression(answer), target, nums)
    except ExpressionError:
        return 0.0


# RAGEN's format check reads each digit run with int(), which refuses more than 4,300 digits on CPython >= 3.11
# (RAGEN runs Python 3.12), so a longer run fails the check there; it is written out here, whatever the interpreter.
RAGEN_MAX_DIGITS = 4300
_DIGIT_RUN = re.compile(r"\d+")  # Unicode decimal digits, as RAGEN's pattern


def ragen_numbers_match(answer: str, nums: list[int] | tuple[int, ...]) -> bool:
    """RAGEN's format check: the answer's digit runs, read as integers, are exactly `nums` (as multisets)."""
    if not isinstance(answer, str):
        return False  # RAGEN's regex raises on non-text, which its check counts as a mismatch
    found = Counter()
    for count, match in enumerate(_DIGIT_RUN.finditer(answer)):
        run = match.group()
        if count == len(nums) or len(run) > RAGEN_MAX_DIGITS:
            return False  # one run too many (stop reading), or a run int() refuses
        digits = run if run.isascii() else "".join(str(int(char)) for char in run)  # e.g. Arabic-Indic digits
        found[digits.lstrip("0") or "0"] += 1  # the integer's canonical decimal text
    return found == Counter(str(n) for n in nums)


def ragen_value_matches(answer: str, target: int) -> bool:
    """RAGEN's correctness check: the answer, evaluated as Python, is within 1e-5 of the target."""
    try:
        return abs(evaluate(answer) - target) < 1e-5
    except Exception:  # noqa: BLE001 -- RAGEN counts every failure (syntax, arithmetic, refused) as not correct
        return False


def ragen_score(answer: str, target: int, nums: list[int] | tuple[int, ...]) -> float:
    """RAGEN's Countdown reward of an answer text: 0, the format score 0.1, or 1."""
    if not ragen_numbers_match(answer, nums):
        return 0.0
    return CORRECT_REWARD if ragen_value_matches(answer, target) else FORMAT_REWARD


REWARD_RULES = ("ragen", "strict")


def score_answer(answer: str, target: int, nums: list[int] | tuple[int, ...], reward_rule: str = "ragen") -> float:
    """The reward of an answer text under `reward_rule` (`"ragen"` or `"strict"`, see the module docstring)."""
    if reward_rule not in REWARD_RULES:
        raise ValueError(f"reward_rule must be one of {REWARD_RULES}, got {reward_rule!r}")
    return ragen_score(answer, target, nums) if reward_rule == "ragen" else strict_score(answer, target, nums)
