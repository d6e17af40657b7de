"""Step time, peak memory and forward tokens of SNRFilteredGRPOTrainer against GRPOTrainer, measured in one run.

Both trainers get the same model, config, seed and completions, for each `--loss-types` entry. Generation is a
scripted `rollout_func` (fixed completions of `--completion-length` tokens), because it is identical for both: the
filter acts after generation, so what it saves is the policy update. Rewards give half of the prompt groups a
within-group variance and the other half none, so the filter (top_p = 0.9) keeps about half of the rows.

    python benchmarks/filter_step_time.py            # CPU, a few minutes
    python benchmarks/filter_step_time.py --beta 0.04                         # with a reference-model pass
    python benchmarks/filter_step_time.py --device cuda --hidden-size 1024 --layers 8

Variants: `plain` (GRPOTrainer), `filtered` (SNR filter; the reward function reads the rollout's field), and
`filtered-early` (the same reward function declaring `rollout_field`, so TRL's old-log-prob, reference and
importance-sampling passes score only the kept rows). The forward-token table counts the tokens every forward pass
of a step processes (scoring passes and the loss) and the share spent on rows the filter drops later.

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
    from trl_ragen2.models.tiny import make_tiny_model, make_tiny_tokenizer

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
    token = tokenizer.encode("x")[0]

    def rollout(batch_prompts, trainer):
        # lengths alternate between L and L + 1 within a group, so parity rewards differ inside varying groups
        completions = [[token] * (args.completion_length + (i % 2)) + [tokenizer.eos_token_id]
                       for i in range(len(batch_prompts))]  # fmt: skip
        return {
            "prompt_ids": [tokenizer(p)["input_ids"] for p in batch_prompts],
            "completion_ids": completions,
            "logprobs": None,
            "score": [amplitude[p] * (len(ids) % 2) for p, ids in zip(batch_prompts, completions, strict=True)],
        }

    def reward(completions, score, **kwargs):
        return [float(value) for value in score]

    if args.variant == "filtered-early":
        reward.rollout_field = "score"

    common = dict(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.groups * args.generations // args.grad_accum,
        gradient_accumulation_steps=args.grad_accum,
        num_generations=args.generations,
        max_completion_length=args.completion_length + 2,
        steps_per_generation=args.steps_per_generation or args.grad_accum,
        max_steps=args.steps + 1,
        learning_rate=1e-5,
        loss_type=args.loss_type,
        beta=args.beta,
        bf16=args.device == "cuda",
        use_cpu=args.device == "cpu",
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    if args.variant.startswith("filtered"):
        # MI diagnostics off: this measures the filter (benchmarks/cross_scoring.py measures the diagnostics)
        config = SNRFilteredGRPOConfig(**common, reward_variance_top_p=0.9, mi_diagnostics=False)
        trainer_cls = SNRFilteredGRPOTrainer
    else:
        config, trainer_cls = GRPOConfig(**common), GRPOTrainer
    dataset = Dataset.from_dict({"prompt": prompts * (args.steps + 2)})
    if args.beta:  # the reference model is loaded by name: save the benchmark model once
        path = tempfile.mkdtemp()
        model.save_pretrained(path)
        model = path
    trainer = trainer_cls(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=rollout)  # fmt: skip
    tokens = {"scoring": 0, "loss": 0}

    def count_tokens(module, inputs, kwargs):
        ids = kwargs.get("input_ids", inputs[0] if inputs else None)
        tokens["loss" if torch.is_grad_enabled() else "scoring"] += int(ids.numel())

    for module in (trainer.model, trainer.ref_model):
        if module is not None:
            module.register_forward_pre_hook(count_tokens, with_kwargs=True)
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
    kept_fraction = (sum(k for k in kept if k is not None) / len(kept) / rows) if kept[0] is not None else 1.0
    skipped = sum(log.get("ragen2/filter/scoring_rows_skipped", 0.0) for log in trainer.state.log_history)
    # Scoring passes run on every row unless rows were skipped; the share of their tokens on dropped rows:
    scored_dropped = tokens["scoring"] * (1.0 - kept_fraction) if args.variant == "filtered" else 0.0
    return {
        "step_time": sum(step_times) / len(step_times),
        "wall": wall,
        "peak_mb": peak_mb,
        "kept_fraction": kept_fraction,
        "forward_tokens": tokens["scoring"] + tokens["loss"],
        "scoring_tokens": tokens["scoring"],
        "dropped_share": scored_dropped / max(tokens["scoring"] + tokens["loss"], 1),
        "scoring_rows_skipped": skipped,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--groups", type=int, default=8, help="prompt groups per step")
    parser.add_argument("--generations", type=int, default=8, help="rollouts per group")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--steps-per-generation", type=int, default=None, help="default: --grad-accum")
    parser.add_argument("--completion-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5, help="measured steps (after one warm-up step)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--loss-types", nargs="+", default=["grpo", "dapo"])
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient; > 0 adds TRL's reference pass")
    parser.add_argument("--variant", choices=["plain", "filtered", "filtered-early"], help=argparse.SUPPRESS)
    parser.add_argument("--loss-type", default="dapo", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.variant:  # child process: measure one variant, print JSON
        print(json.dumps(run_variant(args)))
        return

    print(f"model: hidden {args.hidden_size}, {args.layers} layers; batch {args.groups} groups x {args.generations} "
          f"rollouts, completions of {args.completion_length} tokens, GA {args.grad_accum}, beta {args.beta}, "
          f"{args.device}")  # fmt: skip
    parent = [a for a in sys.argv[1:] if a != "--loss-types" and a not in args.loss_types]
    for loss_type in args.loss_types:
        results = {}
        for variant in ("plain", "filtered", "filtered-early"):
            command = [sys.executable, __file__, *parent, "--variant", variant, "--loss-type", loss_type]
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results[variant] = json.loads(output.strip().splitlines()[-1])
        report(loss_type, results)


def report(loss_type: str, results: dict) -> None:
    plain = results["plain"]
    kept = results["filtered"]["kept_fraction"]
    target = kept + 0.15
    print(f"\nloss_type={loss_type}")
    print(f"{'':<30}{'GRPOTrainer':>13}{'filtered':>13}{'+ early':>13}")
    for label, key, fmt in (
        ("step time (s)", "step_time", ".3f"),
        ("peak memory (MiB)", "peak_mb", ".1f"),
        ("forward tokens / run", "forward_tokens", ".0f"),
        ("  of which scoring passes", "scoring_tokens", ".0f"),
        ("share on dropped rows", "dropped_share", ".3f"),
    ):
        values = [results[v][key] for v in ("plain", "filtered", "filtered-early")]
        print(f"{label:<30}" + "".join(f"{value:>13{fmt}}" for value in values))
    for variant in ("filtered", "filtered-early"):
        ratio = results[variant]["step_time"] / plain["step_time"]
        verdict = "PASS" if ratio <= target else "FAIL"
        print(f"{variant}: step-time ratio {ratio:.3f}, kept fraction {kept:.3f}, target <= {target:.3f} -> {verdict}")


if __name__ == "__main__":
    main()
