"""Two-process refill run (launched by tests/test_refill_distributed.py with torchrun, gloo on CPU).

2 processes of 4 rows (2 prompt groups of 4 rollouts per round: group 0 on process 0, group 1 on process 1), one
optimizer step of 2 micro-steps of 2 rows, refill target 2 groups. Round 1 has no reward variance; in rounds 2 and 3
only group 1 varies, so both kept groups were generated on process 1, more rows than its micro-batches hold: the
pool is gathered and each process trains on half of it. The learning rate is 0. For each loss setting, each process
saves to `<out>/rank<r>.pt` the step's gradient (after DDP's all-reduce), its kept rows and the logs.
"""

import os
import sys


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402

from trl_ragen2 import (  # noqa: E402
    SNRFilteredGRPOConfig,
    SNRFilteredGRPOTrainer,
    SNRFilteredPPOConfig,
    SNRFilteredPPOTrainer,
)
from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, make_tiny_tokenizer  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from exactness import record_gradients, record_kept_rows  # noqa: E402
from scripted import finish_processes, script_generation  # noqa: E402


ROWS_PER_PROCESS, NUM_GENERATIONS = 4, 4
LOSS_TYPES = ("grpo", "bnpo", "dapo", "vespo")
AMPLITUDE_BY_ROUND = {2: 10.0, 3: 3.0}  # group 1's parity amplitude in rounds 2 and 3; 0 elsewhere


def round_reward(rank):
    calls = []

    def reward(prompts, completion_ids, **kwargs):
        calls.append(None)  # one call per round on every process
        amplitude = AMPLITUDE_BY_ROUND.get(len(calls), 0.0) if rank == 1 else 0.0
        return [amplitude * (len(ids) % 2) for ids in completion_ids]

    return reward


def run(out_dir, tokenizer, rank, loss_type, ppo=False):
    config_cls, trainer_cls = (
        (SNRFilteredPPOConfig, SNRFilteredPPOTrainer) if ppo else (SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer)
    )
    args = config_cls(
        output_dir=out_dir,
        per_device_train_batch_size=ROWS_PER_PROCESS // 2,
        gradient_accumulation_steps=2,
        num_generations=NUM_GENERATIONS,
        max_completion_length=8,
        max_steps=1,
        optim="sgd",
        learning_rate=0.0,
        max_grad_norm=0.0,
        loss_type=loss_type,
        entropy_coef=0.05,
        reward_variance_refill="nonzero_variance",
        mi_diagnostics=False,
        shuffle_dataset=False,
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="no",
        ddp_backend="gloo",
        seed=3,
    )
    trainer = trainer_cls(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=round_reward(rank),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"Q{i}:" for i in range(12)]}),
        processing_class=tokenizer,
    )
    script_generation(trainer)
    grads = record_gradients(trainer)
    rows = record_kept_rows(trainer)
    trainer.train()
    if ppo:  # the critic's rows: each process's share of the pool, with the returns GAE gave them
        return {"rows": dict(rows), "logs": trainer.state.log_history}
    return {"grads": grads.steps, "rows": dict(rows), "logs": trainer.state.log_history}


def main(out_dir):
    rank = int(os.environ["RANK"])  # set by torchrun
    tokenizer = make_tiny_tokenizer()
    results = {loss_type: run(out_dir, tokenizer, rank, loss_type) for loss_type in LOSS_TYPES}
    results["ppo"] = run(out_dir, tokenizer, rank, "dapo", ppo=True)
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finish_processes()


if __name__ == "__main__":
    main(sys.argv[1])
