"""What the diagnostics beyond the paper cost, as ratios to a baseline measured in the same run.

1. **Uncertainty** (`trl_ragen2.collapse.mi_uncertainty`, 1000 shuffles + 1000 resamples) against the cross-scoring
   that made the matrix: the first-turn matrix (64 chains x 8 prompts) and the trajectory one (64 x 64), scored by
   `TransformersCrossScorer` on the model of `benchmarks/cross_scoring.py` (32k vocabulary, 4 layers, prompts of ~200
   tokens, chains of ~100 tokens).
2. **Text metrics** (`trl_ragen2.collapse.text_metrics`) on a batch of 128 chains (8 prompts x 16) of 100 and of 400
   tokens, against the same scoring time.
3. **Gradient report** (`grad_report_every_n_steps=1`, 6 buckets) against the loss passes of the same step:
   `SNRFilteredGRPOTrainer` without the filter (every row is trained on) on that model, 8 prompts x 8 rollouts of up
   to 64 tokens, 3 steps; the report's logged `ragen2/grad/time_s` over the time of the step's loss passes
   (`compute_loss` and the backward pass), and the whole step time with and without the report (generation
   included).

    python benchmarks/diagnostics_extras.py            # all three
    python benchmarks/diagnostics_extras.py --part 3   # one of them
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402


def timed(fn, repeat=3):
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def matrices(model, tokenizer):
    from trl_ragen2.collapse.scoring import TransformersCrossScorer

    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size

    def seqs(count, length):
        return [torch.randint(10, vocab, (length,), generator=g).tolist() for _ in range(count)]

    prompts, chains, histories = seqs(8, 200), seqs(64, 100), seqs(64, 200)
    scorer = TransformersCrossScorer(model)
    first_time, first = timed(lambda: scorer.score(prompts, chains), repeat=1)
    trajectory_time, trajectory = timed(lambda: scorer.score(histories, chains), repeat=1)
    return (first_time, first, torch.arange(64) // 8), (trajectory_time, trajectory, torch.arange(64)), chains


def grad_report_ratio(tokenizer, steps=3):
    from cross_scoring import build_model
    from datasets import Dataset

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS

    def reward(completion_ids, **kwargs):
        return [float(sum(ids) % 7) for ids in completion_ids]  # varies within every group

    step_times, report_times, loss_times = {}, [], []
    for every in (0, 1):
        with tempfile.TemporaryDirectory() as out:
            args = SNRFilteredGRPOConfig(
                output_dir=out, per_device_train_batch_size=64, num_generations=8, max_completion_length=64,
                max_steps=steps, mi_diagnostics=False, grad_report_every_n_steps=every, logging_steps=1,
                reward_variance_filtering=None, save_strategy="no", **CPU_TRAINING_KWARGS,
            )  # fmt: skip
            prompts = [" ".join(random.Random(i).choice("abcdefgh") for _ in range(100)) for i in range(8)]
            trainer = SNRFilteredGRPOTrainer(
                model=build_model(tokenizer), reward_funcs=reward, args=args,
                train_dataset=Dataset.from_dict({"prompt": prompts * steps}), processing_class=tokenizer,
            )  # fmt: skip
            spent = []  # seconds in the loss's forward (compute_loss) and backward passes

            def timing(fn, spent=spent):
                def timed_call(*a, **k):
                    began = time.perf_counter()
                    result = fn(*a, **k)
                    spent.append(time.perf_counter() - began)
                    return result

                return timed_call

            trainer.compute_loss = timing(trainer.compute_loss)
            trainer.accelerator.backward = timing(trainer.accelerator.backward)
            trainer.train()
            times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
            step_times[every] = statistics.mean(times[1:] or times)  # the first step warms up
            if every:
                report_times += [
                    h["ragen2/grad/time_s"] for h in trainer.state.log_history if "ragen2/grad/time_s" in h
                ]
                loss_times.append(sum(spent) / steps)
    return step_times, statistics.mean(report_times), loss_times[0]


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", type=int, choices=(1, 2, 3), help="run one part only")
    part = parser.parse_args().part
    from cross_scoring import build_model

    from trl_ragen2.collapse.mi_uncertainty import mi_uncertainty
    from trl_ragen2.collapse.text_metrics import text_template_metrics
    from trl_ragen2.models.tiny import make_tiny_tokenizer

    torch.manual_seed(0)
    tokenizer = make_tiny_tokenizer()
    if part in (None, 1, 2):
        model = build_model(tokenizer).eval()
        (first_time, first, first_target), (traj_time, traj, traj_target), chains = matrices(model, tokenizer)
        lengths = torch.tensor([len(c) for c in chains])
    if part in (None, 1):
        print("1. Uncertainty (1000 shuffles + 1000 resamples) vs scoring the matrix")
        for name, scoring, logp, target in (
            ("first turn 64 x 8", first_time, first, first_target),
            ("trajectory 64 x 64", traj_time, traj, traj_target),
        ):
            seconds, _ = timed(lambda logp=logp, target=target: mi_uncertainty(logp, lengths, target, seed=0))
            print(f"   {name}: scoring {scoring:.2f}s, uncertainty {seconds:.3f}s, ratio {seconds / scoring:.3f}")
    if part in (None, 2):
        print("2. Text metrics of 128 chains (8 prompts x 16) vs scoring the first-turn matrix")
        rng = random.Random(0)
        for length in (100, 400):
            batch = [[rng.randrange(32000) for _ in range(length)] for _ in range(128)]
            seconds, _ = timed(lambda batch=batch: text_template_metrics(batch, [i // 16 for i in range(128)]))
            print(f"   {length} tokens: {seconds:.2f}s, ratio {seconds / first_time:.2f}")
    if part in (None, 3):
        print("3. Gradient report (6 buckets) vs the loss passes of a step, and whole steps with and without it")
        step_times, report, loss = grad_report_ratio(tokenizer)
        print(f"   report {report:.2f}s, loss passes {loss:.2f}s, ratio {report / loss:.2f}")
        print(
            f"   step without {step_times[0]:.2f}s, with {step_times[1]:.2f}s, ratio {step_times[1] / step_times[0]:.2f}"
        )


if __name__ == "__main__":
    main()
