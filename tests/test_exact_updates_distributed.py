"""Exact filtered updates in two processes (torchrun, gloo on CPU): the all-reduced gradient of every optimizer step
equals plain GRPOTrainer's on the step's kept rows of both processes, as one micro-batch in one process."""

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2.models.tiny import make_tiny_model

from .exactness import assert_same_gradient, concat_micro_batches, reference_gradient
from .scripted import dataset, parity_reward_for, tiny_trainer_args
from .torchrun import torchrun


@pytest.mark.distributed
def test_two_process_steps_equal_plain_grpo_on_the_kept_rows(tmp_path, tiny_tokenizer):
    torchrun("exact_update_worker.py", str(tmp_path), timeout=900)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert rank0.keys() == rank1.keys() and len(rank0) == 10
    for (loss_type, entropy_coef), result0 in rank0.items():
        result1 = rank1[(loss_type, entropy_coef)]
        # Kept rows per process and step: group 0 on process 0, the spanning group, group 2 on process 1.
        rows = [[sum(len(part["advantages"]) for part in result["rows"].get(step, [])) for step in range(3)]
                for result in (result0, result1)]  # fmt: skip
        assert rows == [[4, 2, 0], [0, 2, 4]], (loss_type, rows)
        plain = GRPOTrainer(
            model=make_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=parity_reward_for({}),
            args=tiny_trainer_args(
                tmp_path / "plain",
                GRPOConfig,
                loss_type=loss_type,
                entropy_coef=entropy_coef,
                importance_sampling_level="sequence" if loss_type == "luspo" else "token",
            ),
            train_dataset=dataset(["P0:"]),
            processing_class=tiny_tokenizer,
        )
        for step in range(3):
            torch.testing.assert_close(result0["grads"][step], result1["grads"][step], rtol=0, atol=0)
            parts = result0["rows"].get(step, []) + result1["rows"].get(step, [])
            reference = reference_gradient(plain, concat_micro_batches(parts))
            assert_same_gradient(result0["grads"][step], reference, rtol=1e-4)
