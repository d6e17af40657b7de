"""PPO vs GRPO: optimizer-step time and peak memory of SNRFilteredPPOTrainer against SNRFilteredGRPOTrainer.

```bash
python benchmarks/ppo_step_time.py                          # small Qwen2 config, 8 prompts x 4 rollouts x 64 tokens
python benchmarks/ppo_step_time.py --size tiny --steps 5
python benchmarks/ppo_step_time.py --filter                 # with the SNR filter on (same kept rows for both)
```

Both trainers get the same model (same config and seed), the same batch and the same scripted completions (no
sampling: generation costs nothing, so the difference is the critic's cost: the value pass on the generation
batch, GAE, and the critic's forward, backward and optimizer step per micro-batch). Each variant runs in its own
subprocess so that peak memory is its own: on CUDA the peak allocated memory, on CPU the peak resident set size
above the process's size right before training. The variants alternate over `--rounds` runs. Reported per
optimizer step, after the warm-up steps: the fastest wall time (the step least disturbed by other work on a shared
machine), the median wall time and, on CPU, the median CPU time of the process (which other processes barely
change). The PPO figures are also split into the critic's own parts, timed inside the trainer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

SIZES = {
    # hidden, intermediate, layers, attention heads, kv heads, vocabulary
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1),
    "small": dict(
        hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=8192,
    ),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# One variant, in a subprocess


def scripted_generation(trainer, length: int):
    """Rollout k of a group: `length - k` copies of one token, then EOS (lengths differ, rewards vary by parity)."""
    tokenizer = trainer.processing_class
    token_id = tokenizer.encode(" x")[0]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        seen = Counter()
        completions = []
        for ids in prompt_ids:
            copy_index = seen[tuple(ids)] % num_generations
            seen[tuple(ids)] += 1
            completions.append([token_id] * (length - 1 - copy_index) + [tokenizer.eos_token_id])
        return completions, None

    trainer._generate_single_turn = generate


def timed(owner, name: str, totals: dict):
    """Wrap `owner.name` to add its wall time (synchronised on CUDA) to `totals[name]`."""
    import torch

    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = original(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        totals[name] = totals.get(name, 0.0) + time.perf_counter() - start
        return result

    setattr(owner, name, wrapper)


def run_variant(options) -> dict:
    import psutil
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import make_tiny_model, make_tiny_tokenizer
    from trl_ragen2.ppo.ppo_config import SNRFilteredPPOConfig
    from trl_ragen2.ppo.ppo_trainer import SNRFilteredPPOTrainer

    cuda = torch.cuda.is_available()
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(tokenizer, seed=0, **SIZES[options.size])
    prompts = [f"Task {i}:" for i in range(options.prompts)]

    def parity_reward(completion_ids, **kwargs):
        return [float(len(ids) % 2) for ids in completion_ids]

    ppo = options.variant == "ppo"
    config_cls, trainer_cls = (
        (SNRFilteredPPOConfig, SNRFilteredPPOTrainer) if ppo else (SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer)
    )
    args = config_cls(
        output_dir=os.path.join(options.output_dir, options.variant),
        per_device_train_batch_size=options.prompts * options.generations // options.micro_batches,
        gradient_accumulation_steps=options.micro_batches,
        num_generations=options.generations,
        max_completion_length=options.completion_length,
        max_steps=options.warmup + options.steps,
        learning_rate=1e-6,
        bf16=cuda,
        use_cpu=not cuda,
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        reward_variance_filtering="top_p" if options.filter else None,
        **({"critic_learning_rate": 1e-5} if ppo else {}),
    )
    trainer = trainer_cls(
        model=model,
        reward_funcs=parity_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
    )
    scripted_generation(trainer, options.completion_length)
    parts: dict[str, float] = {}
    if ppo:
        for name in ("_critic_training_step", "_rollout_values"):
            timed(trainer, name, parts)

    wall_times: list[float] = []
    cpu_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.start, self.cpu_start = time.perf_counter(), time.process_time()
            if state.global_step == options.warmup:  # measured steps start: drop warm-up totals
                parts.clear()
                if cuda:
                    torch.cuda.reset_peak_memory_stats()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            if state.global_step > options.warmup:
                wall_times.append(time.perf_counter() - self.start)
                cpu_times.append(time.process_time() - self.cpu_start)

    trainer.add_callback(StepTimer())
    rss_before = psutil.Process().memory_info().rss
    trainer.train()
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before  # ru_maxrss is KiB on Linux
    return {
        "variant": options.variant,
        "device": "cuda" if cuda else "cpu",
        "wall_times_s": wall_times,
        "cpu_times_s": cpu_times,
        "peak_memory_bytes": peak,
        "critic_update_s": parts.get("_critic_training_step", 0.0) / options.steps,
        "value_pass_s": parts.get("_rollout_values", 0.0) / options.steps,
        "policy_parameters": sum(p.numel() for p in trainer.model.parameters()),
    }


# ---------------------------------------------------------------------------------------------------------------
# Driver


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small", help="model configuration")
    parser.add_argument("--prompts", type=int, default=8, help="prompt groups per generation batch")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per prompt (G)")
    parser.add_argument("--completion-length", type=int, default=64, help="tokens per completion (longest rollout)")
    parser.add_argument("--micro-batches", type=int, default=2, help="gradient accumulation steps per update")
    parser.add_argument("--steps", type=int, default=4, help="measured optimizer steps")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured optimizer steps first")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant, alternating")
    parser.add_argument("--cpu-threads", type=int, default=1, help="OMP_NUM_THREADS of the runs (CPU kernels)")
    parser.add_argument("--filter", action="store_true", help="SNR filter on (top_p 0.9) for both variants")
    parser.add_argument("--output-dir", help="trainer output folders (default: a temporary folder)")
    parser.add_argument("--variant", choices=("grpo", "ppo"), help=argparse.SUPPRESS)  # internal: one subprocess
    return parser.parse_args(argv)


def main(argv=None) -> None:
    options = parse_args(argv)
    if options.variant is not None:
        print(json.dumps(run_variant(options)))
        return
    temporary = tempfile.TemporaryDirectory(prefix="ppo_step_time_")
    runs: dict[str, list[dict]] = {"grpo": [], "ppo": []}
    for _ in range(options.rounds):  # alternate the variants, so that a busy spell of the machine hits both
        for variant in runs:
            command = [sys.executable, os.path.abspath(__file__), *(argv if argv is not None else sys.argv[1:])]
            command += ["--variant", variant, "--output-dir", options.output_dir or temporary.name]
            # One CPU thread by default: on a shared machine, multi-threaded CPU kernels spin while waiting for
            # each other and step times swing by 10x or more.
            env = {**os.environ, "OMP_NUM_THREADS": str(options.cpu_threads)}
            completed = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
            if completed.returncode != 0:
                sys.exit(f"{variant} run failed:\n{completed.stderr[-4000:]}")
            runs[variant].append(json.loads(completed.stdout.strip().splitlines()[-1]))
    report(options, {variant: summarize(results) for variant, results in runs.items()})


def summarize(results: list[dict]) -> dict:
    """One variant over its rounds: fastest step (the least disturbed), median CPU time, largest peak memory."""
    return {
        "device": results[0]["device"],
        "policy_parameters": results[0]["policy_parameters"],
        "wall_min_s": min(min(r["wall_times_s"]) for r in results),
        "wall_median_s": statistics.median(t for r in results for t in r["wall_times_s"]),
        "cpu_median_s": statistics.median(t for r in results for t in r["cpu_times_s"]),
        "peak_memory_bytes": max(r["peak_memory_bytes"] for r in results),
        "critic_update_s": min(r["critic_update_s"] for r in results),
        "value_pass_s": min(r["value_pass_s"] for r in results),
    }


def report(options, summary: dict[str, dict]) -> None:
    grpo, ppo = summary["grpo"], summary["ppo"]
    print(
        f"model={options.size} ({grpo['policy_parameters'] / 1e6:.2f}M params), device={grpo['device']}, "
        f"batch={options.prompts}x{options.generations} rollouts x {options.completion_length} tokens, "
        f"{options.micro_batches} micro-batches/step, filter={'on' if options.filter else 'off'}, "
        f"{options.rounds} rounds x {options.steps} measured steps after {options.warmup} warm-up, "
        f"{options.cpu_threads} CPU thread(s)"
    )
    rows = [("step wall time, fastest (s)", "wall_min_s", 1.0), ("step wall time, median (s)", "wall_median_s", 1.0)]
    if grpo["device"] == "cpu":  # CPU time per step barely depends on what else the machine runs
        rows.append(("step CPU time, median (s)", "cpu_median_s", 1.0))
        rows.append(("peak RSS growth in training (MiB)", "peak_memory_bytes", 1024**-2))
    else:
        rows.append(("peak GPU memory allocated (MiB)", "peak_memory_bytes", 1024**-2))
    print(f"{'':36s}{'GRPO':>10s}{'PPO':>10s}{'PPO/GRPO':>10s}")
    for label, key, scale in rows:
        print(f"{label:36s}{grpo[key] * scale:10.3f}{ppo[key] * scale:10.3f}{ppo[key] / max(grpo[key], 1e-12):10.2f}")
    critic = ppo["critic_update_s"] + ppo["value_pass_s"]
    print(
        f"PPO critic parts per step (fastest round): update {ppo['critic_update_s']:.3f} s, value pass "
        f"{ppo['value_pass_s']:.3f} s, together {critic / ppo['wall_min_s']:.0%} of the fastest PPO step"
    )


if __name__ == "__main__":
    main()
