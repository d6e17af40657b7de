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
