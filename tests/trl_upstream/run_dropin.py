"""Run TRL's GRPO tests in the drop-in modes and report the regressions against plain `GRPOTrainer`.

    python tests/trl_upstream/run_dropin.py                      # plain, filter_off, filter_on
    python tests/trl_upstream/run_dropin.py --modes filter_off   # against the recorded baseline
    python tests/trl_upstream/run_dropin.py -n 2 -- -k test_train_loss_types

Each mode is one pytest run (`TRL_DROPIN=<mode>`, the baseline's expected failures not marked, so the outcomes are
the raw ones), with a JUnit report under `--out`. A regression is a test that passes in `plain` (this run's, or the
recorded `plain_failures.txt` when `plain` is not run) and fails in another mode. The exit status is 1 when there is a
regression, or when `plain` fails a test that `plain_failures.txt` does not list (the stand-ins or TRL moved: see
README.md), else 0. `--update-baseline` rewrites `plain_failures.txt` from this run's `plain` failures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path


HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BASELINE = HERE / "plain_failures.txt"
MODES = ("plain", "filter_off", "filter_on")


def read_baseline(path: Path = BASELINE) -> set[str]:
    """Test ids (relative to `tests/trl_upstream/tests/`) that fail with plain `GRPOTrainer` in this harness."""
    if not path.exists():
        return set()
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def outcomes(junit: Path) -> dict[str, str]:
    """Test id -> passed / failed / skipped, from a JUnit report (an error counts as a failure)."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname: tests.trl_upstream.tests.test_grpo_trainer[.Class]
        path = [part for part in module if part.startswith("test_")][:1]
        cls = module[module.index(path[0]) + 1 :] if path else []
        test_id = "::".join([f"{path[0]}.py" if path else "?", *cls, case.get("name", "?")])
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        if result.get(test_id) != "failed":  # a teardown error after a pass is a failure
            result[test_id] = outcome
    return result


def run_mode(mode: str, out: Path, workers: int, extra: list[str]) -> tuple[dict[str, str], float, int]:
    junit = out / f"{mode}.xml"
    cmd = [sys.executable, "-m", "pytest", "tests/trl_upstream", "-m", "slow", "-p", "no:cacheprovider", "-q"]
    cmd += ["-rfE", "--timeout", "900", f"--junitxml={junit}"]
    if workers > 1:
        cmd += ["-n", str(workers)]
    cmd += extra
    env = {**os.environ, "TRL_DROPIN": mode, "TRL_DROPIN_RAW": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    print(f"\n=== {mode}: {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    code = subprocess.call(cmd, cwd=REPO, env=env)
    wall = time.monotonic() - start
    if not junit.exists():
        raise SystemExit(f"pytest exited with {code} and wrote no report for {mode}")
    return outcomes(junit), wall, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("-n", "--workers", type=int, default=1, help="pytest-xdist workers (default 1)")
    parser.add_argument("--out", type=Path, default=REPO / "test_artifacts" / "trl_dropin")
    parser.add_argument("--update-baseline", action="store_true", help="rewrite plain_failures.txt from `plain`")
    parser.add_argument("pytest_args", nargs="*", help="after `--`: extra pytest arguments")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    results = {}
    for mode in args.modes:
        results[mode] = run_mode(mode, args.out, args.workers, args.pytest_args)

    print("\n=== TRL drop-in summary")
    for mode, (result, wall, _) in results.items():
        counts = {k: sum(v == k for v in result.values()) for k in ("passed", "failed", "skipped")}
        print(
            f"{mode:>10}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped in {wall:.0f} s"
        )

    baseline = read_baseline()
    status = 0
    if "plain" in results:
        plain = results["plain"][0]
        failing = {t for t, o in plain.items() if o == "failed"}
        if args.update_baseline:
            BASELINE.write_text(
                "# Tests of TRL's test_grpo_trainer.py that fail with plain GRPOTrainer in this harness (see README.md).\n"
                "# Written by `python tests/trl_upstream/run_dropin.py --modes plain --update-baseline`.\n"
                + "".join(f"{t}\n" for t in sorted(failing))
            )
            print(f"wrote {len(failing)} baseline failures to {BASELINE}")
        elif failing - baseline:
            print("\nplain fails tests that plain_failures.txt does not list (new baseline failures):")
            print("".join(f"  {t}\n" for t in sorted(failing - baseline)), end="")
            status = 1
        if baseline - failing and not args.pytest_args:
            print("\nplain_failures.txt lists tests that now pass or are skipped with plain (update it):")
            print("".join(f"  {t}\n" for t in sorted(baseline - failing)), end="")
        passing = {t for t, o in plain.items() if o == "passed"}
    else:
        passing = None

    for mode, (result, _, _) in results.items():
        if mode == "plain":
            continue
        if passing is None:
            regressions = sorted(t for t, o in result.items() if o == "failed" and t not in baseline)
        else:
            regressions = sorted(t for t, o in result.items() if o == "failed" and t in passing)
        print(f"\n{mode}: {len(regressions)} regression(s) against plain GRPOTrainer")
        print("".join(f"  {t}\n" for t in regressions), end="")
        status = status or int(bool(regressions))
    return status


if __name__ == "__main__":
    sys.exit(main())
