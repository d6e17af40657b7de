"""The run browser's axis ticks (`niceTicks` in `trl_ragen2.browser.page.SCRIPT`) are round values, run in Node.js."""

import json
import math
import re
import shutil
import subprocess

import pytest

from trl_ragen2.browser.page import SCRIPT


NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js runs the page's script function")


def nice_ticks(lo: float, hi: float, count: int) -> dict:
    source = re.search(r"function niceTicks\(.*?\n}\n", SCRIPT, re.S).group(0)
    program = (
        source
        + f"const t = niceTicks({lo!r}, {hi!r}, {count}); console.log(JSON.stringify({{ticks: t.ticks, lo: t.lo, hi: t.hi, labels: t.ticks.map(t.label)}}));"
    )
    out = subprocess.run([NODE, "-e", program], capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)


@pytest.mark.parametrize(
    "lo, hi, count, labels",
    [
        (0.6572, 0.98, 5, ["0.6", "0.7", "0.8", "0.9", "1.0"]),
        (1, 50, 6, ["0", "10", "20", "30", "40", "50"]),
        (-3.342e-5, 1.2e-4, 5, ["-5e-5", "0", "5e-5", "1.0e-4", "1.5e-4"]),
        (0.0, 1.0, 5, ["0", "0.25", "0.50", "0.75", "1.00"]),
        (12.0, 13.0, 5, ["12.00", "12.25", "12.50", "12.75", "13.00"]),
    ],
)
def test_ticks_are_round_and_cover_the_data(lo, hi, count, labels):
    result = nice_ticks(lo, hi, count)
    assert result["lo"] <= lo and result["hi"] >= hi
    steps = {round(b - a, 12) for a, b in zip(result["ticks"], result["ticks"][1:], strict=False)}
    assert len(steps) == 1  # evenly spaced
    (step,) = steps
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 9) in (1.0, 2.0, 2.5, 5.0)
    if labels is not None:
        assert result["labels"] == labels
    for tick, label in zip(result["ticks"], result["labels"], strict=True):  # each label is its tick, exactly
        assert float(label) == pytest.approx(tick, rel=1e-9, abs=step * 1e-9), (tick, label)
