"""Refill in two processes (torchrun, gloo on CPU): both kept groups come from one process, the pool is shared out,
and the all-reduced gradient equals plain GRPOTrainer's on the kept rows of both processes in one micro-batch."""

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2.models.tiny import make_tiny_model

from .exactness import assert_same_gradient, concat_micro_batches, reference_gradient
from .scripted import dataset, parity_reward_for, tiny_trainer_args
from .torchrun import torchrun


@pytest.mark.distributed
def test_two_process_refill_shares_the_pool_and_equals_plain_grpo_on_the_kept_rows(tmp_path, tiny_tokenizer):
    torchrun("refill_worker.py", str(tmp_path), timeout=900)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert rank0.keys() == rank1.keys() == {"grpo", "bnpo", "dapo", "vespo", "ppo"}
    # PPO: each process trains actor and critic on one kept group; every token's return is its own row's reward
    # (gamma = lambda = 1): round 2's group pays 0 or 10, round 3's 0 or 3, both generated on process 1.
    ppo0, ppo1 = rank0.pop("ppo"), rank1.pop("ppo")
    assert [sum(len(p["advantages"]) for p in result["rows"][0]) for result in (ppo0, ppo1)] == [4, 4]
    log = ppo0["logs"][0]
    assert log["ragen2/filter/generation_rounds"] == 3 and "ragen2/ppo/value_loss" in log
    assert (log["ragen2/ppo/returns/min"], log["ragen2/ppo/returns/max"]) == (0.0, 10.0)
    for loss_type, result0 in rank0.items():
        result1 = rank1[loss_type]
        log = result0["logs"][0]
        assert log["ragen2/filter/generation_rounds"] == 3 and log["ragen2/filter/kept_rows"] == 8
        # Both kept groups were generated on process 1; each process trains on one of them.
        parts0, parts1 = result0["rows"][0], result1["rows"][0]
        assert [sum(len(p["advantages"]) for p in parts) for parts in (parts0, parts1)] == [4, 4]
        torch.testing.assert_close(result0["grads"][0], result1["grads"][0], rtol=0, atol=0)
        plain = GRPOTrainer(
            model=make_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=parity_reward_for({}),
            args=tiny_trainer_args(tmp_path / "plain", GRPOConfig, loss_type=loss_type, entropy_coef=0.05),
            train_dataset=dataset(["P0:"]),
            processing_class=tiny_tokenizer,
        )
        reference = reference_gradient(plain, concat_micro_batches(parts0 + parts1))
        assert_same_gradient(result0["grads"][0], reference, rtol=1e-4)
