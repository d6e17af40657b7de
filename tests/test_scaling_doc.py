"""docs/scaling.md's speed tables agree with themselves: every ratio is the quotient of the two cells it compares, and
each step's split into rollout, forward without gradient, weight sync and the rest adds up to the step time given in
the step table.

The figures come from `benchmarks/vllm_cpu.py` runs (timings are never taken in tests); this file catches a figure
mistyped or left stale when a row is added or rerun. Cells are rounded, so a ratio is checked against the interval
its rounded operands allow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest


SCALING_DOC = Path(__file__).resolve().parent.parent / "docs" / "scaling.md"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _tables() -> list[list[list[str]]]:
    """Every markdown table on the page as rows of cells; the header stays, the |---| line goes."""
    tables, current = [], []
    for line in SCALING_DOC.read_text().splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= {"-", ":"} for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _table(first_header: str, second_header: str) -> list[list[str]]:
    """The body of the one table whose header starts with the two given cells."""
    found = [t for t in _tables() if t[0][:2] == [first_header, second_header]]
    assert len(found) == 1, f"expected one table headed {first_header!r} | {second_header!r}, found {len(found)}"
    return found[0][1:]


def _value(cell: str) -> float:
    """The number in a cell such as '13.1 tokens/s', '154.9 s' or '**4.81×**'."""
    match = NUMBER.search(cell)
    assert match, f"no number in cell {cell!r}"
    return float(match.group())


def _half_unit(cell: str) -> float:
    """Half the last printed digit of a cell's number: how far rounding may have moved it."""
    text = NUMBER.search(cell).group()
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0**-decimals


def _assert_ratio(numerator: str, denominator: str, ratio: str, row: str) -> None:
    """`ratio` is numerator / denominator, within what the three cells' rounding allows."""
    n, d, r = _value(numerator), _value(denominator), _value(ratio)
    dn, dd, dr = _half_unit(numerator), _half_unit(denominator), _half_unit(ratio)
    lowest, highest = (n - dn) / (d + dd), (n + dn) / (d - dd)
    assert lowest <= r + dr and r - dr <= highest, (
        f"{row!r}: {ratio} is not {numerator} / {denominator} (which lies in [{lowest:.3f}, {highest:.3f}])"
    )


def _rows(first_header: str, second_header: str) -> list[pytest.param]:
    return [pytest.param(row, id=row[0][:60]) for row in _table(first_header, second_header)]


@pytest.mark.parametrize("row", _rows("", "transformers"))
def test_generation_and_scoring_ratios_are_the_quotients_of_their_cells(row):
    # | what | transformers | vLLM | ratio | busy: transformers | busy: vLLM | busy: ratio |
    _assert_ratio(row[2], row[1], row[3], row[0])
    if row[4]:
        _assert_ratio(row[5], row[4], row[6], row[0] + ", busy")


@pytest.mark.parametrize("row", _rows("shape", "rollout: transformers"))
def test_step_table_ratios_are_the_quotients_of_their_cells(row):
    # | shape | rollout: transformers | rollout: vLLM | ratio | step: transformers | step: vLLM | ratio |
    # rollout speeds are tokens/s (vLLM / transformers); step times are seconds (transformers / vLLM).
    _assert_ratio(row[2], row[1], row[3], row[0] + ", rollout")
    _assert_ratio(row[4], row[5], row[6], row[0] + ", step")


def test_step_splits_add_up_to_the_step_times_of_the_step_table():
    # | shape | arm | step | rollout | forward without gradient | weight sync | the rest (training) |
    # Each row's step is the step table's cell for its shape and arm: the transformers column (4) or the vLLM one (5),
    # and for the arm with the correction off, the vLLM cell of the shape's "correction off" row.
    split = _table("shape", "arm")
    steps = {row[0]: row for row in _table("shape", "rollout: transformers")}
    for row in split:
        parts = [_value(cell) for cell in row[3:7]]
        assert sum(parts) == pytest.approx(_value(row[2]), abs=4 * 0.05 + 1e-9), row
        shape = row[0] + (", importance-sampling correction off" if row[1].endswith("correction off") else "")
        assert shape in steps, f"split row {row[:2]}: no row {shape!r} in the step table"
        step_cell = steps[shape][4 if row[1] == "transformers" else 5]
        assert step_cell == f"{row[2]} s", f"split row {row[:2]}: step {row[2]} s, the step table says {step_cell}"


def test_prose_quotes_the_larger_busy_split():
    # The prose rounds the larger busy shape's split cells to whole seconds.
    rows = {row[1]: row for row in _table("shape", "arm") if row[0].startswith("16 rollouts")}
    hf, vllm = rows["transformers"], rows["vLLM"]
    text = " ".join(SCALING_DOC.read_text().split())
    assert f"{round(_value(hf[6]))} and {round(_value(vllm[6]))} s at the larger" in text
    assert f"{round(_value(vllm[4]))} s at the larger" in text
    assert (
        f"took {round(_value(hf[3]))} s of a {round(_value(hf[2]))} s step and {round(_value(vllm[3]))} s through vLLM"
        in text
    )
