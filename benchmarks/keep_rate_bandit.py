"""Fixed, annealed and automatic keep rates on a contextual bandit whose expected reward is known exactly.

The bandit models the paper's argument for filtering (App. H) and nothing else. A context x has K arms; arm a succeeds
with probability p(x, a), known. The policy is a linear softmax over fixed random context features, logits = W phi(x),
so every update moves the behaviour on every context. Each step draws P contexts and G rollouts of each, scores the
groups with `group_reward_scores`, selects them with the library's own `KeepRateControl` and `select_under` (the
trainer's code path), and takes one Adam step on the kept rows' GRPO loss: advantage (R - mean) / (std + 1e-4) of the
group, averaged over the kept rows. Every rollout's update also carries a reward-independent noise term of scale
`--noise` on its logits: the KL and entropy gradients the paper says do not shrink with reward variance. That term is
an assumption of this benchmark, so it shows what the keep-rate modes do *given* the paper's mechanism; it does not
test the mechanism.

Three tasks span Table 8 (their measured Std/Mean is in the output):

- `bimodal` (Sokoban-like, Std/Mean about 2): 40% of the contexts always succeed, 30% never do, 30% succeed only
  with their one correct arm. Most groups have zero variance.
- `uniform` (FrozenLake-like, Std/Mean about 0.25, Table 8's FrozenLake is 0.33): every context pays 0.7 on its
  correct arm and 0.2 on the others, so every group has about the same variance.
- `graded` (Std/Mean about 1.2): the correct arm pays 1, 1/2, 1/4 or 1/8, the others nothing. Hard contexts first
  succeed rarely, and their groups then have little variance: the ones an aggressive rho drops.

The score is the policy's exact expected success over all contexts, J = mean_x sum_a pi(a|x) p(x, a) (ground truth,
no sampling), at the end of the budget and averaged over the run (area under the curve). Every mode gets the same
budget (steps x P x G rollouts) and, per seed, the same task; intervals are 95% Student-t intervals over seeds, and
differences are paired by seed.

    python benchmarks/keep_rate_bandit.py               # the documented run: 30 seeds, 3 tasks, 7 modes
    python benchmarks/keep_rate_bandit.py --quick       # a smoke check (seconds)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

from trl_ragen2.collapse.mi_uncertainty import student_t_quantile
from trl_ragen2.filtering.keep_rate import KeepRateControl, select_under
from trl_ragen2.filtering.selection import group_reward_scores, std_over_mean


TASKS = ("bimodal", "uniform", "graded")


def modes(steps: int) -> dict[str, dict]:
    """Filter settings compared, by name: `strategy` None trains on every row."""
    return {
        "none": dict(strategy=None),
        "fixed 0.9": dict(strategy="top_p", control=KeepRateControl(top_p=0.9)),
        "fixed 0.6": dict(strategy="top_p", control=KeepRateControl(top_p=0.6)),
        "linear 1.0->0.6": dict(
            strategy="top_p",
            control=KeepRateControl(top_p=1.0, top_p_end=0.6, schedule="linear", schedule_steps=steps),
        ),
        "warmup 20%, 0.9": dict(strategy="top_p", control=KeepRateControl(top_p=0.9, warmup_steps=steps // 5)),
        "auto 0.9": dict(strategy="auto", control=KeepRateControl(top_p=0.9, auto=True)),
        "fixed 0.6 + guard 0.5": dict(strategy="top_p", control=KeepRateControl(top_p=0.6), min_kept_fraction=0.5),
    }


# ---------------------------------------------------------------------------------------------------------------
# Task


def make_task(kind: str, contexts: int, arms: int, features: int, generator: torch.Generator):
    """(success probabilities (C, K), context features (C, D)) of one task instance."""
    correct = torch.randint(arms, (contexts,), generator=generator)
    one_hot = torch.nn.functional.one_hot(correct, arms).double()  # (C, K)
    if kind == "bimodal":
        kinds = torch.rand(contexts, generator=generator)
        solved, learnable = kinds < 0.4, kinds >= 0.7  # the rest never succeed
        probabilities = torch.where(solved.unsqueeze(1), torch.ones_like(one_hot), torch.zeros_like(one_hot))
        probabilities = torch.where(learnable.unsqueeze(1), one_hot, probabilities)
    elif kind == "uniform":
        probabilities = 0.2 + 0.5 * one_hot
    elif kind == "graded":
        # the correct arm pays 1, 1/2, 1/4 or 1/8 (a quarter of the contexts each), the others nothing
        level = torch.randint(4, (contexts,), generator=generator)
        probabilities = one_hot * (0.5**level).double().unsqueeze(1)
    else:
        raise ValueError(f"task must be one of {TASKS}, got {kind!r}")
    phi = torch.randn(contexts, features, generator=generator, dtype=torch.float64)
    return probabilities, phi / phi.norm(dim=1, keepdim=True)


def expected_success(weights: torch.Tensor, probabilities: torch.Tensor, phi: torch.Tensor) -> float:
    """Ground truth: mean over contexts of sum_a pi(a|x) p(x, a)."""
    policy = torch.softmax(phi @ weights.T, dim=1)  # (C, K)
    return float((policy * probabilities).sum(dim=1).mean())


# ---------------------------------------------------------------------------------------------------------------
# Training


def train(task, mode: dict, args, seed: int) -> dict:
    probabilities, phi = task
    contexts, arms = probabilities.shape
    generator = torch.Generator().manual_seed(10_000 + seed)  # the same sampling stream for every mode
    weights = torch.zeros(arms, phi.size(1), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([weights], lr=args.lr)
    control, strategy = mode.get("control"), mode["strategy"]
    signal, on = None, True
    curve, kept_fractions, auto_on, ratios = [], [], [], []
    for step in range(args.steps):
        chosen = torch.randperm(contexts, generator=generator)[: args.prompts]  # (P,)
        rows = chosen.repeat_interleave(args.generations)  # (P*G,) group order
        policy = torch.softmax(phi[rows] @ weights.detach().T, dim=1)  # (P*G, K)
        actions = torch.multinomial(policy, 1, generator=generator).squeeze(1)
        rewards = torch.rand(rows.numel(), generator=generator, dtype=torch.float64) < probabilities[rows, actions]
        rewards = rewards.double()  # (P*G,)
        noise = torch.randn(rows.numel(), arms, generator=generator, dtype=torch.float64) * args.noise

        ratio = std_over_mean(rewards, args.generations)
        ratios.append(ratio)
        if strategy is None:
            keep_groups = torch.ones(args.prompts, dtype=torch.bool)
        else:
            decision = control.decide(step, ratio, signal, on)
            if decision.auto_on is not None:
                signal, on = decision.auto_signal, decision.auto_on
                auto_on.append(float(on))
            keep_groups, _ = select_under(
                decision,
                group_reward_scores(rewards, args.generations),
                strategy=strategy,
                min_kept_fraction=mode.get("min_kept_fraction", 0.0),
                selection_eps=0.01,
            )
        kept_fractions.append(float(keep_groups.float().mean()))

        grouped = rewards.view(args.prompts, args.generations)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
        keep_rows = keep_groups.repeat_interleave(args.generations)
        if keep_rows.any():
            logits = phi[rows[keep_rows]] @ weights.T  # (N_kept, K)
            log_probs = torch.log_softmax(logits, dim=1).gather(1, actions[keep_rows].unsqueeze(1)).squeeze(1)
            # GRPO loss on the kept rows, plus each row's reward-independent noise on its logits
            loss = (-(advantages[keep_rows] * log_probs) + (noise[keep_rows] * logits).sum(1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        curve.append(expected_success(weights.detach(), probabilities, phi))
    finite = [r for r in ratios if not math.isnan(r)]
    return {
        "final": curve[-1],
        "auc": statistics.fmean(curve),
        "kept_fraction": statistics.fmean(kept_fractions),
        "auto_on": statistics.fmean(auto_on) if auto_on else math.nan,
        "std_over_mean": statistics.fmean(finite) if finite else math.nan,
    }


# ---------------------------------------------------------------------------------------------------------------
# Statistics


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% t interval (exact t quantiles for 1 and 2 degrees of freedom)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, student_t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def fmt(values: list[float], digits: int = 3) -> str:
    mean, half = interval(values)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 30 steps: a smoke check")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps (one generation each)")
    parser.add_argument("--prompts", type=int, default=8, help="P, groups per step")
    parser.add_argument("--generations", type=int, default=8, help="G, rollouts per group")
    parser.add_argument("--contexts", type=int, default=64)
    parser.add_argument("--arms", type=int, default=8)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--noise", type=float, default=0.5, help="scale of the reward-independent update noise")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--out", default=None, help="write every number as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = 3, 30
    torch.set_num_threads(1)
    began = time.perf_counter()
    settings = modes(args.steps)
    results = {"settings": vars(args), "tasks": {}}
    for kind in args.tasks:
        runs = {name: [] for name in settings}
        optimum, start = [], []
        for seed in range(args.seeds):
            task = make_task(kind, args.contexts, args.arms, args.features, torch.Generator().manual_seed(seed))
            optimum.append(float(task[0].max(dim=1).values.mean()))
            start.append(expected_success(torch.zeros(args.arms, args.features, dtype=torch.float64), *task))
            for name, mode in settings.items():
                runs[name].append(train(task, mode, args, seed))
        results["tasks"][kind] = {"optimum": optimum, "start": start, "runs": runs}

        print(f"\n## {kind}: J* (best arm everywhere) {fmt(optimum)}, initial policy {fmt(start)}; "
              f"{args.seeds} seeds, {args.steps} steps of {args.prompts} x {args.generations} rollouts")  # fmt: skip
        print("| mode | final J | mean J over the run | final − none | final − fixed 0.9 | kept fraction | "
              "auto on | Std/Mean |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        for name, values in runs.items():
            final = [v["final"] for v in values]
            versus_none = [v["final"] - b["final"] for v, b in zip(values, runs["none"], strict=True)]
            versus_fixed = [v["final"] - b["final"] for v, b in zip(values, runs["fixed 0.9"], strict=True)]
            auto = statistics.fmean(v["auto_on"] for v in values)
            print(f"| {name} | {fmt(final)} | {fmt([v['auc'] for v in values])} | {fmt(versus_none)} | "
                  f"{fmt(versus_fixed)} | {statistics.fmean(v['kept_fraction'] for v in values):.2f} | "
                  f"{'' if math.isnan(auto) else f'{auto:.2f}'} | "
                  f"{statistics.fmean(v['std_over_mean'] for v in values):.2f} |")  # fmt: skip
    results["wall_s"] = time.perf_counter() - began
    print(f"\nwall time {results['wall_s']:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
