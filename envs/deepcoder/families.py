"""Families of small stdin/stdout programming problems, each with a parameterised statement, generated test
cases whose expected outputs are computed here, and an independent reference program (a source string).

A family draws its parameters (which extreme, the modulus, the bracket pairs, the coin values, ...) and its
test inputs from the generator it is given, so one family yields many distinct problems. The reference program
is never shown to the model; the test suite runs it in the sandbox to prove every generated test can be passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

import numpy as np


@dataclass(frozen=True)
class FamilyInstance:
    """One generated problem: statement parts, test cases and a reference program that passes them all."""

    title: str
    description: str
    input_format: str
    output_format: str
    cases: tuple[tuple[str, str], ...]  # (stdin, expected stdout)
    reference: str  # a Python program solving every case


def _ints(rng: np.random.Generator, n: int, low: int, high: int) -> list[int]:
    return [int(v) for v in rng.integers(low, high + 1, size=n)]


def _lines(*rows) -> str:
    return "\n".join(" ".join(map(str, row)) if isinstance(row, (list, tuple)) else str(row) for row in rows) + "\n"


def _program(source: str, **values) -> str:
    return Template(source).substitute(**values).strip() + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Arrays


def k_extremes(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Sum of the k largest (or smallest) of n integers; k in 1..4, n <= 12."""
    k, largest = int(rng.integers(1, 5)), bool(rng.random() < 0.5)
    word = "largest" if largest else "smallest"
    cases = []
    for i in range(num_cases):
        values = _ints(rng, k if i == 1 else int(rng.integers(k, 13)), -1000, 1000)
        cases.append((_lines(len(values), values), str(sum(sorted(values, reverse=largest)[:k]))))
    reference = _program(
        """
import sys
data = sys.stdin.read().split()
n = int(data[0])
values = sorted(int(x) for x in data[1 : n + 1])
chosen = values[-$k:] if $largest else values[:$k]
print(sum(chosen))
""",
        k=k,
        largest=largest,
    )
    return FamilyInstance(
        f"Sum of the {k} {word}",
        f"Given a list of integers, print the sum of its {k} {word} values (counting repeated values separately).",
        f"The first line holds n ({k} <= n <= 12); the second line holds n integers between -1000 and 1000.",
        "One integer: the sum.",
        tuple(cases),
        reference,
    )


def prefix_mod(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Prefix sums of n <= 10 integers modulo a drawn modulus (7, 13, 97, 1000 or 10007)."""
    modulus = int(rng.choice([7, 13, 97, 1000, 10007]))
    cases = []
    for _ in range(num_cases):
        values = _ints(rng, int(rng.integers(1, 11)), 0, 10**9)
        sums = np.cumsum(values, dtype=object) % modulus
        cases.append((_lines(len(values), values), " ".join(str(s) for s in sums)))
    reference = _program(
        """
import sys
n, *values = map(int, sys.stdin.read().split())
total, out = 0, []
for v in values[:n]:
    total = (total + v) % $m
    out.append(total)
print(*out)
""",
        m=modulus,
    )
    return FamilyInstance(
        f"Prefix sums modulo {modulus}",
        f"For a sequence a_1..a_n, print s_1..s_n where s_i = (a_1 + ... + a_i) mod {modulus}.",
        "The first line holds n (1 <= n <= 10); the second line holds n integers between 0 and 10^9.",
        "The n values s_1..s_n on one line, separated by spaces.",
        tuple(cases),
        reference,
    )


def longest_run(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Length of the longest strictly increasing (or non-decreasing) subsequence of n <= 12 digits."""
    strict = bool(rng.random() < 0.5)
    word = "strictly increasing" if strict else "non-decreasing"
    cases = []
    for i in range(num_cases):
        values = _ints(rng, 1 if i == 1 else int(rng.integers(2, 13)), 0, 9)
        # longest subsequence (not necessarily contiguous), by O(n^2) dynamic programming
        best = [1] * len(values)
        for j in range(len(values)):
            for p in range(j):
                if values[p] < values[j] or (not strict and values[p] == values[j]):
                    best[j] = max(best[j], best[p] + 1)
        cases.append((_lines(len(values), values), str(max(best))))
    reference = _program(
        """
import sys
import bisect
n, *values = map(int, sys.stdin.read().split())
tails = []
for v in values[:n]:
    i = bisect.bisect_left(tails, v) if $strict else bisect.bisect_right(tails, v)
    tails[i:i + 1] = [v]
print(len(tails))
""",
        strict=strict,
    )
    return FamilyInstance(
        f"Longest {word} subsequence",
        f"Print the length of the longest {word} subsequence of a sequence (its elements keep their order but "
        "need not be adjacent).",
        "The first line holds n (1 <= n <= 12); the second line holds n integers between 0 and 9.",
        "One integer: the length.",
        tuple(cases),
        reference,
    )


# ---------------------------------------------------------------------------------------------------------------
# Strings

_CHARACTER_CLASSES = {
    "vowels (a, e, i, o, u, either case)": "aeiouAEIOU",
    "decimal digits": "0123456789",
    "uppercase letters": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
}


def count_characters(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Per-line count of vowels, decimal digits or uppercase letters (one class per problem)."""
    name = list(_CHARACTER_CLASSES)[int(rng.integers(len(_CHARACTER_CLASSES)))]
    members = _CHARACTER_CLASSES[name]
    alphabet = "abcdefghijklmnopqrstuvwxyzAEIOUBCDXYZ0123456789-,!"
    cases = []
    for _ in range(num_cases):
        lines = ["".join(rng.choice(list(alphabet), size=int(rng.integers(1, 25)))) for _ in range(rng.integers(1, 5))]
        counts = [sum(ch in members for ch in line) for line in lines]
        cases.append((_lines(len(lines), *lines), "\n".join(map(str, counts))))
    reference = _program(
        """
import sys
lines = sys.stdin.read().split("\\n")
for line in lines[1 : int(lines[0]) + 1]:
    print(sum(1 for ch in line if ch in $members))
""",
        members=repr(members),
    )
    return FamilyInstance(
        f"Count the {name.split(' (')[0]}",
        f"For each line of text, count its {name}.",
        "The first line holds q (1 <= q <= 4); each of the next q lines holds 1 to 24 characters without spaces.",
        "q lines, each with the count for the corresponding line.",
        tuple(cases),
        reference,
    )


def balanced_brackets(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Whether each word over one to three bracket pairs is balanced, answered with drawn yes/no words."""
    pairs = ["()", "()[]", "()[]{}", "()<>"][int(rng.integers(4))]
    yes, no = [("YES", "NO"), ("balanced", "unbalanced"), ("1", "0")][int(rng.integers(3))]
    opening, closing = pairs[0::2], pairs[1::2]

    def balanced(text: str) -> bool:
        stack = []
        for ch in text:
            if ch in opening:
                stack.append(closing[opening.index(ch)])
            elif not stack or stack.pop() != ch:
                return False
        return not stack

    cases = []
    for _ in range(num_cases):
        words = []
        for _ in range(int(rng.integers(1, 5))):
            if rng.random() < 0.5:  # build a balanced word, then maybe break it
                word = ""
                for _ in range(int(rng.integers(1, 5))):
                    i = int(rng.integers(len(opening)))
                    word = (opening[i] + word + closing[i]) if rng.random() < 0.5 else (word + opening[i] + closing[i])
            else:
                word = "".join(rng.choice(list(pairs), size=int(rng.integers(1, 9))))
            words.append(word)
        cases.append((_lines(len(words), *words), "\n".join(yes if balanced(w) else no for w in words)))
    reference = _program(
        """
import sys
tokens = sys.stdin.read().split()
match = dict(zip($closing, $opening))
for word in tokens[1 : int(tokens[0]) + 1]:
    stack = []
    ok = True
    for ch in word:
        if ch in match:
            ok = ok and bool(stack) and stack.pop() == match[ch]
        else:
            stack.append(ch)
    print($yes if ok and not stack else $no)
""",
        opening=repr(opening),
        closing=repr(closing),
        yes=repr(yes),
        no=repr(no),
    )
    return FamilyInstance(
        "Balanced brackets",
        f"A word over the brackets {' '.join(pairs)} is balanced when every bracket is closed by the matching "
        f"bracket in the right order. For each word print {yes} if it is balanced and {no} otherwise.",
        "The first line holds q (1 <= q <= 4); each of the next q lines holds one non-empty word.",
        f"q lines, each {yes} or {no}.",
        tuple(cases),
        reference,
    )


def to_base(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Integers in [0, 10^6] written in base 2, 3, 5, 7, 8 or 16."""
    base = int(rng.choice([2, 3, 5, 7, 8, 16]))
    digits = "0123456789ABCDEF"

    def convert(value: int) -> str:
        out = ""
        while True:
            value, digit = divmod(value, base)
            out = digits[digit] + out
            if value == 0:
                return out

    cases = []
    for i in range(num_cases):
        values = [0] if i == 1 else _ints(rng, int(rng.integers(1, 5)), 0, 10**6)
        cases.append((_lines(len(values), *values), "\n".join(convert(v) for v in values)))
    reference = _program(
        """
import sys
q, *values = map(int, sys.stdin.read().split())
for v in values[:q]:
    out = []
    while v:
        v, d = divmod(v, $base)
        out.append("0123456789ABCDEF"[d])
    print("".join(reversed(out)) or "0")
""",
        base=base,
    )
    return FamilyInstance(
        f"Base {base}",
        f"Write each number in base {base}" + (", with digits 0-9 and A-F." if base == 16 else "."),
        "The first line holds q (1 <= q <= 4); each of the next q lines holds an integer between 0 and 10^6.",
        f"q lines, each the base-{base} form of the corresponding number (no leading zeros; 0 is written 0).",
        tuple(cases),
        reference,
    )
