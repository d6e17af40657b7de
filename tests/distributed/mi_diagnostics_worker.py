"""Two-process MI diagnostics run (launched by tests/test_diagnostics_distributed.py with torchrun, gloo on CPU).

A plain trl.GRPOTrainer with MIDiagnosticsCallback attached, 3 prompt groups of 4 rollouts over 2 processes of 6
rows (group 1 spans both processes), diagnostics at every step. At step 2 process 1's reasoning extractor returns
nothing, so that process has no valid pair at all. The scorer is also made to pad its forwards across processes,
as it does under ZeRO-3/FSDP. Each process writes its logged MI values to `<out>/rank<r>.json`.

With `auto` the scorer is `mi_engine="auto"`'s pair of engines, two transformers scorers made slower by sleeping:
"transformers" by 0.3 s a call everywhere, "vllm" by 1 s on process 1 only. Each process alone would pick a different
engine; the probe's times are the largest over processes, so both must pick transformers.
"""

import json
import os
import sys
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import trl_ragen2.collapse.diagnostics as diagnostics_module  # noqa: E402
from trl_ragen2.collapse.diagnostics import MIDiagnosticsCallback, MIDiagnosticsConfig  # noqa: E402
from trl_ragen2.collapse.scoring import ThinkTagExtractor, TransformersCrossScorer  # noqa: E402
from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, make_tiny_tokenizer  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripted import finish_processes  # noqa: E402


class SleepingScorer:
    """The transformers scorer, `delay` seconds slower per call."""

    def __init__(self, scorer, delay):
        self.scorer, self.delay = scorer, delay

    def score(self, contexts, chains, mask=None, **kwargs):
        time.sleep(self.delay)
        return self.scorer.score(contexts, chains, mask, **kwargs)


def main(out_dir, mode="plain"):
    rank = int(os.environ["RANK"])  # set by torchrun
    tokenizer = make_tiny_tokenizer()
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Count to {i}"}] for i in range(60)]})

    def length_reward(completions, **kwargs):
        return [float(len(c[0]["content"])) for c in completions]

    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=6,
        num_generations=4,
        max_completion_length=10,
        max_steps=3,
        learning_rate=1e-3,
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="no",
        ddp_backend="gloo",
        seed=5,
    )
    trainer = GRPOTrainer(
        model=make_tiny_model(tokenizer, seed=5),
        reward_funcs=length_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    think = ThinkTagExtractor()

    def extractor(text):
        if rank == 1 and trainer.state.global_step == 1:
            return ""  # step 2: no valid pair on this process
        return think(text)

    diagnostics_module._is_sharded = lambda trainer: True  # exercise the cross-process forward padding
    callback = MIDiagnosticsCallback(MIDiagnosticsConfig(every_n_steps=1, num_samples=8), extractor=extractor)
    callback.attach(trainer)
    if mode == "auto":

        def scorer(delay):
            return SleepingScorer(TransformersCrossScorer(trainer.model, accelerator=trainer.accelerator), delay)

        callback.diagnostics.scorer = {"transformers": scorer(0.3), "vllm": scorer(1.0 if rank == 1 else 0.0)}
    trainer.train()
    logs = {
        h["step"]: {k: v for k, v in h.items() if k.startswith("ragen2/mi/")}
        for h in trainer.state.log_history
        if "loss" in h
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(
            {"logs": logs, "global_step": trainer.state.global_step, "engines": callback.diagnostics.engines.rates}, f
        )
    finish_processes()


if __name__ == "__main__":
    main(*sys.argv[1:])
