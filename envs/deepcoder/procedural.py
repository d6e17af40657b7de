"""Procedural stdin/stdout problems for DeepCoder: a seed picks a family and draws its parameters and tests.

Ten families (`FAMILIES`): sums of extremes, prefix sums modulo m, longest increasing subsequences, character
counts, balanced brackets, base conversion, grid regions, shortest paths, coin change and interval unions. Each
problem shows its first `num_examples` tests as examples; all `num_tests` tests are judged. The same seed gives
the same problem; `reference_solution` holds a program that passes every test (for tests of the suite only).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import families, families_search
from .families import FamilyInstance
from .judging import CodeTest
from .problems import CodingProblem


FAMILIES: dict[str, Callable[[np.random.Generator, int], FamilyInstance]] = {
    "k_extremes": families.k_extremes,
    "prefix_mod": families.prefix_mod,
    "longest_run": families.longest_run,
    "count_characters": families.count_characters,
    "balanced_brackets": families.balanced_brackets,
    "to_base": families.to_base,
    "grid_components": families_search.grid_components,
    "shortest_path": families_search.shortest_path,
    "coin_change": families_search.coin_change,
    "interval_union": families_search.interval_union,
}

STDIO_NOTE = "Write a complete Python 3 program that reads standard input and prints the answer to standard output."


def render_statement(instance: FamilyInstance, num_examples: int) -> str:
    """The problem text: title, description, input and output formats, the first `num_examples` cases as examples,
    and the stdin/stdout note."""
    parts = [
        instance.title,
        instance.description,
        f"Input: {instance.input_format}",
        f"Output: {instance.output_format}",
    ]
    for i, (given, wanted) in enumerate(instance.cases[:num_examples], start=1):
        parts.append(f"Example {i}\nInput:\n{given.rstrip()}\nOutput:\n{wanted}")
    parts.append(STDIO_NOTE)
    return "\n\n".join(parts)


def generate_problem(
    rng: np.random.Generator,
    family_names: list[str] | tuple[str, ...] | None = None,
    num_tests: int = 8,
    num_examples: int = 2,
) -> CodingProblem:
    """A problem from one of `family_names` (all families when None), drawn with `rng`."""
    names = list(family_names) if family_names else list(FAMILIES)
    unknown = [name for name in names if name not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown families {unknown}; choose from {sorted(FAMILIES)}")
    if not 1 <= num_examples <= num_tests:
        raise ValueError(f"need 1 <= num_examples ({num_examples}) <= num_tests ({num_tests})")
    name = names[int(rng.integers(len(names)))]
    instance = FAMILIES[name](rng, num_tests)
    tests = tuple(CodeTest("stdio", input=given, output=wanted) for given, wanted in instance.cases)
    return CodingProblem(
        problem_id=f"procedural/{name}",
        statement=render_statement(instance, num_examples),
        tests=tests,
        reference_solution=instance.reference,
        source=f"procedural:{name}",
    )
