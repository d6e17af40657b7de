"""Does SNR filtering help in the paper's settings? SmolLM2-135M-Instruct on FrozenLake, filtered against unfiltered.

`benchmarks/learning_cpu.py` compares the two with GRPO, beta = 0 and no entropy bonus: there a group whose rollouts
all earned the same reward has zero advantage and zero gradient, so dropping it changes only the loss normaliser.
The paper's argument (App. H) is about what such groups still carry. This script runs the settings in which they
carry a gradient, from one warm start per seed:

- `ppo` (the paper's main setting): `SNRFilteredPPOTrainer`, its critic initialised from the policy, GAE with
  gamma = lambda = 1 (non-zero advantages on zero-variance groups), entropy coefficient 0.001, no KL, token-mean loss;
- `grpo`: `SNRFilteredGRPOTrainer` with the entropy bonus 0.001 and KL beta = 0.001 to the warm start (RAGEN's
  top-p sweep), sequence-mean token-mean loss.

Each arm trains twice on the same seed: filtered (top_p 0.9, the paper's linear rule, zero-variance groups dropped)
and unfiltered. Everything else is `learning_cpu.py`'s pipeline (its functions are imported): the solver's warm start
(`--demos comparison`), the RAGEN rollout (3 turns of up to 40 tokens), 4 prompts x 4 rollouts per step, sampled at
temperature 1, and held-out evaluation at temperature 0.5. Generation and evaluation go through vLLM where it is
installed (`--generation`). The warm start leaves the policy at about 0.5 success, so groups keep reward variance.

A seed's run is a sequence of stages, each its own process that writes one JSON file into `--run_dir/seed<k>/`:
`warm`, then `<arm>_<variant>` for each arm and variant. Rerunning the same command skips the stages whose file
exists, so a run interrupted between stages resumes where it stopped (a stage cut short starts again).

    python benchmarks/paper_settings_cpu.py --seed 0 --arms ppo grpo      # one seed, every stage
    python benchmarks/paper_settings_cpu.py --report runs/paper_settings  # the table and curves over the seeds

The report treats the seed (one trained policy) as the unit of replication: the 96 held-out maps are the same for
every policy, so episodes pooled over seeds are not independent draws. Per policy it gives each seed's held-out
success, the mean over seeds with its 95% t interval and the homogeneity chi-square test over the seeds (do they
share one success rate?); then each policy against its seed's warm start and filtered - unfiltered, paired by seed
with a 95% t interval, within each seed paired by held-out map with the exact McNemar test, and the seeds a paired t
test would need for 80% power against the paper's +10.9 points; and the curves over steps (training success, kept
fraction, Retrieval-Acc, MI-Est, token entropy).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import NormalDist, stdev


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

from learning_cpu import (  # noqa: E402
    add_generation_argument,
    cpu_has_native_bf16,
    engine_backend,
    evaluate,
    evaluation_engine,
    grpo,
    mcnemar_exact,
    resolve_generation,
    rollout_config,
    specs,
    successes,
    warm_start,
)


# The arms: the trainer and the fields that differ between them (learning_cpu.grpo sets the rest).
ARMS = {
    "ppo": {"algorithm": "ppo", "entropy_coef": 0.001, "beta": 0.0, "loss_type": "dapo"},
    "grpo": {"algorithm": "grpo", "entropy_coef": 0.001, "beta": 0.001, "loss_type": "grpo"},
}
VARIANTS = ("filtered", "unfiltered")


def stage_names(arms: list[str]) -> list[str]:
    return ["warm"] + [f"{arm}_{variant}" for arm in arms for variant in VARIANTS]


def write_json(path: Path, data: dict) -> None:
    """Write-then-rename: a stage's file exists only once the stage has finished."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=2, default=str))
    os.replace(partial, path)


def clock() -> float:
    return time.perf_counter()


# ---------------------------------------------------------------------------------------------------------------
# Stages (each runs in its own process)


def weights_sha256(model) -> str:
    """A digest of the model's weights (names, dtypes, shapes and bytes, in state-dict order)."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().contiguous().cpu()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def run_warm(args, seed_dir: Path) -> dict:
    """The solver's warm start, saved to `seed_dir/warm_start`, and its held-out evaluation.

    When `warm.json` exists but the weights folder does not (a run resumed where only the stage files were kept),
    the warm start is trained again and must reproduce the recorded weights bit for bit, which in practice needs the
    same CPU kind and library versions: the arms still to run are then paired with the ones that ran on the recorded
    weights. The evaluation is not repeated."""
    import torch
    from learning_cpu import DEMOS, play
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ragen2.models.smollm2 import smollm2_path

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    model = AutoModelForCausalLM.from_pretrained(smollm2_path(), dtype=torch.float32).eval()
    config = rollout_config(args)
    start = clock()
    demos = play(None, tokenizer, specs("train", args.sft_episodes), config,
                 policy=lambda episode: DEMOS[args.demos](episode, config.max_actions_per_turn))  # fmt: skip
    losses = warm_start(model, demos, epochs=args.sft_epochs, lr=args.sft_lr,
                        batch_size=args.sft_batch_size, seed=args.seed, bf16=args.bf16)  # fmt: skip
    train_s = clock() - start
    digest = weights_sha256(model)
    recorded = seed_dir / "warm.json"
    if recorded.exists():
        expected = json.loads(recorded.read_text()).get("warm_start_sha256")
        if digest != expected:
            raise SystemExit(
                f"{seed_dir}: the rebuilt warm start's weights (sha256 {digest[:16]}...) differ from the recorded ones "
                f"({str(expected)[:16]}...); its remaining arms cannot be paired with the finished ones. Start this "
                "seed again in a new --run_dir."
            )
    model.save_pretrained(seed_dir / "warm_start")
    tokenizer.save_pretrained(seed_dir / "warm_start")
    if recorded.exists():
        return json.loads(recorded.read_text())
    start = clock()
    llm = evaluation_engine(smollm2_path(), args.seed) if args.generation == "vllm" else None
    backend = engine_backend(llm, model, args.seed) if llm is not None else None
    evaluation = evaluate(model, tokenizer, specs("validation", args.eval_episodes), config, backend)
    return {"eval": evaluation, "sft_loss_first_last": [losses[0], losses[-1]], "warm_start_sha256": digest,
            "time_s": {"train": round(train_s, 1), "eval": round(clock() - start, 1)}}  # fmt: skip


def run_arm(args, seed_dir: Path, arm: str, variant: str) -> dict:
    """One arm and variant trained from the seed's warm start, and its held-out evaluation."""
    import torch
    from transformers import AutoTokenizer

    fields = dict(ARMS[arm])
    algorithm = fields.pop("algorithm")
    if algorithm == "ppo":
        fields["critic_learning_rate"] = args.critic_lr
    warm_dir = str(seed_dir / "warm_start")
    torch.manual_seed(args.seed)
    start = clock()
    with tempfile.TemporaryDirectory() as scratch:
        logs, trained, backend = grpo(warm_dir, scratch, args, filtered=variant == "filtered", algorithm=algorithm,
                                      seed=args.seed, mi_num_samples=args.mi_num_samples,
                                      mi_every_n_steps=args.mi_every, bf16=args.bf16, **fields)  # fmt: skip
        train_s = clock() - start
        start = clock()
        tokenizer = AutoTokenizer.from_pretrained(warm_dir)
        evaluation = evaluate(trained, tokenizer, specs("validation", args.eval_episodes), rollout_config(args),
                              backend)  # fmt: skip
    return {"eval": evaluation, "logs": logs, "fields": {"algorithm": algorithm, **fields},
            "time_s": {"train": round(train_s, 1), "eval": round(clock() - start, 1)}}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# The report over seeds


def load(run_dir: Path) -> dict[int, dict[str, dict]]:
    """{seed: {stage: its JSON}} for every finished stage under `run_dir`; the seeds' settings must agree."""
    seeds, reference = {}, None
    for seed_dir in sorted(run_dir.glob("seed*")):
        stages = {
            path.stem: json.loads(path.read_text()) for path in seed_dir.glob("*.json") if path.stem != "settings"
        }
        settings = json.loads((seed_dir / "settings.json").read_text())
        shape = {k: v for k, v in settings.items() if k not in LAUNCH_ONLY}
        if reference is None:
            reference = shape
        elif shape != reference:
            differing = sorted(k for k in shape if shape[k] != reference.get(k))
            raise SystemExit(f"--report: {seed_dir} ran different settings ({differing}); report one setting at once")
        seeds[settings["seed"]] = stages
    return seeds


# The paper's FrozenLake gain for PPO with the filter (Table 4: +10.9 points), the effect the seeds-needed line sizes.
PAPER_GAIN = 0.109


def t_interval(values: list[float]) -> tuple[float, float]:
    """The mean of per-seed values and the half-width of its 95% t interval (nan from one seed)."""
    from keep_rate_bandit import interval

    return interval(values)


def paired_mean(differences: list[float]) -> str:
    """The mean of per-seed differences with its 95% t interval (none from one seed)."""
    mean, half = t_interval(differences)
    if len(differences) == 1:
        return f"mean {mean:+.3f} (one seed: no t interval)"
    return f"mean {mean:+.3f} ± {half:.3f} [95% t, {len(differences)} seeds]"


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X chi-square with `dof` degrees of freedom: the regularised upper gamma Q(dof/2, x/2), exact
    for integer dof through its finite series (even dof: e^(-x/2) sum_{i<dof/2} (x/2)^i/i!; odd dof: erfc(sqrt(x/2))
    plus e^(-x/2) sum_{i=1}^{(dof-1)/2} (x/2)^(i-1/2)/Gamma(i+1/2))."""
    if dof < 1:
        raise ValueError(f"dof must be at least 1, got {dof}")
    if x <= 0:
        return 1.0
    half = x / 2
    if dof % 2 == 0:
        return math.exp(-half) * sum(half**i / math.factorial(i) for i in range(dof // 2))
    tail = sum(math.exp((i - 0.5) * math.log(half) - half - math.lgamma(i + 0.5)) for i in range(1, (dof + 1) // 2))
    return math.erfc(math.sqrt(half)) + tail


def homogeneity_chi2(wins: list[int], episodes: list[int]) -> tuple[float, int, float]:
    """Pearson's chi-square test that k seeds share one success rate: the 2 x k table of successes and failures per
    seed against the counts expected from the pooled rate. Returns (chi2, k - 1 degrees of freedom, p); chi2 = 0 and
    p = 1 when every episode of every seed had the same outcome."""
    total, won = sum(episodes), sum(wins)
    dof = len(wins) - 1
    if dof < 1:
        raise ValueError("the homogeneity test needs at least two seeds")
    if won in (0, total):
        return 0.0, dof, 1.0
    rate = won / total
    chi2 = sum((w - n * rate) ** 2 / (n * rate * (1 - rate)) for w, n in zip(wins, episodes, strict=True))
    return chi2, dof, chi2_sf(chi2, dof)


def seeds_for_power(sd: float, delta: float, alpha: float = 0.05, power: float = 0.8) -> tuple[float, int]:
    """The seeds a paired two-sided t test at level `alpha` needs for `power` against a mean difference `delta`,
    given the standard deviation `sd` of the per-seed differences: the normal formula with Guenther's t correction,
    n = ((z_{1-alpha/2} + z_{power}) sd / delta)^2 + z_{1-alpha/2}^2 / 2. Returns the value and it rounded up."""
    z_alpha, z_power = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    n = ((z_alpha + z_power) * sd / delta) ** 2 + z_alpha**2 / 2
    return n, math.ceil(n)


def paired_half_width(sd: float, seeds: int) -> float:
    """The half-width of the 95% t interval of a mean over `seeds` per-seed differences of standard deviation `sd`."""
    from trl_ragen2.collapse.mi_uncertainty import student_t_quantile

    return student_t_quantile(0.975, seeds - 1) * sd / math.sqrt(seeds)


def p_value(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def seeds_needed(arm: str, differences: list[float], delta: float = PAPER_GAIN, seeds: int = 5) -> str:
    """The line that sizes a paired comparison from the spread of the per-seed differences measured."""
    sd = stdev(differences)
    exact, needed = seeds_for_power(sd, delta)
    return (
        f"{arm} seeds needed: the paired SD of filtered − unfiltered over {len(differences)} seeds is {sd:.3f}; a "
        f"paired two-sided t test at α = 0.05 needs {needed} seeds (n = {exact:.2f}, rounded up) for 80% power "
        f"against the paper's +{delta:.3f} (Table 4), and {seeds} seeds would give ± {paired_half_width(sd, seeds):.3f} "
        "[95% t]"
    )


def policy_row(name: str, runs: dict[int, dict]) -> dict:
    """One policy over its seeds: each seed's held-out successes, the mean over seeds and its 95% t interval, and the
    homogeneity test over the seeds (none from one seed)."""
    seeds = sorted(runs)
    wins = [successes(runs[seed]["eval"]) for seed in seeds]
    episodes = [runs[seed]["eval"]["episodes"] for seed in seeds]
    rates = [w / n for w, n in zip(wins, episodes, strict=True)]
    mean, half = t_interval(rates)
    chi2, dof, p = homogeneity_chi2(wins, episodes) if len(seeds) > 1 else (math.nan, 0, math.nan)
    train_s = sum(runs[seed]["time_s"]["train"] for seed in seeds) / len(seeds)
    return {"policy": name, "seeds": seeds, "wins": wins, "episodes": episodes, "rates": rates, "mean": mean,
            "half": half, "chi2": chi2, "dof": dof, "p": p, "train_s": train_s}  # fmt: skip


def row_line(row: dict) -> str:
    episodes = row["episodes"]
    if len(set(episodes)) == 1:
        counts = f"{' / '.join(map(str, row['wins']))} of {episodes[0]}"
    else:
        counts = " / ".join(f"{w} of {n}" for w, n in zip(row["wins"], episodes, strict=True))
    if len(row["seeds"]) == 1:
        mean, homogeneity = f"{row['mean']:.3f} (one seed: no t interval)", "– (one seed)"
    else:
        mean = f"{row['mean']:.3f} ± {row['half']:.3f}"
        homogeneity = f"χ² = {row['chi2']:.1f}, {row['dof']} d.f., p = {p_value(row['p'])}"
    return (f"| {row['policy']} | {', '.join(map(str, row['seeds']))} | {counts} | "
            f"{' / '.join(f'{r:.3f}' for r in row['rates'])} | {mean} | {homogeneity} | {row['train_s']:.0f} |")  # fmt: skip


def report(run_dir: Path, figures: Path) -> list[dict]:
    """Print the Markdown table over the seeds and draw the curves; returns the table's rows."""
    seeds = load(run_dir)
    names = sorted({name for stages in seeds.values() for name in stages}, key=lambda n: (n != "warm", n))
    rows = []
    print(f"\nseeds with a finished stage: {sorted(seeds)}")
    print("| policy | seeds | successes per seed | held-out success per seed | mean over seeds [95% t] "
          "| homogeneity over seeds | train s per run (mean) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in names:
        row = policy_row(name, {seed: stages[name] for seed, stages in seeds.items() if name in stages})
        rows.append(row)
        print(row_line(row))
    seed_sets = {row["policy"]: row["seeds"] for row in rows}
    if len({tuple(s) for s in seed_sets.values()}) > 1:  # means over different seeds do not compare
        print("\nthe rows cover different seeds (" + "; ".join(f"{k}: {v}" for k, v in seed_sets.items())
              + "): compare policies through the differences paired by seed below")  # fmt: skip
    print()
    for name in names[1:] if names and names[0] == "warm" else []:
        paired = [(seed, stages) for seed, stages in sorted(seeds.items()) if "warm" in stages and name in stages]
        differences = [stages[name]["eval"]["success"] - stages["warm"]["eval"]["success"] for _, stages in paired]
        print(f"{name} − warm start, paired by seed ({', '.join(str(s) for s, _ in paired)}): "
              f"{' / '.join(f'{d:+.3f}' for d in differences)}; {paired_mean(differences)}")  # fmt: skip
    for arm in ARMS:
        paired = [(seed, stages) for seed, stages in sorted(seeds.items())
                  if f"{arm}_filtered" in stages and f"{arm}_unfiltered" in stages]  # fmt: skip
        if not paired:
            continue
        differences = [stages[f"{arm}_filtered"]["eval"]["success"] - stages[f"{arm}_unfiltered"]["eval"]["success"]
                       for _, stages in paired]  # fmt: skip
        print(f"\n{arm}: filtered − unfiltered, paired by seed ({', '.join(str(s) for s, _ in paired)}): "
              f"{' / '.join(f'{d:+.3f}' for d in differences)}; {paired_mean(differences)}")  # fmt: skip
        if len(differences) > 1:
            print(seeds_needed(arm, differences))
        for seed, stages in paired:  # the same held-out maps: paired by episode within the seed
            first, second = (stages[f"{arm}_{v}"]["eval"].get("outcomes") for v in VARIANTS)
            if first is None or second is None:
                continue
            only_first = sum(a > b for a, b in zip(first, second, strict=True))
            only_second = sum(b > a for a, b in zip(first, second, strict=True))
            print(f"{arm} seed {seed}, paired by episode: filtered alone won {only_first}, unfiltered alone won "
                  f"{only_second} of {len(first)}; exact McNemar p = {mcnemar_exact(only_first, only_second):.3f}")  # fmt: skip
    plot_curves(seeds, figures / "paper_settings_curves.png")
    return rows


CURVES = (
    ("ragen2/env/frozen_lake/success_rate", "training success"),
    ("ragen2/filter/kept_fraction", "kept fraction"),
    ("ragen2/mi/first_turn/retrieval_acc", "Retrieval-Acc (first turn)"),
    ("ragen2/mi/first_turn/mi_est", "MI-Est (first turn)"),
    ("entropy", "token entropy"),
)


def plot_curves(seeds: dict[int, dict[str, dict]], path: Path) -> None:
    """One panel per curve; per arm and variant, the mean over seeds at each step (thin lines: each seed)."""
    from learning_cpu import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, len(CURVES), figsize=(3.2 * len(CURVES), 2.9))
    colors = {"filtered": "tab:blue", "unfiltered": "tab:orange"}
    styles = {"ppo": "-", "grpo": "--"}
    for ax, (key, title) in zip(axes, CURVES, strict=True):
        for arm in ARMS:
            for variant in VARIANTS:
                per_seed = [[(i + 1, e[key]) for i, e in enumerate(stages[f"{arm}_{variant}"]["logs"])
                             if e.get(key) is not None]
                            for stages in seeds.values() if f"{arm}_{variant}" in stages]  # fmt: skip
                per_seed = [points for points in per_seed if points]
                if not per_seed:
                    continue
                for points in per_seed:
                    ax.plot(
                        *zip(*points, strict=True), color=colors[variant], linestyle=styles[arm], lw=0.5, alpha=0.3
                    )
                steps = sorted({step for points in per_seed for step, _ in points})
                means = [sum(v for points in per_seed for s, v in points if s == step)
                         / sum(1 for points in per_seed for s, _ in points if s == step) for step in steps]  # fmt: skip
                ax.plot(steps, means, color=colors[variant], linestyle=styles[arm], lw=1.5, label=f"{arm} {variant}")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


# ---------------------------------------------------------------------------------------------------------------
# Main


# Settings that must agree for seeds to be reported together: everything that shapes a run, not how it was launched.
LAUNCH_ONLY = ("seed", "stage", "arms", "run_dir", "threads", "report", "figures")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=["ppo", "grpo"])
    parser.add_argument("--stage", default="all", help="all (every missing stage, each in its own process), or one")
    parser.add_argument("--run_dir", default="runs/paper_settings")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke check of the pipeline")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max_turns", type=int, default=3)
    parser.add_argument("--max_tokens_per_turn", type=int, default=40)
    parser.add_argument("--eval_episodes", type=int, default=96, help="validation seeds (held out)")
    parser.add_argument("--sft_episodes", type=int, default=96)
    parser.add_argument("--sft_epochs", type=int, default=1)
    parser.add_argument("--sft_lr", type=float, default=1e-4)
    parser.add_argument("--sft_batch_size", type=int, default=2)
    parser.add_argument("--demos", default="comparison")
    parser.add_argument("--grpo_steps", type=int, default=24, help="RL steps per run (either arm)")
    parser.add_argument("--grpo_prompts", type=int, default=4)
    parser.add_argument("--grpo_generations", type=int, default=4)
    parser.add_argument("--grpo_lr", type=float, default=5e-5, help="the policy's learning rate (either arm)")
    parser.add_argument("--critic_lr", type=float, default=1e-4, help="the PPO critic's learning rate")
    parser.add_argument("--mi_num_samples", type=int, default=16)
    parser.add_argument("--mi_every", type=int, default=4)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None)
    add_generation_argument(parser)
    parser.add_argument(
        "--report", default=None, metavar="RUN_DIR", help="print the table over the seeds; run nothing"
    )
    parser.add_argument("--figures", default="docs/figures")
    args = parser.parse_args(argv)
    if args.report:
        return args
    if args.bf16 is None:
        args.bf16 = cpu_has_native_bf16()
    resolve_generation(args)
    if args.quick:
        args.eval_episodes, args.sft_episodes, args.grpo_steps, args.mi_every = 4, 8, 2, 1
        args.grpo_prompts, args.grpo_generations, args.max_tokens_per_turn, args.mi_num_samples = 2, 2, 32, 4
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        return report(Path(args.report), Path(args.figures))
    seed_dir = Path(args.run_dir) / f"seed{args.seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k not in ("stage",)}
    settings_path = seed_dir / "settings.json"
    if settings_path.exists():
        before = json.loads(settings_path.read_text())
        changed = sorted(k for k in settings if k not in LAUNCH_ONLY and before.get(k) != settings[k])
        if changed:
            raise SystemExit(f"{seed_dir} was started with other settings ({changed}); use another --run_dir")
    write_json(settings_path, settings)
    if args.stage == "all":  # every missing stage, each in a fresh process (one vLLM engine per process)
        for name in stage_names(args.arms):
            rebuild = (
                name == "warm"
                and not (seed_dir / "warm_start").is_dir()
                and any(not (seed_dir / f"{stage}.json").exists() for stage in stage_names(args.arms)[1:])
            )
            if rebuild and (seed_dir / "warm.json").exists():
                print(f"seed {args.seed}: warm start weights missing, rebuilding them ...", flush=True)
            elif (seed_dir / f"{name}.json").exists():
                print(f"seed {args.seed}: {name} done already", flush=True)
                continue
            print(f"seed {args.seed}: {name} ...", flush=True)
            argv_stage = list(argv if argv is not None else sys.argv[1:])
            subprocess.run([sys.executable, __file__, *argv_stage, "--stage", name], check=True)
        return None
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.stage == "warm":
        result = run_warm(args, seed_dir)
    else:
        arm, variant = args.stage.rsplit("_", 1)
        if arm not in ARMS or variant not in VARIANTS:
            raise SystemExit(f"--stage {args.stage!r}: expected all, warm or one of {stage_names(sorted(ARMS))[1:]}")
        if not (seed_dir / "warm.json").exists():
            raise SystemExit(f"--stage {args.stage}: {seed_dir} has no finished warm stage; run --stage warm first")
        result = run_arm(args, seed_dir, arm, variant)
    write_json(seed_dir / f"{args.stage}.json", result)
    print(args.stage, json.dumps(result["eval"]), result["time_s"], flush=True)
    return result


if __name__ == "__main__":
    main()
