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
above the process's size right before training. Step times are medians over the measured optimizer steps, after
the warm-up steps. The PPO figures are also split into the critic's own parts, timed inside the trainer.
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


# ----------------------------------------------------------------------------------------------------------------
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
    from trl_ragen2.ppo_config import SNRFilteredPPOConfig
    from trl_ragen2.ppo_trainer import SNRFilteredPPOTrainer
    from trl_ragen2.tiny import make_tiny_model, make_tiny_tokenizer

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

    step_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            self.start = time.perf_counter()
            if state.global_step == options.warmup:  # measured steps start: drop warm-up totals
                parts.clear()
                if cuda:
                    torch.cuda.reset_peak_memory_stats()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            if state.global_step > options.warmup:
                step_times.append(time.perf_counter() - self.start)

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
        "step_time_s": statistics.median(step_times),
        "peak_memory_bytes": peak,
        "critic_update_s_per_step": parts.get("_critic_training_step", 0.0) / options.steps,
        "value_pass_s_per_step": parts.get("_rollout_values", 0.0) / options.steps,
        "policy_parameters": sum(p.numel() for p in trainer.model.parameters()),
    }


# ----------------------------------------------------------------------------------------------------------------
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
    parser.add_argument("--filter", action="store_true", help="SNR filter on (top_p 0.9) for both variants")
    parser.add_argument("--output-dir", help="trainer output folders (default: a temporary folder)")
    parser.add_argument("--variant", choices=("grpo", "ppo"), help=argparse.SUPPRESS)  # internal: one subprocess
    return parser.parse_args(argv)


def main(argv=None) -> None:
    options = parse_args(argv)
    if options.variant is not None:
        print(json.dumps(run_variant(options)))
        return
    results = {}
    temporary = tempfile.TemporaryDirectory(prefix="ppo_step_time_")
    for variant in ("grpo", "ppo"):
        command = [sys.executable, os.path.abspath(__file__), *(argv if argv is not None else sys.argv[1:])]
        command += ["--variant", variant, "--output-dir", options.output_dir or temporary.name]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            sys.exit(f"{variant} run failed:\n{completed.stderr[-4000:]}")
        results[variant] = json.loads(completed.stdout.strip().splitlines()[-1])

    grpo, ppo = results["grpo"], results["ppo"]
    mib = 1024**2
    print(
        f"model={options.size} ({grpo['policy_parameters'] / 1e6:.2f}M params), device={grpo['device']}, "
        f"batch={options.prompts}x{options.generations} rollouts x {options.completion_length} tokens, "
        f"{options.micro_batches} micro-batches/step, filter={'on' if options.filter else 'off'}, "
        f"{options.steps} measured steps after {options.warmup} warm-up"
    )
    memory_label = "peak GPU memory allocated" if grpo["device"] == "cuda" else "peak RSS growth in training"
    print(f"{'':36s}{'GRPO':>10s}{'PPO':>10s}{'PPO/GRPO':>10s}")
    print(
        f"{'step time (s, median)':36s}{grpo['step_time_s']:10.3f}{ppo['step_time_s']:10.3f}"
        f"{ppo['step_time_s'] / grpo['step_time_s']:10.2f}"
    )
    print(
        f"{memory_label + ' (MiB)':36s}{grpo['peak_memory_bytes'] / mib:10.1f}{ppo['peak_memory_bytes'] / mib:10.1f}"
        f"{ppo['peak_memory_bytes'] / max(grpo['peak_memory_bytes'], 1):10.2f}"
    )
    critic_share = (ppo["critic_update_s_per_step"] + ppo["value_pass_s_per_step"]) / ppo["step_time_s"]
    print(
        f"PPO critic parts per step: update {ppo['critic_update_s_per_step']:.3f} s, value pass "
        f"{ppo['value_pass_s_per_step']:.3f} s ({critic_share:.0%} of the PPO step)"
    )


if __name__ == "__main__":
    main()
