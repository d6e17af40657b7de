"""Shrink, refill and no filter at an equal generation budget, on the template-collapse toy.

Each arm trains the toy of `template_collapse.py` (8 letters, P = 8 groups of G = 8 rollouts per generation batch,
the warm start that answers 6 letters right and 2 at random) from the same warm start until it has generated the same
number of prompt groups (`--budget_groups`), then the policy is evaluated on fresh samples (`--eval_samples` per
letter, temperature 1). The arms:

- `unfiltered`: `reward_variance_filtering=None`, every group trains;
- `shrink`: the paper's filter (top_p 0.9, linear, zero-variance groups dropped): the batch shrinks to the kept groups;
- `refill`: the same filter with `reward_variance_refill="nonzero_variance"` (DAPO) and up to `--max_rounds` rounds;
- `refill_pooled`: `reward_variance_refill="pooled"`, the paper's rule over every round's groups.

Per arm and seed it records: optimizer steps with an update, rows trained per update, generation seconds per update
(the rollout's `_generate` calls, timed), wall seconds, and success after the budget (all letters and the two hard
ones). One JSON per run in `--out_dir`; `--report DIR` prints the table over seeds. Timings are comparable within one
invocation only.

`--frozen_lake_vllm` runs the FrozenLake recipe instead, on SmolLM2-135M with vLLM's colocate engine (the CPU build:
`--python` names the vLLM environment's interpreter), for `--steps` optimizer steps per arm (unfiltered, shrink,
refill), and records from each step's metrics the rows trained, the generation rounds, the step and refill seconds and
the success rate.

    python benchmarks/dynamic_sampling.py --seeds 0 1 2 --out_dir benchmarks/results/dynamic_sampling
    python benchmarks/dynamic_sampling.py --report benchmarks/results/dynamic_sampling
    python benchmarks/dynamic_sampling.py --frozen_lake_vllm --python .venv-vllm/bin/python --steps 2 \
        --out_dir benchmarks/results/dynamic_sampling_frozen_lake
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

import collapse_analysis as analysis  # noqa: E402
import template_collapse as toy  # noqa: E402
import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402


ARMS = {
    "unfiltered": {"reward_variance_filtering": None},
    "shrink": dict(toy.FILTER),
    "refill": dict(toy.FILTER, reward_variance_refill="nonzero_variance"),
    "refill_pooled": dict(toy.FILTER, reward_variance_refill="pooled"),
}


class GenerationBudget(TrainerCallback):
    """Stops training once the trainer has generated `groups` prompt groups; times its `_generate` calls."""

    def __init__(self, trainer, groups: int, groups_per_round: int):
        self.trainer, self.groups, self.per_round = trainer, groups, groups_per_round
        self.rounds, self.seconds = 0, 0.0
        original = trainer._generate

        def timed(prompts):
            start = time.perf_counter()
            try:
                return original(prompts)
            finally:
                self.seconds += time.perf_counter() - start
                self.rounds += 1

        trainer._generate = timed

    def on_step_end(self, args, state, control, **kwargs):
        if self.rounds * self.per_round >= self.groups:
            control.should_training_stop = True


def success_rates(model, tokenizer, samples: int, seed: int) -> dict[str, float]:
    """Success on every letter and on the hard ones, from `samples` fresh completions per letter (temperature 1)."""
    torch.manual_seed(10_000 + seed)
    model.eval()
    per_letter = {}
    for row in toy.task_rows():
        ids = tokenizer(toy.render_prompt(tokenizer, row["user"]), return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(
                ids.repeat(samples, 1),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                max_new_tokens=32,
                pad_token_id=tokenizer.pad_token_id,
            )
        texts = tokenizer.batch_decode(out[:, ids.size(1) :], skip_special_tokens=True)
        per_letter[row["target"]] = statistics.fmean(toy.task_reward(row["target"], t) for t in texts)
    hard = [per_letter[t] for t in sorted(toy.HARD)]
    return {"success": statistics.fmean(per_letter.values()), "hard_success": statistics.fmean(hard)}


def run(arm: str, seed: int, work_dir: Path, budget_groups: int, lr: float, max_rounds: int, samples: int) -> dict:
    from datasets import Dataset

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    rows = [dict(row, prompt=toy.render_prompt(tokenizer, row["user"])) for row in toy.task_rows()]
    generations = 8
    settings = dict(ARMS[arm])
    if settings.get("reward_variance_refill"):
        settings["reward_variance_refill_max_rounds"] = max_rounds
    args = SNRFilteredGRPOConfig(
        output_dir=str(work_dir / "runs" / f"{arm}-seed{seed}"),
        per_device_train_batch_size=len(rows) * generations,  # one optimizer step per batch of all 8 letters
        num_generations=generations,
        max_completion_length=32,
        temperature=1.0,
        max_steps=budget_groups,  # an upper bound: the budget callback stops the run
        learning_rate=lr,
        lr_scheduler_type="constant",
        epsilon=0.2,
        epsilon_high=0.28,
        logging_steps=1,
        save_strategy="no",
        seed=seed,
        mi_diagnostics=False,
        **settings,
        **CPU_TRAINING_KWARGS,
    )
    trainer = SNRFilteredGRPOTrainer(
        model=toy.warm_start(seed, work_dir),
        reward_funcs=[toy.easy_success, toy.hard_success],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    budget = GenerationBudget(trainer, budget_groups, groups_per_round=len(rows))
    trainer.add_callback(budget)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    steps = [log for log in trainer.state.log_history if "loss" in log]
    kept = [log.get("ragen2/filter/kept_rows", len(rows) * generations) for log in steps]
    updates = sum(1 for rows_kept in kept if rows_kept > 0)
    return {
        "arm": arm,
        "seed": seed,
        "settings": settings,
        "budget_groups": budget_groups,
        "groups_generated": budget.rounds * len(rows),
        "optimizer_steps": len(steps),
        "updates": updates,
        "rows_per_update": sum(kept) / updates if updates else 0.0,
        "generation_seconds": budget.seconds,
        "generation_seconds_per_update": budget.seconds / updates if updates else math.nan,
        "wall_seconds": wall,
        **success_rates(trainer.model, tokenizer, samples, seed),
    }


RECIPE_ARMS = {  # the recipe's CPU preset keeps zero-variance groups; the filtered arms use the paper's rule
    "unfiltered": ["--reward_variance_filtering", "none"],
    "shrink": ["--reward_variance_top_p_mode", "linear", "--reward_variance_include_zero", "false"],
    "refill": ["--reward_variance_top_p_mode", "linear", "--reward_variance_include_zero", "false",
               "--reward_variance_refill", "nonzero_variance", "--reward_variance_empty_patience", "0"],
}  # fmt: skip


def frozen_lake_vllm(python: str, steps: int, out_dir: Path) -> None:
    """The FrozenLake recipe on SmolLM2 through vLLM, one run per arm, in the vLLM environment's interpreter."""
    import subprocess
    import tempfile

    from trl_ragen2.models.smollm2 import smollm2_path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    for arm, flags in RECIPE_ARMS.items():
        with tempfile.TemporaryDirectory() as folder:
            command = [python, str(root / "recipes" / "frozen_lake.py"), "--config",
                       str(root / "recipes" / "configs" / "agent_cpu.yaml"), "--model_name_or_path", smollm2_path(),
                       "--use_vllm", "true", "--vllm_mode", "colocate", "--max_steps", str(steps),
                       "--eval_strategy", "no", "--write_plots", "false", "--mi_diagnostics", "false",
                       "--output_dir", folder, *flags]  # fmt: skip
            start = time.perf_counter()
            proc = subprocess.run(command, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if proc.returncode:
                raise RuntimeError(f"{arm} failed:\n{proc.stderr[-4000:]}")
            history = [json.loads(line) for line in (Path(folder) / "metrics.jsonl").read_text().splitlines()]
        rows = [log for log in history if "loss" in log]
        result = {
            "arm": arm,
            "model": "smollm2-135m",
            "steps": len(rows),
            "kept_rows": [log.get("ragen2/filter/kept_rows", 8.0) for log in rows],
            "generation_rounds": [log.get("ragen2/filter/generation_rounds", 1.0) for log in rows],
            "step_seconds": [log.get("step_time") for log in rows],
            "refill_seconds": [log.get("ragen2/filter/refill_seconds", 0.0) for log in rows],
            "success_rate": [log.get("ragen2/env/frozen_lake/success_rate") for log in rows],
            "wall_seconds": wall,
            "command": "python benchmarks/dynamic_sampling.py --frozen_lake_vllm --python .venv-vllm/bin/python "
            f"--steps {steps}",
        }
        (out_dir / f"{arm}.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result), flush=True)


def report(folder: str) -> None:
    recipe_runs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json")) if "-seed" not in p.name]
    if recipe_runs:  # --frozen_lake_vllm: one run per arm
        print(
            "| arm | steps | rows trained per step | generation rounds per step | step seconds | refill seconds | wall seconds |"
        )
        print("|---|---|---|---|---|---|---|")
        for run in recipe_runs:
            cells = [run["kept_rows"], run["generation_rounds"], run["step_seconds"], run["refill_seconds"]]
            cells = [" / ".join(f"{v:.4g}" for v in values) for values in cells]
            print(f"| {run['arm']} | {run['steps']} | " + " | ".join(cells) + f" | {run['wall_seconds']:.0f} |")
        return
    runs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*-seed*.json"))]
    columns = (
        "updates",
        "rows_per_update",
        "generation_seconds_per_update",
        "wall_seconds",
        "success",
        "hard_success",
    )
    print(f"{len(runs)} runs; mean over seeds (min .. max); budget {runs[0]['budget_groups']} groups per run")
    print("| arm | seeds | " + " | ".join(columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        cells = []
        for column in columns:
            values = [r[column] for r in mine]
            cells.append(f"{statistics.fmean(values):.3g} ({min(values):.3g} .. {max(values):.3g})")
        print(f"| {arm} | {len(mine)} | " + " | ".join(cells) + " |")
    shrink = {r["seed"]: r["hard_success"] for r in runs if r["arm"] == "shrink"}
    print("\nhard-letter success, each arm - shrink, paired by seed (95% t interval over seeds)")
    for arm in ARMS:
        if arm != "shrink" and any(r["arm"] == arm for r in runs):
            diff = analysis.paired({r["seed"]: r["hard_success"] for r in runs if r["arm"] == arm}, shrink)
            low, high = diff.ci95
            print(f"  {arm:<14} n={len(diff.seeds)}  {diff.mean:+.3f}  [{low:+.3f}, {high:+.3f}]  p {diff.p:.3g}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--budget_groups", type=int, default=160, help="prompt groups each arm may generate")
    parser.add_argument("--max_rounds", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval_samples", type=int, default=32)
    parser.add_argument("--out_dir", default="outputs/dynamic_sampling")
    parser.add_argument("--work_dir", default=None, help="warm starts and trainer folders (default: out_dir/work)")
    parser.add_argument("--report", default=None, help="a folder of run files: print the table")
    parser.add_argument("--frozen_lake_vllm", action="store_true", help="the FrozenLake recipe on SmolLM2 via vLLM")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the vLLM environment")
    parser.add_argument("--steps", type=int, default=2, help="--frozen_lake_vllm: optimizer steps per arm")
    args = parser.parse_args(argv)
    if args.frozen_lake_vllm:
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        frozen_lake_vllm(args.python, args.steps, out_dir)
        return
    if args.report:
        report(args.report)
        return
    out_dir = Path(args.out_dir)
    work_dir = Path(args.work_dir) if args.work_dir else out_dir / "work"
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/dynamic_sampling.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for seed in args.seeds:
        for arm in args.arms:
            result = run(arm, seed, work_dir, args.budget_groups, args.lr, args.max_rounds, args.eval_samples)
            result["command"] = command
            (out_dir / f"{arm}-seed{seed}.json").write_text(json.dumps(result, indent=1) + "\n")
            print(json.dumps({k: v for k, v in result.items() if k not in ("settings", "command")}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
