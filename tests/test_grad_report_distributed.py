"""The gradient SNR report in two processes (torchrun, gloo on CPU): every rank logs the same norms, and they are
those of plain GRPOTrainer's loss on the bucket's rows of both processes, in one process."""

import math

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2.filtering.grad_snr import global_norm, reward_variance_buckets
from trl_ragen2.models.tiny import make_tiny_model

from .exactness import concat_micro_batches, reference_gradient
from .scripted import dataset, parity_reward_for, tiny_trainer_args
from .torchrun import torchrun


@pytest.mark.distributed
def test_two_process_report_equals_the_single_process_gradient(tmp_path, tiny_tokenizer):
    torchrun("grad_report_worker.py", str(tmp_path), timeout=600)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert len(rank0) == len(rank1) == 3
    plain = GRPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward_for({}),
        args=tiny_trainer_args(tmp_path / "plain", GRPOConfig, entropy_coef=0.0),
        train_dataset=dataset(["P0:"]),
        processing_class=tiny_tokenizer,
    )
    for step, (part0, part1) in enumerate(zip(rank0, rank1, strict=True)):
        metrics0, metrics1 = part0["metrics"], part1["metrics"]
        assert metrics0.keys() == metrics1.keys()
        for key, value in metrics0.items():
            if not key.endswith("time_s"):
                assert value == metrics1[key] or (math.isnan(value) and math.isnan(metrics1[key])), (step, key)
        buckets = reward_variance_buckets(part0["rewards"], 4, 3)
        assert buckets[2] == [step % 3]  # the one group with variance, wherever its rows are
        assert metrics0["ragen2/grad/bucket_1/task"] == metrics0["ragen2/grad/bucket_2/task"] == 0.0
        batch = concat_micro_batches([part0["rows"], part1["rows"]])  # the global batch, in process order
        index = torch.arange(4) + 4 * (step % 3)
        rows = {key: value[index] for key, value in batch.items()}
        expected = global_norm(list(reference_gradient(plain, rows).values()))
        assert expected > 1e-4
        assert metrics0["ragen2/grad/bucket_3/task"] == pytest.approx(expected, rel=1e-4), step
