"""SNR-filtered PPO in two processes on CPU (torchrun, gloo): the ranks agree and never hang."""

import json

import pytest
from safetensors.torch import load_file

from .torchrun import torchrun


@pytest.mark.distributed
def test_two_process_ppo_agrees_across_ranks(tmp_path):
    torchrun("ppo_worker.py", str(tmp_path))
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # Step 0: group 0 lies on process 0 only; step 1: the spanning group, 2 rows each; step 2: process 1 only.
    # The actor and the critic train on exactly the same rows.
    assert rank0["actor_rows_per_step"] == rank0["critic_rows_per_step"] == [4, 2, 0]
    assert rank1["actor_rows_per_step"] == rank1["critic_rows_per_step"] == [0, 2, 4]
    assert rank0["global_step"] == rank1["global_step"] == 3
    # DDP kept both replicas identical, for the actor and for the critic, which did train.
    assert rank0["actor_checksum"] == rank1["actor_checksum"]
    assert rank0["critic_checksum"] == rank1["critic_checksum"]
    assert rank0["critic_checksum"] != rank0["critic_checksum_before"]
    # Every logged metric (filter, PPO, TRL's) is the same number on both processes.
    assert rank0["logs"] == rank1["logs"]
    ppo_keys = {key for entry in rank0["logs"] for key in entry if key.startswith("ragen2/ppo/")}
    assert {"ragen2/ppo/value_loss", "ragen2/ppo/explained_variance", "ragen2/ppo/returns/max"} <= ppo_keys
    # One copy of the critic was written, beside the policy and into the checkpoint.
    saved = load_file(str(tmp_path / "critic" / "model.safetensors"))
    assert sum(float(t.double().sum()) for t in saved.values()) == pytest.approx(rank0["critic_checksum"])
    assert (tmp_path / "checkpoint-3" / "critic" / "optimizer.pt").exists()
