"""Step time and peak memory of SNRFilteredGRPOTrainer against GRPOTrainer, measured in one run.

Both trainers get the same model, config, seed and completions. Generation is scripted (fixed completions of
`--completion-length` tokens), because it is identical for both: the filter acts after generation, so what it saves
is the policy update. Rewards give half of the prompt groups a within-group variance and the other half none, so
the filter (top_p = 0.9) keeps about half of the rows.

    python benchmarks/filter_step_time.py            # CPU, about a minute
    python benchmarks/filter_step_time.py --device cuda --hidden-size 1024 --layers 8

Target (from the paper's 26-41% shorter steps at rho = 0.9): filtered / unfiltered step time <= kept-row fraction
+ 0.15. Each variant runs in its own process, so its peak memory (RSS on CPU, allocated memory on CUDA) is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def run_variant(args) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.tiny import make_tiny_model, make_tiny_tokenizer

    torch.set_num_threads(args.threads)
    tokenizer = make_tiny_tokenizer()
    model = make_tiny_model(
        tokenizer,
        seed=0,
        hidden_size=args.hidden_size,
        intermediate_size=4 * args.hidden_size,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden_size // 64),
        num_key_value_heads=max(1, args.hidden_size // 128),
    ).to(args.device)
    prompts = [f"Prompt {i}: describe the room." for i in range(args.groups)]
    amplitude = {p: (1.0 if i % 2 == 0 else 0.0) for i, p in enumerate(prompts)}  # half the groups vary

    def reward(prompts, completion_ids, **kwargs):
        return [amplitude[p] * (len(ids) % 2) for p, ids in zip(prompts, completion_ids, strict=True)]

    common = dict(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.groups * args.generations // args.grad_accum,
        gradient_accumulation_steps=args.grad_accum,
        num_generations=args.generations,
        max_completion_length=args.completion_length + 2,
        max_steps=args.steps + 1,
        learning_rate=1e-5,
        bf16=args.device == "cuda",
        use_cpu=args.device == "cpu",
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    if args.variant == "filtered":
        # MI diagnostics off: this measures the filter (benchmarks/cross_scoring.py measures the diagnostics)
        config = SNRFilteredGRPOConfig(**common, reward_variance_top_p=0.9, mi_diagnostics=False)
        trainer_cls = SNRFilteredGRPOTrainer
    else:
        config, trainer_cls = GRPOConfig(**common), GRPOTrainer
    dataset = Dataset.from_dict({"prompt": prompts * (args.steps + 2)})
    trainer = trainer_cls(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer)  # fmt: skip

    token = tokenizer.encode("x")[0]

    def scripted(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # lengths alternate between L and L + 1 within a group, so parity rewards differ inside varying groups
        return [[token] * (args.completion_length + (i % 2)) + [tokenizer.eos_token_id]
                for i in range(len(prompt_ids))], None  # fmt: skip

    trainer._generate_single_turn = scripted
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    step_times = [log["step_time"] for log in trainer.state.log_history if "step_time" in log][1:]  # skip warm-up
    kept = [log.get("ragen2/filter/kept_rows") for log in trainer.state.log_history if "step_time" in log]
    if args.device == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before, 0) / 1024  # KiB on Linux
    rows = args.groups * args.generations
    return {
        "step_time": sum(step_times) / len(step_times),
        "wall": wall,
        "peak_mb": peak_mb,
        "kept_fraction": (sum(k for k in kept if k is not None) / len(kept) / rows) if kept[0] is not None else 1.0,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--groups", type=int, default=8, help="prompt groups per step")
    parser.add_argument("--generations", type=int, default=8, help="rollouts per group")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--completion-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="measured steps (after one warm-up step)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", choices=["plain", "filtered"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.variant:  # child process: measure one variant, print JSON
        print(json.dumps(run_variant(args)))
        return

    results = {}
    for variant in ("plain", "filtered"):
        command = [sys.executable, __file__, *sys.argv[1:], "--variant", variant]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        results[variant] = json.loads(output.strip().splitlines()[-1])

    plain, filtered = results["plain"], results["filtered"]
    time_ratio = filtered["step_time"] / plain["step_time"]
    memory_ratio = filtered["peak_mb"] / plain["peak_mb"] if plain["peak_mb"] > 0 else float("nan")
    kept = filtered["kept_fraction"]
    target = kept + 0.15
    print(f"model: hidden {args.hidden_size}, {args.layers} layers; batch {args.groups} groups x {args.generations} "
          f"rollouts, completions of {args.completion_length} tokens, {args.device}")  # fmt: skip
    print(f"{'':<28}{'GRPOTrainer':>14}{'SNR-filtered':>14}{'ratio':>10}")
    print(f"{'step time (s)':<28}{plain['step_time']:>14.3f}{filtered['step_time']:>14.3f}{time_ratio:>10.3f}")
    print(f"{'peak memory (MiB)':<28}{plain['peak_mb']:>14.1f}{filtered['peak_mb']:>14.1f}{memory_ratio:>10.3f}")
    print(f"{'kept row fraction':<28}{1.0:>14.3f}{kept:>14.3f}")
    verdict = "PASS" if time_ratio <= target else "FAIL"
    print(f"target: step-time ratio <= kept fraction + 0.15 = {target:.3f} -> {verdict}")


if __name__ == "__main__":
    main()
