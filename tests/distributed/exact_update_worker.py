"""Two-process exactness run (launched by tests/test_exact_updates_distributed.py with torchrun, gloo on CPU).

3 prompt groups of 4 rollouts per step over 2 processes of 6 rows, 3 micro-steps of 2 rows per optimizer step:
group 1 spans both processes. At step s only group s % 3 has reward variance, so step 0 leaves process 1 with
only placeholders, step 1 keeps the spanning group (2 rows on each process) and step 2 leaves process 0 with
nothing. The learning rate is 0, so every step's gradient is taken at the initial weights. For each loss setting,
each process saves to `<out>/rank<r>.pt` the gradient of every optimizer step (after DDP's all-reduce) and the kept
rows of each of its micro-steps, from which the test builds plain GRPOTrainer's reference.
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
from exactness import record_gradients, record_kept_rows  # noqa: E402
from scripted import finish_processes, positional_reward_for, script_generation  # noqa: E402


ROWS_PER_PROCESS, NUM_GENERATIONS = 6, 4
# (loss_type, entropy_coef): every loss type with the entropy bonus, and two without it.
SETTINGS = [(loss, 0.05) for loss in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")]
SETTINGS += [("grpo", 0.0), ("dapo", 0.0)]


def run(out_dir, tokenizer, rank, loss_type, entropy_coef):
    args = SNRFilteredGRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=ROWS_PER_PROCESS // 3,
        gradient_accumulation_steps=3,
        num_generations=NUM_GENERATIONS,
        max_completion_length=8,
        max_steps=3,
        optim="sgd",
        learning_rate=0.0,
        max_grad_norm=0.0,
        loss_type=loss_type,
        entropy_coef=entropy_coef,
        importance_sampling_level="sequence" if loss_type == "luspo" else "token",
        mi_diagnostics=False,
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
    grads = record_gradients(trainer)
    rows = record_kept_rows(trainer)
    trainer.train()
    return {"grads": grads.steps, "rows": dict(rows), "logs": trainer.state.log_history}


def main(out_dir):
    rank = int(os.environ["RANK"])  # set by torchrun
    tokenizer = make_tiny_tokenizer()
    results = {setting: run(out_dir, tokenizer, rank, *setting) for setting in SETTINGS}
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finish_processes()


if __name__ == "__main__":
    main(sys.argv[1])
