"""Multi-process logic on CPU: two processes launched with torchrun (gloo backend)."""

import json

import pytest

from .torchrun import torchrun


@pytest.mark.distributed
def test_filter_selection_is_identical_across_processes_and_never_hangs(tmp_path):
    torchrun("grpo_filter_worker.py", str(tmp_path))
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # Both processes chose the same groups at every step: only group (step % 3).
    expected_masks = [[True, False, False], [False, True, False], [False, False, True]]
    assert rank0["keep_masks"] == rank1["keep_masks"] == expected_masks
    # Step 0: group 0 lies on process 0 only; step 1: the spanning group, 2 rows each; step 2: process 1 only.
    assert rank0["rows_per_step"] == [4, 2, 0]
    assert rank1["rows_per_step"] == [0, 2, 4]
    assert rank0["global_step"] == rank1["global_step"] == 3
    assert rank0["checksum"] == pytest.approx(rank1["checksum"], abs=0.0), "DDP kept the replicas identical"
