"""What the sample log costs a training step, and what the run browser's page costs to build, measured in one run.

Part 1, the sample log: the same SNR-filtered trainer (tiny model, real sampling, `--groups` prompts x
`--generations` rollouts) trains `--steps` steps with the sample log off (the baseline), then with it on at every
step (`sample_log_every_n_steps=1`, the worst case; the default logs one step in 5). It prints the mean step time of
both, their ratio, the time the recorder itself took per logged step (its share of a step), and the bytes per
logged step. The tiny model's step is milliseconds long, so the share is an upper bound for any real model, whose
steps take seconds while the recorder's work (decoding a few groups' tokens, one fsync) stays the same.

Part 2, the page: a synthetic run of `--page-steps` steps (metrics every step, MI every 5 steps, a sample record
every 5 steps) is written and `trl-ragen2 view` built from it; prints the build time and the page size.

    python benchmarks/sample_log_cost.py                    # CPU, about a minute
    python benchmarks/sample_log_cost.py --steps 20 --page-steps 10000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def train(out: Path, args, sample_groups: int) -> tuple[list[float], list[float], int]:
    """Step times, recorder times and the sample log's size of one run."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, make_tiny_tokenizer

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    tokenizer = make_tiny_tokenizer()
    prompts = [f"Prompt {i}: count the boxes." for i in range(args.groups)]

    def length_reward(completions, **kwargs):
        return [float(len(c) % 3) for c in completions]

    config = SNRFilteredGRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=args.groups * args.generations,
        num_generations=args.generations,
        max_completion_length=args.completion_length,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        mi_diagnostics=False,  # the sample log alone (the MI matrices it logs cost the diagnostics, not the log)
        sample_log_groups=sample_groups,
        sample_log_every_n_steps=1,
        seed=0,
        **CPU_TRAINING_KWARGS,
    )
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=length_reward,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts * args.steps}),
        processing_class=tokenizer,
    )
    recorder_times: list[float] = []
    if trainer.sample_recorder is not None:
        on_batch = trainer.sample_recorder.on_batch

        def timed(*a, **k):
            began = time.perf_counter()
            result = on_batch(*a, **k)
            recorder_times.append(time.perf_counter() - began)
            return result

        trainer.sample_recorder.on_batch = timed
    step_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.began = time.perf_counter()

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter() - self.began)

    trainer.add_callback(StepTimer())
    trainer.train()
    log = out / "samples.jsonl"
    return step_times[1:], recorder_times[1:], log.stat().st_size if log.exists() else 0  # step 1 warms up


def synthetic_run(folder: Path, steps: int, groups: int = 4, generations: int = 8, samples_every: int = 5) -> None:
    """A run folder of `steps` steps: metrics.jsonl every step, MI every 5, a sample record every `samples_every`."""
    import math
    import random

    from trl_ragen2.runs.keys import mi_key
    from trl_ragen2.runs.samples import SampleLogWriter

    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            record = {"step": step, "reward": math.sin(step / 300) + rng.random() * 0.1, "loss": rng.random()}
            record["ragen2/filter/kept_fraction"] = 0.5 + 0.1 * rng.random()
            if step == 1 or step % 5 == 0:
                for scope in ("first_turn", "trajectory"):
                    record[mi_key(scope, "retrieval_acc")] = rng.random()
                    record[mi_key(scope, "retrieval_chance")] = 0.125
                    record[mi_key(scope, "mi_est")] = rng.random() * 0.2
                    record[mi_key(scope, "cond_entropy")] = 1 + rng.random()
            f.write(json.dumps(record) + "\n")
    writer = SampleLogWriter(folder / "samples.jsonl")
    grid = "\n".join("".join(rng.choice("#_.OX") for _ in range(6)) for _ in range(6))
    turn = {"observation": grid, "reasoning": "I push the box left. " * 20, "answer": "Left || Up"}
    for step in [1, *range(samples_every, steps + 1, samples_every)]:
        group_list = [
            {
                "index": g,
                "prompt": "You are solving Sokoban.\n" + grid,
                "rewards": [rng.random() for _ in range(generations)],
                "variance": rng.random(),
                "kept": g % 2 == 0,
                "rollouts": [{"reward": rng.random(), "turns": [turn, turn]} for _ in range(generations)],
            }
            for g in range(groups)
        ]
        n = 16
        mi = {
            "logp": [[-rng.random() * 50 for _ in range(8)] for _ in range(n)],
            "lengths": [20] * n,
            "target": [i % 8 for i in range(n)],
            "same": [[] for _ in range(n)],
            "chains": ["I push the box left. " * 5] * n,
            "rows": list(range(n)),
            "groups": [i // generations for i in range(n)],
            "contexts": [grid] * 8,
            "column_context": list(range(8)),
        }
        writer.write({"step": step, "num_groups": 8, "group_size": generations, "groups": group_list,
                      "mi": {"first_turn": mi}})  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--completion-length", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--page-steps", type=int, default=10000)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base_steps, _, _ = train(tmp / "off", args, sample_groups=0)
        on_steps, recorder, size = train(tmp / "on", args, sample_groups=args.groups)
        base, on = statistics.median(base_steps), statistics.median(on_steps)
        print(
            f"sample log, {args.groups} groups x {args.generations} rollouts logged at every step, {args.steps} steps"
        )
        print(f"  median step time: off {base * 1000:.1f} ms, on {on * 1000:.1f} ms, ratio on/off {on / base:.3f}")
        share = statistics.median(recorder) / on
        print(f"  recorder: {statistics.median(recorder) * 1000:.2f} ms per logged step ({share:.1%} of a step)")
        print(f"  file: {size / max(1, args.steps):,.0f} bytes per logged step")

        run = tmp / "page"
        synthetic_run(run, args.page_steps)
        from trl_ragen2.browser.report import build_report

        began = time.perf_counter()
        page = build_report(run)
        built = time.perf_counter() - began
        size = page.stat().st_size
        print(f"page of a {args.page_steps}-step run: built in {built:.2f} s, {size / 2**20:.2f} MiB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
