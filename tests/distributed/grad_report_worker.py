"""Two-process gradient SNR report (launched by tests/test_grad_report_distributed.py with torchrun, gloo on CPU).

3 prompt groups of 4 rollouts per step over 2 processes of 6 rows: group 1 spans both processes. At step s only group
s % 3 has reward variance (`positional_reward_for`), so its bucket (the highest of 3) lies on process 0 at step 0,
on both processes at step 1 and on process 1 at step 2. The learning rate is 0: every report is taken at the initial
weights. Each process saves to `<out>/rank<r>.pt` its pre-filter rows of every step and the report's metrics.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer  # noqa: E402
from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, make_tiny_tokenizer  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripted import finish_processes, positional_reward_for, script_generation  # noqa: E402


ROWS_PER_PROCESS, NUM_GENERATIONS = 6, 4
ROW_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")


def main(out_dir):
    rank = int(os.environ["RANK"])  # set by torchrun
    tokenizer = make_tiny_tokenizer()
    args = SNRFilteredGRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=ROWS_PER_PROCESS // 3,
        gradient_accumulation_steps=3,
        num_generations=NUM_GENERATIONS,
        max_completion_length=8,
        max_steps=3,
        optim="sgd",
        learning_rate=0.0,
        mi_diagnostics=False,
        grad_report_every_n_steps=1,
        grad_report_num_buckets=3,
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="no",
        ddp_backend="gloo",
        seed=3,
    )
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=positional_reward_for(rank, ROWS_PER_PROCESS, NUM_GENERATIONS),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"P{i}:" for i in range(12)]}),
        processing_class=tokenizer,
    )
    script_generation(trainer)
    seen = []
    measure = trainer.gradient_report.measure

    def recording(trainer_, batch, rewards):
        metrics = measure(trainer_, batch, rewards)
        rows = {key: batch[key].detach().cpu().clone() for key in ROW_KEYS}
        seen.append({"rows": rows, "rewards": rewards.cpu().clone(), "metrics": metrics})
        return metrics

    trainer.gradient_report.measure = recording
    trainer.train()
    torch.save(seen, os.path.join(out_dir, f"rank{rank}.pt"))
    finish_processes()


if __name__ == "__main__":
    main(sys.argv[1])
