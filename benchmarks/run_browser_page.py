"""How fast the run browser's page of a long run builds and opens: a synthetic 10,000-step run against a 100-step one,
measured in the same run.

Both runs log metrics every step and MI every 5 steps (`benchmarks/sample_log_cost.py`'s `synthetic_run`); the long
one logs a sample record every 100 steps, the short one every 5. Per run: the page's size, the time
`trl-ragen2 view` takes to build it, and, where Debian's chromium and chromedriver and selenium are installed, the
time headless Chromium takes to load it until its script has drawn every view (the best of `--repeats`), of which
the script's own time. The ratios are the long run's over the short run's.

    python benchmarks/run_browser_page.py [--steps 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.chromium: the flags

from sample_log_cost import synthetic_run  # noqa: E402

from trl_ragen2.browser.report import build_report  # noqa: E402


def open_times(pages: list[Path], repeats: int) -> list[tuple[float, int]] | None:
    """(best seconds to load and draw, the script's milliseconds then) per page; None without Chromium."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return None
    if not (chromium and chromedriver):
        return None
    from tests.chromium import CHROMIUM_FLAGS

    os.environ.setdefault("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, "--window-size=1400,1000"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    results = []
    try:
        for page in pages:
            best = None
            for _ in range(repeats + 1):  # the first load warms the browser's caches
                driver.get("about:blank")
                began = time.perf_counter()
                driver.get(page.resolve().as_uri())
                WebDriverWait(driver, 60).until(
                    lambda d: d.execute_script("return document.body.dataset.ready === '1'")
                )
                seconds = time.perf_counter() - began
                script_ms = int(driver.execute_script("return document.body.dataset.renderMs"))
                best = (seconds, script_ms) if best is None or seconds < best[0] else best
            results.append(best)
    finally:
        driver.quit()
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        runs = {"short (100 steps)": (Path(scratch) / "short", 100, 5),
                f"long ({args.steps:,} steps)": (Path(scratch) / "long", args.steps, 100)}  # fmt: skip
        rows = {}
        for name, (folder, steps, every) in runs.items():
            synthetic_run(folder, steps, samples_every=every)
            began = time.perf_counter()
            page = build_report(folder)
            rows[name] = {"page": page, "mib": page.stat().st_size / 2**20, "build_s": time.perf_counter() - began}
        opened = open_times([row["page"] for row in rows.values()], args.repeats)
        for (name, row), times in zip(rows.items(), opened or [None] * len(rows), strict=True):
            line = f"{name:22s} page {row['mib']:6.2f} MiB   built in {row['build_s']:5.2f} s"
            if times is not None:
                line += f"   opened in {times[0]:5.2f} s (script {times[1]} ms)"
            print(line)
        short, long = rows.values()
        print(f"ratio long / short: build {long['build_s'] / short['build_s']:.1f}x", end="")
        print(f", open {opened[1][0] / opened[0][0]:.1f}x" if opened else " (no chromium: pages not opened)")


if __name__ == "__main__":
    main()
