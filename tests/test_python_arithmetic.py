"""The safe evaluator of Python arithmetic (trl_ragen2_envs.countdown.python_arithmetic): Python's values and
errors on the arithmetic subset, refusals outside it, and bounds that hold on hostile text."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2_envs.countdown.python_arithmetic import (
    MAX_DEPTH,
    MAX_INT_BITS,
    MAX_NODES,
    MAX_SOURCE_CHARS,
    Refused,
    evaluate,
)


@pytest.mark.parametrize(
    "text, value",
    [
        ("2 + 3 * 4", 14),  # precedence
        ("8 - 3 - 2", 3),  # left associative
        ("7 / 2", 3.5),  # true division gives a float
        ("8 / (3 - 8 / 3)", 23.99999999999999),  # float rounding, as in Python: 8 / 0.3333333333333335
        ("7 // 2", 3),
        ("-7 // 2", -4),  # floor division rounds down
        ("-7 % 3", 2),  # the sign of the divisor
        ("7.5 // 2", 3.0),
        ("2 ** 3 ** 2", 512),  # ** is right associative: 2 ** 9
        ("-2 ** 2", -4),  # ** binds tighter than unary minus on its left
        ("2 ** -1", 0.5),  # a negative integer exponent gives a float
        ("1 << 4", 16),
        ("6 ^ 3", 5),  # xor, not a power
        ("6 & 3 | 8", 10),
        ("~5", -6),
        ("not 0", True),
        ("+-+3", -3),
        ("1_000 + 0x1A + 0o7 + 0b11", 1036),  # literal forms: 1000 + 26 + 7 + 3
        ("00 + 0", 0),  # zeros may repeat; "007" may not (below)
        ("1e2 + .5 + 1.", 101.5),
        ("3j * 1j", -3 + 0j),
        ("True + 23", 24),
        ("  1 + 2", 3),  # eval strips leading spaces and tabs
        ("\t1 + 2", 3),
        ("\n1 + 2\n", 3),  # blank lines around an expression are fine
        ("(1 +\n 2)", 3),  # line breaks inside parentheses
        ("1 + 2  # a comment", 3),
        ("(" * 50 + "1" + ")" * 50, 1),  # parentheses add no tree depth
        ("-" * (MAX_DEPTH - 1) + "1", -1),  # 99 signs and the literal: exactly MAX_DEPTH levels
    ],
)
def test_values_are_pythons(text, value):
    result = evaluate(text)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    "text, error",
    [
        ("1 / 0", ZeroDivisionError),
        ("1 // 0", ZeroDivisionError),
        ("1 % 0.0", ZeroDivisionError),
        ("0 ** -1", ZeroDivisionError),
        ("2.0 ** 10000", OverflowError),  # float overflow raises in Python
        ("10 ** 400 / 1", OverflowError),  # integer division result too large for a float
        ("10 ** 400 + 1.0", OverflowError),  # int too large to convert to float
        ("1j // 1", TypeError),
        ("1 @ 2", TypeError),
        ("1.5 << 1", TypeError),
        ("~1.5", TypeError),
        ("1 << -1", ValueError),  # negative shift count
        ("007", SyntaxError),  # leading zeros in a decimal literal
        ("3 4", SyntaxError),
        ("(1 + 2", SyntaxError),
        ("1 +", SyntaxError),
        ("", SyntaxError),
        ("\n 1", SyntaxError),  # an indented second line: IndentationError, a SyntaxError
        ("1 + 2\x00", (SyntaxError, ValueError)),  # a null byte (ValueError before Python 3.11)
        ("٣ + 1", SyntaxError),  # Arabic-Indic digits are not Python literals
        ("(" * 201 + "1" + ")" * 201, SyntaxError),  # beyond the tokenizer's 200 nested parentheses
    ],
)
def test_errors_are_pythons(text, error):
    with pytest.raises(error):
        evaluate(text)


@pytest.mark.parametrize(
    "text",
    [
        "x",  # names
        "abs(-3)",  # calls
        "(1).real",  # attributes
        "(24).__class__.__bases__[0].__subclasses__()",  # the way out of eval's empty builtins
        "(lambda: 24)()",
        "[1][0]",
        "(1, 2)",
        "{1}",
        "1 < 2",  # comparisons
        "1 and 2",
        "1 if 2 else 3",
        "'2' + '4'",  # strings
        "b'1'",
        "None",
        "...",
        "(y := 3)",
        "f'{1}'",
    ],
)
def test_everything_else_is_refused(text):
    with pytest.raises(Refused):
        evaluate(text)


def test_non_text_is_refused():
    with pytest.raises(Refused, match="must be text"):
        evaluate(24)  # type: ignore[arg-type]


def balanced(depth: int) -> str:
    """A full binary tree of additions: 2**depth - 1 nodes, `depth` levels."""
    return "1" if depth == 1 else f"({balanced(depth - 1)}+{balanced(depth - 1)})"


def test_bounds():
    assert evaluate("2 ** 16383").bit_length() == MAX_INT_BITS  # the widest integer allowed
    with pytest.raises(Refused, match="bits"):
        evaluate("2 ** 16384")  # 16,385 bits, checked after the power
    with pytest.raises(Refused, match="bits"):
        evaluate("9 ** 9 ** 9")  # 9 ** 387420489 is refused before it is computed
    with pytest.raises(Refused, match="bits"):
        evaluate("1 << 16385")  # refused before the shift
    with pytest.raises(Refused, match="bits"):
        evaluate("2 ** 10000 * 2 ** 10000")  # checked after the product
    with pytest.raises(Refused, match="bits"):
        evaluate("0x" + "f" * 4097)  # a literal of 16,388 bits
    # powers of 0 and +-1, and shifts of 0, stay small whatever the exponent
    assert (evaluate("1 ** 10 ** 30"), evaluate("(-1) ** 10 ** 30"), evaluate("0 << 10 ** 30")) == (1, 1, 0)
    assert evaluate("2 ** -(10 ** 30)") == 0.0  # a float power: no integer is built
    assert evaluate(balanced(9)) == 256  # 511 nodes, 9 levels
    with pytest.raises(Refused, match="nodes"):
        evaluate(balanced(10))  # 1,023 nodes
    with pytest.raises(Refused, match="levels"):
        evaluate("-" * MAX_DEPTH + "1")
    with pytest.raises(Refused, match="characters"):
        evaluate("1" + " " * MAX_SOURCE_CHARS)
    assert MAX_NODES == 1_000


@pytest.mark.parametrize(
    "text",
    [
        "-" * 9_999 + "1",  # deeper than Python's parser allows: refused, not a crash
        "9**" * 3_000 + "9",
        "1+" * 4_999 + "1",
        "(" * 4_999 + "1" + ")" * 4_999,
        "not " * 2_499 + "1",
        "~" * 9_999 + "1",
    ],
)
def test_hostile_nesting_is_refused_or_a_syntax_error(text):
    with pytest.raises((Refused, SyntaxError)):
        evaluate(text)


# ---------------------------------------------------------------------------------------------------------------
# Against Python itself: expressions generated by this test from a grammar of number literals and operators only
# (never model text), evaluated by `evaluate` and by `eval` with empty builtins, as RAGEN's Countdown does.

LITERALS = st.one_of(
    st.integers(0, 10_000).map(str),
    st.sampled_from(["0", "00", "1_0", "0x1f", "0o17", "0b101", "2.5", "1e3", ".5", "3.", "1j", "True", "False"]),
    st.floats(0, 1e6, allow_nan=False).map(repr),
)
SMALL = st.integers(0, 3).map(str)  # right operands of ** and <<: keeps every value within the bounds


def expressions(depth: int = 4):
    if depth == 0:
        return LITERALS
    inner = expressions(depth - 1)
    return st.one_of(
        LITERALS,
        st.tuples(st.sampled_from(["-", "+", "~", "not "]), inner).map(lambda t: f"{t[0]}{t[1]}"),
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "&", "|", "^", ">>"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        st.tuples(inner, st.sampled_from(["**", "<<"]), SMALL).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
    )


def outcome(function, text):
    try:
        value = function(text)
    except Exception as error:  # noqa: BLE001 -- the error type is the outcome being compared
        return type(error).__name__
    return ("nan", type(value)) if isinstance(value, float) and math.isnan(value) else (repr(value), type(value))


@settings(max_examples=1500, deadline=None)
@given(text=expressions(), padding=st.sampled_from(["", " ", "\t ", "  "]))
def test_same_outcome_as_eval(text, padding):
    text = padding + text
    assert outcome(evaluate, text) == outcome(lambda t: eval(t, {"__builtins__": None}, {}), text)
