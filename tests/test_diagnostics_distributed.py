"""MI diagnostics over two processes (torchrun, gloo on CPU): identical values on every rank and no hang."""

import json
import math

import pytest

from .torchrun import torchrun


@pytest.mark.distributed
def test_two_processes_log_identical_values_and_never_hang(tmp_path):
    torchrun("mi_diagnostics_worker.py", str(tmp_path))
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["global_step"] == rank1["global_step"] == 3
    for step in ("1", "2", "3"):
        logged0, logged1 = rank0["logs"][step], rank1["logs"][step]
        assert logged0 and set(logged0) == set(logged1)
        for key, value in logged0.items():
            other = logged1[key]
            assert value == other or (math.isnan(value) and math.isnan(other)), (step, key, value, other)
        assert all(math.isfinite(v) for v in logged0.values()), (step, logged0)
        assert logged0["ragen2/mi/first_turn/num_columns"] == 3  # the 3 prompt groups, gathered from both processes
    # step 2: process 1 had no valid pair; the metrics come from process 0's chains alone
    full, partial = rank0["logs"]["1"], rank0["logs"]["2"]
    assert full["ragen2/mi/first_turn/num_pairs"] == 8
    assert 0 < partial["ragen2/mi/first_turn/num_pairs"] < 8
    assert partial["ragen2/mi/first_turn/num_dropped_empty"] == 8 - partial["ragen2/mi/first_turn/num_pairs"]


@pytest.mark.distributed
def test_two_processes_choose_the_same_engine_from_the_slowest_process(tmp_path):
    """`mi_engine="auto"`: process 0 alone would pick the "vllm" engine, process 1 transformers; both pick
    transformers, the faster on the slowest process, log the same values and hold the same rates."""
    torchrun("mi_diagnostics_worker.py", str(tmp_path), "auto")
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["logs"] == rank1["logs"] and rank0["engines"] == rank1["engines"]
    rates = rank0["engines"]["first_turn"]
    assert rates["transformers"] < rates["vllm"]
    assert [rank0["logs"][step]["ragen2/mi/first_turn/vllm_engine"] for step in ("1", "2", "3")] == [0.0] * 3
    assert all(math.isfinite(rank0["logs"][step]["ragen2/mi/first_turn/mi_est"]) for step in ("1", "2", "3"))
