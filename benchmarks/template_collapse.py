"""Template collapse produced, not assumed: a tiny policy whose reasoning starts input-dependent is trained with
`SNRFilteredGRPOTrainer`, the real entropy bonus and KL, filtered and unfiltered; its reasoning MI is measured.

**The task** (`task_rows`, `task_reward`). Eight inputs, "Push the box to target c.", differ in one letter `a`..`h`.
The reply is `<reasoning></think><answer>D</answer>` and earns 1 when D is the letter's direction (`ANSWERS`: a fixed
map letter -> Up/Down/Left/Right), else 0. The reasoning is not graded. A short supervised warm start teaches the
notebook's input-dependent reasoning (`notebooks/template_collapse_explained.ipynb`): the reasoning restates the
input's letter, then a random plan of moves (" c: Up box Left go wall Down, c"). It teaches the right direction for
the six **easy** letters `a`..`f` and a random direction for the two **hard** letters `g`, `h`. Every training step
sees all eight inputs (P = 8 groups of G = 8 rollouts), so about 6 of 8 groups start with zero reward variance
(every rollout succeeds) and 2 with variance (about 1 in 4 succeed).

**Why collapse can appear here.** The answer can be right whatever the reasoning says, so nothing in the reward
holds the reasoning to its input. On a zero-variance group GRPO's advantage is 0 and the task gradient vanishes;
what is left is the entropy bonus (and the KL term), which do not shrink with reward variance (the paper, App. H).
The entropy bonus raises the entropy of every reasoning token, including the restated letter, so it can push the
letter toward a uniform draw: the reasoning stays as varied as before (high H(Z|X)) but stops naming its input
(Retrieval-Acc to 1/8, MI-Est to 0), i.e. template collapse. The filter (top_p 0.9 linear, zero-variance groups
dropped) trains on the hard groups only and skips a step in which no group has variance.

**Measured.** The library's MI diagnostics (`mi_diagnostics=True`, first-turn scope, all 64 rollouts cross-scored
under the 8 inputs) at step 1 and every `--mi_every` steps: `ragen2/mi/first_turn/retrieval_acc`, `mi_est`,
`cond_entropy`; TRL's `reward` (success over all rollouts, before filtering), `rewards/easy_success/mean`,
`rewards/hard_success/mean`, `entropy`, and the filter's `ragen2/filter/kept_fraction`.

**Sweep.** entropy coefficient {0, 0.001, 0.01, 0.1} x KL beta {0, 0.001} x filtered / unfiltered, seeds 0..4 (the
seed sets the warm start, shared by the runs of that seed, and the sampling). One JSON per run under `--out_dir`;
`--pool` prints the table (final values = mean of the last two diagnostics; filtered - unfiltered paired by seed
with a t interval) and writes `docs/figures/template_collapse_*.png`.

The filtered arm sets `reward_variance_empty_patience=0`, so every run trains all its steps. Results and conclusions:
`docs/template_collapse_experiment.md`.

    python benchmarks/template_collapse.py --quick                              # one cell, one seed (a minute)
    python benchmarks/template_collapse.py --cells all --seeds 0 1 2 3 4 --out_dir runs/collapse   # the sweep
    python benchmarks/template_collapse.py --pool runs/collapse                 # the table and the figures
    python benchmarks/template_collapse.py --cells ent0.1-kl0-filtered --seeds 0  # a single run

Several processes can share one sweep (the same command in each): every run is claimed once, by a `.running` file.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

import collapse_analysis as analysis  # noqa: E402
import torch  # noqa: E402
from reasoning_policies import imitation_step  # noqa: E402


# ---------------------------------------------------------------------------------------------------------------
# Task: pure functions

TARGETS = "abcdefgh"
ANSWERS = dict(zip(TARGETS, ["Up", "Down", "Left", "Right"] * 2, strict=True))  # the direction of each letter
HARD = frozenset("gh")  # the warm start answers these at random
MOVES = ["Up", "Down", "Left", "Right", "box", "wall", "goal", "the", "go"]
SYSTEM = "You're a helpful assistant."
ANSWER_PATTERN = re.compile(r"</think>\s*<answer>\s*(.*?)\s*</answer>", re.S)


def task_rows(targets: str = TARGETS) -> list[dict]:
    """One row per input: the user message, the letter and whether it is hard. The trainer renders the prompt."""
    return [{"target": t, "hard": t in HARD, "user": f"Push the box to target {t}."} for t in targets]


def task_reward(target: str, completion: str) -> float:
    """1.0 when the completion's answer (after `</think>`, inside `<answer>...</answer>`) is the direction of
    `target`, else 0.0. The reasoning is not graded: a reply is right whatever it says before `</think>`."""
    match = ANSWER_PATTERN.search(completion)
    return float(match is not None and match.group(1) == ANSWERS[target])


def demonstration(target: str, rng: random.Random) -> str:
    """A warm-start reply: input-dependent reasoning (the letter, a random plan, the letter), then the answer, which
    is the letter's direction for an easy letter and a random direction for a hard one."""
    plan = " ".join(rng.choice(MOVES) for _ in range(6))
    answer = rng.choice(list(ANSWERS.values())[:4]) if target in HARD else ANSWERS[target]
    return f" {target}: {plan}, {target}</think><answer>{answer}</answer>"


# ---------------------------------------------------------------------------------------------------------------
# The library (the only import of names below the top level: fix the paths here if modules move)

from trl_ragen2 import (  # noqa: E402
    SNRFilteredGRPOConfig,
    SNRFilteredGRPOTrainer,
    SNRFilteredPPOConfig,
    SNRFilteredPPOTrainer,
    make_tiny_model,
    make_tiny_tokenizer,
)
from trl_ragen2.collapse.mi_uncertainty import student_t_quantile  # noqa: E402
from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS  # noqa: E402


def render_prompt(tokenizer, user: str) -> str:
    """The RAGEN context X as text: chat template, assistant header and a literal `<think>`."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "<think>"


# ---------------------------------------------------------------------------------------------------------------
# Warm start

WARM_STEPS, WARM_BATCH, WARM_LR = 600, 16, 1e-2


TASKS = ("letter", "recall")  # the one-turn task above; the two-turn task of `recall_task.py`
RECALL_WARM_STEPS = 1200  # two kinds of turn to imitate


def warm_start(seed: int, work_dir: Path, steps: int = WARM_STEPS, task: str = "letter") -> str:
    """Imitate the task's demonstrations from a fresh tiny model (seed `seed`); saved once per seed and reused."""
    folder = work_dir / (
        f"warm-seed{seed}-steps{steps}" if task == "letter" else f"warm-{task}-seed{seed}-steps{steps}"
    )
    if (folder / "config.json").exists():
        return str(folder)
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(tokenizer, seed=seed)
    prompts = {row["target"]: tokenizer.encode(render_prompt(tokenizer, row["user"])) for row in task_rows()}
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARM_LR, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    if task == "recall":
        import recall_task  # it imports this module's task definitions
    for _ in range(steps):
        if task == "recall":
            pairs = recall_task.warm_pairs(tokenizer, rng, WARM_BATCH)
        else:
            pairs = []
            for _ in range(WARM_BATCH):
                target = rng.choice(TARGETS)
                reply = tokenizer.encode(demonstration(target, rng)) + [tokenizer.eos_token_id]
                pairs.append((prompts[target], reply))
        imitation_step(model, optimizer, pairs, tokenizer.pad_token_id)  # loss on the reply only
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.replace(folder)
    except OSError:  # another process saved it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


# ---------------------------------------------------------------------------------------------------------------
# One run

ENTROPY_COEFS = (0.0, 0.001, 0.01, 0.1)
BETAS = (0.0, 0.001)
FILTER = dict(
    reward_variance_filtering="top_p",
    reward_variance_top_p=0.9,
    reward_variance_top_p_mode="linear",
    reward_variance_include_zero=False,
    reward_variance_empty_patience=0,  # train all steps (default 5: stop after 5 steps without a kept group)
)
SCOPE = "first_turn"
KEYS = {  # short name -> logged key
    "success": "reward",
    "easy_success": "rewards/easy_success/mean",
    "hard_success": "rewards/hard_success/mean",
    "named_input": "rewards/named_input/mean",  # the recall task: turn 1 names the input's letter
    "entropy": "entropy",
    "kept_fraction": "ragen2/filter/kept_fraction",
    "zero_variance_fraction": "frac_reward_zero_std",
    "kl": "kl",
    "retrieval_acc": f"ragen2/mi/{SCOPE}/retrieval_acc",
    "retrieval_chance": f"ragen2/mi/{SCOPE}/retrieval_chance",
    "mi_est": f"ragen2/mi/{SCOPE}/mi_est",
    "cond_entropy": f"ragen2/mi/{SCOPE}/cond_entropy",
}


# The arms. "filtered": the paper's rule (FILTER); "unfiltered": no filter; the two controls run the same rule and
# then keep what `reward_variance_control` says (`trl_ragen2.filtering.controls`); "ppo_*": SNRFilteredPPOTrainer
# with its critic (initialised from the policy, learning rate `--lr`), GAE gamma = lambda = 1, filtered or not.
ARMS = ("filtered", "unfiltered", "random_matched", "skip_matched", "ppo_filtered", "ppo_unfiltered")
FILTERED_ARMS = ("filtered", "random_matched", "skip_matched", "ppo_filtered")


def cell_name(entropy_coef: float, beta: float, arm: str | bool) -> str:
    if isinstance(arm, bool):  # the original sweep's filtered / unfiltered flag
        arm = "filtered" if arm else "unfiltered"
    return f"ent{entropy_coef:g}-kl{beta:g}-{arm}"


def parse_cell(name: str) -> tuple[float, float, str]:
    match = re.fullmatch(rf"ent([0-9.e-]+)-kl([0-9.e-]+)-({'|'.join(ARMS)})", name)
    if match is None:
        raise ValueError(f"cell {name!r} is not of the form ent<coef>-kl<beta>-<arm>, arm one of {ARMS}")
    return float(match.group(1)), float(match.group(2)), match.group(3)


def all_cells() -> list[str]:
    """The original sweep: every coefficient pair, filtered and unfiltered."""
    return [cell_name(e, b, f) for e in ENTROPY_COEFS for b in BETAS for f in (True, False)]


def arm_settings(arm: str) -> dict:
    """The filter fields of an arm's config."""
    if arm not in FILTERED_ARMS:
        return {"reward_variance_filtering": None}
    control = arm if arm in ("random_matched", "skip_matched") else None
    return dict(FILTER, reward_variance_control=control)


def easy_success(prompts, completions, target, hard, **kwargs):
    """Success on the easy letters; None on hard rows (TRL logs the mean over the rows scored)."""
    return [None if h else task_reward(t, c) for c, t, h in zip(completions, target, hard, strict=True)]


def hard_success(prompts, completions, target, hard, **kwargs):
    return [task_reward(t, c) if h else None for c, t, h in zip(completions, target, hard, strict=True)]


def run(
    cell: str,
    seed: int,
    work_dir: Path,
    steps: int,
    lr: float,
    mi_every: int,
    generations: int = 8,
    task: str = "letter",
) -> dict:
    """Train one cell on one seed; returns the config, the per-step series of `KEYS` and the wall time."""
    from datasets import Dataset

    entropy_coef, beta, arm = parse_cell(cell)
    ppo = arm.startswith("ppo_")
    model_path = (
        warm_start(seed, work_dir) if task == "letter" else warm_start(seed, work_dir, RECALL_WARM_STEPS, task)
    )
    if task == "recall":  # the episode's reward, and (weight 0, logged only) whether turn 1 named the input
        import recall_task

        task_kwargs = dict(reward_funcs=[recall_task.recall_success, recall_task.named_input],
                           rollout_func=recall_task.RecallRollout(max_turn1_tokens=32))  # fmt: skip
        task_args = dict(reward_weights=[1.0, 0.0])
    else:
        task_kwargs, task_args = dict(reward_funcs=[easy_success, hard_success]), {}
    tokenizer = make_tiny_tokenizer()
    rows = [dict(row, prompt=render_prompt(tokenizer, row["user"])) for row in task_rows()]
    config_class, trainer_class = (
        (SNRFilteredPPOConfig, SNRFilteredPPOTrainer) if ppo else (SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer)
    )
    args = config_class(
        output_dir=str(work_dir / "runs" / f"{cell}-seed{seed}"),
        per_device_train_batch_size=len(rows) * generations,  # one optimizer step per batch of all 8 inputs
        num_generations=generations,
        max_completion_length=32,
        temperature=1.0,
        max_steps=steps,
        learning_rate=lr,
        lr_scheduler_type="constant",
        beta=beta,
        entropy_coef=entropy_coef,
        epsilon=0.2,  # paper: clip 0.2 / 0.28
        epsilon_high=0.28,
        logging_steps=1,
        save_strategy="no",
        seed=seed,
        mi_diagnostics=True,
        mi_every_n_steps=mi_every,
        mi_num_samples=len(rows) * generations,
        mi_scopes=[SCOPE],
        mi_num_permutations=0,
        mi_num_bootstrap=0,
        mi_text_metrics=False,
        **arm_settings(arm),
        **({"critic_learning_rate": lr} if ppo else {}),
        **task_args,
        **CPU_TRAINING_KWARGS,
    )
    trainer = trainer_class(
        model=model_path,
        **task_kwargs,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    start = time.time()
    trainer.train()
    series = {name: [] for name in KEYS}
    for record in trainer.state.log_history:
        for name, key in KEYS.items():
            if record.get(key) is not None and not (isinstance(record[key], float) and math.isnan(record[key])):
                series[name].append((record["step"], record[key]))
    return {
        "cell": cell,
        "task": task,
        "seed": seed,
        "entropy_coef": entropy_coef,
        "beta": beta,
        "arm": arm,
        "filtered": arm in FILTERED_ARMS,
        "filter": arm_settings(arm),
        "steps": steps,
        "learning_rate": lr,
        "train_seconds": time.time() - start,
        "series": series,
    }


# ---------------------------------------------------------------------------------------------------------------
# Pool: the table and the figures

MI_NAMES = ("retrieval_acc", "mi_est", "cond_entropy")  # measured at the diagnostics
STEP_NAMES = ("success", "easy_success", "hard_success", "entropy", "kept_fraction")  # measured at every step
LAST_DIAGNOSTICS, LAST_STEPS = 2, 10  # "final" = mean over the last 2 diagnostics / the last 10 steps


def final_values(result: dict) -> dict[str, float]:
    """One number per metric for a run: mean of its last diagnostics (MI) or last steps (the rest)."""
    out = {}
    for name in MI_NAMES + STEP_NAMES:
        values = [v for _, v in result["series"].get(name, [])]
        tail = values[-LAST_DIAGNOSTICS:] if name in MI_NAMES else values[-LAST_STEPS:]
        out[name] = statistics.fmean(tail) if tail else math.nan
    return out


def t_interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% t interval (nan half-width below two values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, student_t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def load_runs(paths: list[str], arms: tuple[str, ...] = ARMS) -> list[dict]:
    """The run files under `paths` (folders or files) whose arm is one of `arms`."""
    files = []
    for path in paths:
        files.extend(sorted(glob.glob(os.path.join(path, "*.json"))) if os.path.isdir(path) else [path])
    runs = [json.loads(Path(f).read_text()) for f in files]
    return [r for r in runs if arm_of(r) in arms]


def arm_of(result: dict) -> str:
    """A run's arm (the original sweep's files carry only the filtered flag)."""
    return result.get("arm") or ("filtered" if result["filtered"] else "unfiltered")


def pool_table(runs: list[dict]) -> list[dict]:
    """Per (entropy_coef, beta): filtered and unfiltered means, and filtered - unfiltered paired by seed."""
    by_cell = {}
    for result in runs:
        key = (result["entropy_coef"], result["beta"], result["filtered"])
        by_cell.setdefault(key, {})[result["seed"]] = final_values(result)
    rows = []
    for entropy_coef, beta in sorted({(e, b) for e, b, _ in by_cell}):
        filtered, unfiltered = (
            by_cell.get((entropy_coef, beta, True), {}),
            by_cell.get((entropy_coef, beta, False), {}),
        )
        paired = sorted(set(filtered) & set(unfiltered))
        row = {"entropy_coef": entropy_coef, "beta": beta, "n_filtered": len(filtered),
               "n_unfiltered": len(unfiltered), "n_paired": len(paired)}  # fmt: skip
        for name in MI_NAMES + STEP_NAMES:
            for label, runs_of in (("filtered", filtered), ("unfiltered", unfiltered)):
                values = [v[name] for v in runs_of.values() if not math.isnan(v[name])]
                row[f"{name}/{label}"] = t_interval(values) if values else (math.nan, math.nan)
            diffs = [filtered[s][name] - unfiltered[s][name] for s in paired]
            diffs = [d for d in diffs if not math.isnan(d)]
            row[f"{name}/diff"] = t_interval(diffs) if diffs else (math.nan, math.nan)
        rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    def cell(pair):
        mean, half = pair
        return f"{mean:6.3f}" if math.isnan(half) else f"{mean:6.3f} ± {half:5.3f}"

    print("final values (MI: mean of the last 2 diagnostics; success, entropy: of the last 10 steps); ± = 95% t "
          "interval over seeds; diff = filtered - unfiltered, paired by seed")  # fmt: skip
    for name in ("retrieval_acc", "mi_est", "cond_entropy", "success", "entropy", "hard_success"):
        print(f"\n{name}")
        print(f"{'entropy_coef':>12} {'beta':>6} {'n':>3}  {'filtered':>15}  {'unfiltered':>15}  {'diff':>15}")
        for row in rows:
            print(
                f"{row['entropy_coef']:>12g} {row['beta']:>6g} {row['n_paired']:>3}  {cell(row[f'{name}/filtered']):>15}"
                f"  {cell(row[f'{name}/unfiltered']):>15}  {cell(row[f'{name}/diff']):>15}"
            )


def mean_curve(runs: list[dict], name: str) -> tuple[list[int], list[float]]:
    """Mean over runs at each step that every run logged."""
    per_step = {}
    for result in runs:
        for step, value in result["series"].get(name, []):
            per_step.setdefault(step, []).append(value)
    steps = [s for s in sorted(per_step) if len(per_step[s]) == len(runs)]
    return steps, [statistics.fmean(per_step[s]) for s in steps]


def plot_curves(runs: list[dict], path: Path) -> None:
    """Rows: entropy coefficients; columns: Retrieval-Acc, MI-Est, H(Z|X), success; mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    coefs = sorted({r["entropy_coef"] for r in runs})
    panels = [("retrieval_acc", "Retrieval-Acc"), ("mi_est", "MI-Est (nats/token)"),
              ("cond_entropy", "H(Z|X) (nats/token)"), ("success", "success (all rollouts)")]  # fmt: skip
    fig, axes = plt.subplots(
        len(coefs), len(panels), figsize=(4 * len(panels), 2.6 * len(coefs)), squeeze=False, sharey="col"
    )
    for i, coef in enumerate(coefs):
        for j, (name, title) in enumerate(panels):
            ax = axes[i][j]
            for filtered, color in ((True, "C0"), (False, "C1")):
                for beta, style in ((0.0, "-"), (0.001, "--")):
                    group = [
                        r for r in runs if (r["entropy_coef"], r["beta"], r["filtered"]) == (coef, beta, filtered)
                    ]
                    if group:
                        label = f"{'filtered' if filtered else 'unfiltered'}, beta={beta:g} (n={len(group)})"
                        ax.plot(*mean_curve(group, name), style, color=color, label=label)
            if name == "retrieval_acc":
                ax.axhline(1 / len(TARGETS), color="0.5", lw=0.8, ls=":")  # chance
                ax.set_ylim(0, 1.05)
            ax.set_title(f"{title}, entropy_coef={coef:g}", fontsize=9)
            ax.grid(alpha=0.3)
            if i == len(coefs) - 1:
                ax.set_xlabel("step")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_plane(runs: list[dict], path: Path) -> None:
    """Each run's final (H(Z|X), MI-Est): the regime plane of the paper's Figure 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    coefs = sorted({r["entropy_coef"] for r in runs})
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    for k, coef in enumerate(coefs):
        for filtered, marker in ((True, "o"), (False, "x")):
            group = [final_values(r) for r in runs if r["entropy_coef"] == coef and r["filtered"] == filtered]
            label = f"entropy_coef={coef:g}, {'filtered' if filtered else 'unfiltered'}"
            ax.scatter([g["cond_entropy"] for g in group], [g["mi_est"] for g in group], marker=marker,
                       color=f"C{k}", label=label, alpha=0.8)  # fmt: skip
    starts = {r["seed"]: (r["series"]["cond_entropy"][0][1], r["series"]["mi_est"][0][1]) for r in runs}
    ax.scatter(*zip(*starts.values(), strict=True), marker="+", s=120, color="black", label="step 1 (each seed)")
    ax.set_xlabel("H(Z|X), nats/token (final)")
    ax.set_ylabel("MI-Est, nats/token (final)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# Report: the pre-registered analysis (docs/template_collapse_experiment.md, "Pre-registered plan")

PLAN_CELL = (0.1, 0.001)  # entropy coefficient, beta: the cell of the primary contrasts
REFERENCE_CELL = (0.0, 0.001)  # unfiltered without the entropy bonus: does the plan's cell collapse at all?
BLIND_SEEDS = 10  # the paired SD is re-estimated after this many seeds of both arms


def endpoints_by_arm(runs: list[dict], cell: tuple[float, float]) -> dict[str, dict[int, dict]]:
    """{arm: {seed: run_endpoints}} for the runs of one (entropy_coef, beta) cell."""
    out: dict[str, dict[int, dict]] = {}
    for result in runs:
        if (result["entropy_coef"], result["beta"]) == cell:
            out.setdefault(arm_of(result), {})[result["seed"]] = analysis.run_endpoints(result)
    return out


def _column(by_seed: dict[int, dict], name: str) -> dict[int, float]:
    return {seed: values[name] for seed, values in by_seed.items()}


def report(folder: str) -> dict:
    """Print every table of the experiment from the run files in `folder`; returns the numbers printed."""
    runs = load_runs([folder])
    cell = endpoints_by_arm(runs, PLAN_CELL)
    reference = endpoints_by_arm(runs, REFERENCE_CELL)
    out = {"arms": {}, "contrasts": {}, "secondary": {}}
    low, high = analysis.ENDPOINT_STEPS
    print(f"runs: {len(runs)} in {folder}")
    print(f"\nper arm at entropy_coef {PLAN_CELL[0]:g}, beta {PLAN_CELL[1]:g} (reference: unfiltered at "
          f"{REFERENCE_CELL[0]:g}): mean [95% t over seeds]; MI proxies averaged over the diagnostics at steps "
          f"{low}-{high}, success over the last {analysis.SUCCESS_LAST_STEPS} steps")  # fmt: skip
    names = ("mi_est", "retrieval_acc", "cond_entropy", "success")
    print(f"{'arm':<22} {'seeds':>5}  " + "  ".join(f"{n:>24}" for n in names) + "  collapsed")
    rows = [(arm, cell[arm]) for arm in ARMS if arm in cell]
    rows += [("reference (unfiltered)", reference["unfiltered"])] if "unfiltered" in reference else []
    for arm, by_seed in rows:
        entry = {"seeds": sorted(by_seed)}
        cells = []
        for name in names:
            values = [v for v in _column(by_seed, name).values() if not math.isnan(v)]
            mean, half = t_interval(values) if values else (math.nan, math.nan)
            entry[name] = (mean, half)
            cells.append(
                f"{mean:7.3f} [{mean - half:6.3f}, {mean + half:6.3f}]" if not math.isnan(half) else f"{mean:24.3f}"
            )
        collapsed = int(sum(v["collapsed"] for v in by_seed.values()))
        entry["collapsed"] = collapsed
        out["arms"][arm] = entry
        print(
            f"{arm:<22} {len(by_seed):>5}  "
            + "  ".join(f"{c:>24}" for c in cells)
            + f"  {collapsed} of {len(by_seed)}"
        )

    mi = {arm: _column(by_seed, "mi_est") for arm, by_seed in cell.items()}
    if not all(a in mi and b in mi for _, a, b in analysis.CONTRASTS):
        print("\nthe primary contrasts need all four arms: not every arm has runs yet")
        return out
    contrasts = {name: analysis.paired(mi[a], mi[b]) for name, a, b in analysis.CONTRASTS}
    adjusted = analysis.holm({name: c.p for name, c in contrasts.items()})
    print("\nprimary: MI-Est (nats/token), paired by seed; Holm over the three; equivalence margin "
          f"+-{analysis.EQUIVALENCE_MARGIN}")  # fmt: skip
    for name, c in contrasts.items():
        out["contrasts"][name] = {"n": c.n, "mean": c.mean, "sd": c.sd, "ci95": c.ci95, "ci90": c.ci90, "p": c.p,
                                  "holm_p": adjusted[name]}  # fmt: skip
        print(f"  {name:<27} n={c.n:<3} mean {c.mean:+.3f}  95% {analysis._fmt(c.ci95)}  90% {analysis._fmt(c.ci90)}"
              f"  sd {c.sd:.3f}  p {c.p:.3g}  Holm p {adjusted[name]:.3g}")  # fmt: skip
    secondary = {
        "filtered - skip_matched (MI-Est)": analysis.paired(mi["filtered"], mi["skip_matched"]),
        "filtered - unfiltered (success)": analysis.paired(
            _column(cell["filtered"], "success"), _column(cell["unfiltered"], "success")
        ),
        "filtered - unfiltered (Retrieval-Acc)": analysis.paired(
            _column(cell["filtered"], "retrieval_acc"), _column(cell["unfiltered"], "retrieval_acc")
        ),
        "filtered - unfiltered (H(Z|X))": analysis.paired(
            _column(cell["filtered"], "cond_entropy"), _column(cell["unfiltered"], "cond_entropy")
        ),
    }
    if all(not math.isnan(v["named_input"]) for arm in ("filtered", "unfiltered") for v in cell[arm].values()):
        secondary["filtered - unfiltered (named_input, the recall task)"] = analysis.paired(
            _column(cell["filtered"], "named_input"), _column(cell["unfiltered"], "named_input")
        )
    if "ppo_filtered" in mi and "ppo_unfiltered" in mi:
        secondary["ppo_filtered - ppo_unfiltered (MI-Est)"] = analysis.paired(mi["ppo_filtered"], mi["ppo_unfiltered"])
    if "unfiltered" in reference:
        secondary["unfiltered: coefficient 0.1 - 0 (MI-Est; does the cell collapse?)"] = analysis.paired(
            mi["unfiltered"], _column(reference["unfiltered"], "mi_est")
        )
    print("\nsecondary (unadjusted), paired by seed")
    for name, c in secondary.items():
        out["secondary"][name] = {"n": c.n, "mean": c.mean, "ci95": c.ci95, "ci90": c.ci90, "p": c.p}
        print(f"  {name:<62} n={c.n:<3} mean {c.mean:+.3f}  95% {analysis._fmt(c.ci95)}  p {c.p:.3g}")

    blind = analysis.paired(
        {s: v for s, v in mi["filtered"].items() if s in sorted(mi["filtered"])[:BLIND_SEEDS]}, mi["unfiltered"]
    )
    alpha = analysis.ALPHA / len(analysis.CONTRASTS)  # Holm's first step, the strictest
    needed = analysis.seeds_needed(blind.sd, analysis.EQUIVALENCE_MARGIN, alpha)
    f_u = contrasts["filtered - unfiltered"]
    power = analysis.power_at(f_u.n, f_u.sd, analysis.EQUIVALENCE_MARGIN, alpha)
    out["power"] = {"blind_sd": blind.sd, "seeds_needed": needed, "power_now": power}
    print(f"\npower: SD of filtered - unfiltered over the first {blind.n} seeds {blind.sd:.3f} -> {needed} seeds for "
          f"{analysis.POWER_TARGET:.0%} power at {analysis.EQUIVALENCE_MARGIN} nats (alpha {alpha:.4f}); with the "
          f"{f_u.n} seeds run and their SD {f_u.sd:.3f}: power {power:.2f}")  # fmt: skip

    name, reason = analysis.verdict(
        dict(contrasts, **{"filtered - skip_matched": secondary["filtered - skip_matched (MI-Est)"]}),
        secondary["filtered - unfiltered (success)"],
    )
    out["verdict"] = name
    print(f"\nverdict: {name.upper()}: {reason}")
    print("\nper seed, MI-Est (steps 25-50): " + "  ".join(a for a in ARMS if a in mi))
    for seed in sorted(set().union(*[set(v) for v in mi.values()])):
        print(f"  seed {seed:>3}: " + "  ".join(f"{mi[a].get(seed, math.nan):6.3f}" for a in ARMS if a in mi))
    return out


# ---------------------------------------------------------------------------------------------------------------
# CLI


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="+", default=["ent0.1-kl0-unfiltered"], help="cell names, or 'all'")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mi_every", type=int, default=5)
    parser.add_argument("--out_dir", default="outputs/template_collapse", help="one JSON per run goes here")
    parser.add_argument("--work_dir", default=None, help="warm starts and trainer folders (default: out_dir/work)")
    parser.add_argument("--quick", action="store_true", help="one cell, one seed, 10 steps: a smoke check")
    parser.add_argument("--task", choices=TASKS, default="letter", help="'recall': the two-turn task (recall_task.py)")
    parser.add_argument("--pool", nargs="+", default=None, help="JSON files or folders: print the table, plot")
    parser.add_argument("--figures", default="docs/figures", help="where --pool writes its figures")
    parser.add_argument(
        "--report",
        default=None,
        help="a folder of run files: print the pre-registered analysis (collapse_analysis.py)",
    )
    args = parser.parse_args(argv)

    if args.report:
        report(args.report)
        return
    if args.pool:
        runs = load_runs(args.pool, arms=("filtered", "unfiltered"))
        print_table(pool_table(runs))
        figures = Path(args.figures)
        figures.mkdir(parents=True, exist_ok=True)
        plot_curves(runs, figures / "template_collapse_curves.png")
        plot_plane(runs, figures / "template_collapse_plane.png")
        print(f"\nfigures: {figures}/template_collapse_curves.png, template_collapse_plane.png ({len(runs)} runs)")
        return
    if args.quick:
        args.steps, args.mi_every = 10, 5
    out_dir = Path(args.out_dir)
    work_dir = Path(args.work_dir) if args.work_dir else out_dir / "work"
    work_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    cells = all_cells() if args.cells == ["all"] else args.cells
    for seed in args.seeds:
        for cell in cells:
            path = out_dir / f"{cell}-seed{seed}.json"
            claim = path.with_suffix(".running")  # several processes can share one sweep: each run is claimed once
            if path.exists():
                continue
            try:
                os.close(os.open(claim, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                continue
            result = run(cell, seed, work_dir, args.steps, args.lr, args.mi_every, task=args.task)
            path.write_text(json.dumps(result, separators=(",", ":")) + "\n")
            claim.unlink()
            last = {name: values[-1][1] for name, values in result["series"].items() if values}
            print(
                f"{cell} seed {seed}: {result['train_seconds']:.0f}s  "
                + "  ".join(f"{name}={value:.3f}" for name, value in last.items()),
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
