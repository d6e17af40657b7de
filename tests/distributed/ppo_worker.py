"""Two-process SNR-filtered PPO run (launched by tests/test_ppo_distributed.py with torchrun, gloo on CPU).

3 prompt groups of 4 rollouts per step over 2 processes of 6 rows, trained in 2 micro-batches per optimizer step
(gradient accumulation, so the critic's no-sync path runs): group 1 spans both processes. At step s only group
s % 3 has reward variance, so step 0 leaves process 1 with only zero-loss placeholder rows, step 1 keeps the
spanning group, and step 2 leaves process 0 with nothing. Each process writes what its actor and critic trained
on, parameter checksums and its logged metrics to `<out>/rank<r>.json`.
"""

import json
import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402

from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, make_tiny_tokenizer  # noqa: E402
from trl_ragen2.ppo.ppo_config import SNRFilteredPPOConfig  # noqa: E402
from trl_ragen2.ppo.ppo_trainer import SNRFilteredPPOTrainer  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripted import finish_processes, positional_reward_for, script_generation  # noqa: E402


ROWS_PER_PROCESS, NUM_GENERATIONS = 6, 4
# Wall-clock figures differ between processes by nature.
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def checksum(module) -> float:
    return float(sum(p.detach().double().sum() for p in module.parameters()))


def main(out_dir):
    rank = int(os.environ["RANK"])  # set by torchrun

    positional_reward = positional_reward_for(rank, ROWS_PER_PROCESS, NUM_GENERATIONS)

    tokenizer = make_tiny_tokenizer()
    args = SNRFilteredPPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=ROWS_PER_PROCESS // 2,
        gradient_accumulation_steps=2,  # two micro-batches per step: one generation covers both
        num_generations=NUM_GENERATIONS,
        max_completion_length=8,
        max_steps=3,
        learning_rate=1e-2,
        critic_learning_rate=1e-2,
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="steps",
        save_steps=3,
        ddp_backend="gloo",
        seed=3,
    )
    trainer = SNRFilteredPPOTrainer(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=positional_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"P{i}:" for i in range(12)]}),
        processing_class=tokenizer,
    )
    script_generation(trainer)

    actor_rows, critic_rows = [], []
    compute_loss, critic_step = trainer._compute_loss, trainer._critic_training_step

    def loss_rows(batch):
        mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        return int((mask.sum(dim=1) > 0).sum())

    def recording_loss(model, inputs):
        actor_rows.append((trainer.state.global_step, loss_rows(inputs)))
        return compute_loss(model, inputs)

    def recording_critic_step(batch):
        critic_rows.append((trainer.state.global_step, loss_rows(batch)))
        return critic_step(batch)

    trainer._compute_loss, trainer._critic_training_step = recording_loss, recording_critic_step
    critic_before = checksum(trainer.critic)
    trainer.train()
    trainer.save_model()

    def per_step(rows):
        counts = [0, 0, 0]
        for step, count in rows:
            counts[step] += count
        return counts

    logs = [{k: v for k, v in entry.items() if k not in TIMING_KEYS} for entry in trainer.state.log_history]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "actor_rows_per_step": per_step(actor_rows),
                "critic_rows_per_step": per_step(critic_rows),
                "actor_checksum": checksum(trainer.model),
                "critic_checksum": checksum(trainer.critic),
                "critic_checksum_before": critic_before,
                "global_step": trainer.state.global_step,
                "logs": logs,
            },
            f,
        )
    finish_processes()


if __name__ == "__main__":
    main(sys.argv[1])
