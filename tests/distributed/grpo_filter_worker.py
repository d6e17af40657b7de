"""Two-process SNR-filter run (launched by tests/test_distributed.py with torchrun, gloo on CPU).

3 prompt groups of 4 rollouts per step over 2 processes of 6 rows: group 1 spans both processes. At step s
only group s % 3 has reward variance, so step 0 leaves process 1 with nothing, step 1 keeps the spanning group,
and step 2 leaves process 0 with nothing. Each process writes what it trained on to `<out>/rank<r>.json`.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer  # noqa: E402
from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, make_tiny_tokenizer  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripted import finish_processes, positional_reward_for, script_generation  # noqa: E402


ROWS_PER_PROCESS, NUM_GENERATIONS = 6, 4


def main(out_dir):
    rank = int(os.environ["RANK"])  # set by torchrun

    positional_reward = positional_reward_for(rank, ROWS_PER_PROCESS, NUM_GENERATIONS)

    tokenizer = make_tiny_tokenizer()
    args = SNRFilteredGRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=ROWS_PER_PROCESS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=8,
        max_steps=3,
        learning_rate=1e-2,
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="no",
        ddp_backend="gloo",
        seed=3,
    )
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=positional_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"P{i}:" for i in range(12)]}),
        processing_class=tokenizer,
    )
    script_generation(trainer)

    trained_rows, keep_masks = [], []
    compute_loss, select = trainer._compute_loss, trainer._select_groups

    def recording_loss(model, inputs):
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        trained_rows.append((trainer.state.global_step, int((mask.sum(dim=1) > 0).sum())))
        return compute_loss(model, inputs)

    def recording_select(rewards, decision):
        keep, guard_added = select(rewards, decision)  # (P,) kept groups, groups the guard added
        keep_masks.append(keep.tolist())
        return keep, guard_added

    trainer._compute_loss, trainer._select_groups = recording_loss, recording_select
    trainer.train()

    rows_per_step = [0, 0, 0]
    for step, rows in trained_rows:
        rows_per_step[step] += rows
    checksum = float(sum(p.detach().double().sum() for p in trainer.model.parameters()))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "rows_per_step": rows_per_step,
                "keep_masks": keep_masks,
                "checksum": checksum,
                "global_step": trainer.state.global_step,
            },
            f,
        )
    finish_processes()


if __name__ == "__main__":
    main(sys.argv[1])
