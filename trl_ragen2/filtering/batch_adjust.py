"""What RAGEN's batch-adjust modes do with a filtered batch, beside what this library does with it.

After the filter keeps K rollouts, RAGEN must hand its actor a batch it can split into mini-batches
(`agent_proxy.batch_adjust_mode`, branch `feature/loss_scaling`, `ragen/trainer/agent_trainer.py::adjust_batch` and
`ragen/trainer/pad_batch.py`):

- `copy` (the default of `config/base.yaml`, used by the released scripts): duplicate randomly chosen kept rows until
  K is a multiple of `lcm(P, ppo_mini_batch_size, n_gpus)`; the duplicates train as ordinary rows (and join their
  group's advantage statistics, which are computed after the adjustment);
- `delete`: drop K mod that divisor random kept rows; a batch left empty skips the step, and
  `batch_adjust_empty_stop_steps` (5) such steps in a row stop training;
- `pad`: keep the K rows and pad the optimizer batch to the next multiple of `ppo_mini_batch_size` with zero-loss
  rows; under the sequence-mean losses (GRPO's `seq-mean-token-mean`, DrGRPO's `seq-mean-token-sum`) each
  micro-batch's loss is multiplied by its real rows over the micro-batch size, so every real row keeps the weight
  1 / mini-batch and a partly padded update is that much smaller.

This library drops the other rows and fills its optimizer steps in order with the kept rows, each step up to its
unfiltered mini-batch and normalised as plain `GRPOTrainer` on the rows it holds (`micro_steps`). For a sequence-mean
loss, an update's gradient is `scale * mean over its rows of the per-row gradient`; [`ragen_update_plan`] and
[`library_update_plan`] give the updates, their rows and that scale. Standard library only.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .micro_steps import chunk_windows, fill_chunks


BATCH_ADJUST_MODES = ("copy", "delete", "pad")


class UpdatePlan(NamedTuple):
    """The optimizer updates one filtered generation gives (sequence-mean loss, one process per GPU)."""

    kept: int  # distinct kept rollouts the filter handed on
    duplicated: int  # rows added as copies of kept rows (`copy`)
    dropped: int  # kept rows removed (`delete`)
    padded: int  # zero-loss rows added (`pad`)
    update_rows: tuple[int, ...]  # rows with a loss in each optimizer update (copies counted, pads not)
    update_scales: tuple[float, ...]  # each update's gradient over the mean per-row gradient of its rows
    empty: bool  # no update at all (the step is skipped)


def ragen_update_plan(
    kept: int, *, num_groups: int, mini_batch_size: int, num_gpus: int = 1, mode: str = "copy"
) -> UpdatePlan:
    """RAGEN's updates for `kept` filtered rollouts under `batch_adjust_mode=mode`.

    Args:
        kept (`int`): rollouts the filter kept (0: RAGEN skips the step before adjusting).
        num_groups (`int`): `es_manager.train.env_groups`, P.
        mini_batch_size (`int`): `ppo_mini_batch_size`, rollouts per optimizer update (all GPUs together).
        num_gpus (`int`): `trainer.n_gpus_per_node`.
        mode (`str`): `"copy"`, `"delete"` or `"pad"`.
    """
    if mode not in BATCH_ADJUST_MODES:
        raise ValueError(f"ragen_update_plan: mode must be one of {BATCH_ADJUST_MODES}, got {mode!r}")
    divisor = math.lcm(num_groups, mini_batch_size, num_gpus)
    duplicated = dropped = padded = 0
    if kept and mode == "copy":
        duplicated = -kept % divisor
    elif kept and mode == "delete":
        dropped = kept % divisor
    elif kept:
        padded = -kept % mini_batch_size
    rows = kept + duplicated - dropped  # rows with a loss
    updates = (rows + padded) // mini_batch_size
    update_rows = tuple(min(mini_batch_size, rows - i * mini_batch_size) for i in range(updates))
    # pad: every real row weighs 1 / mini_batch_size, so an update of r real rows is r / mini_batch_size of a mean
    scales = tuple(r / mini_batch_size if mode == "pad" else 1.0 for r in update_rows)
    return UpdatePlan(kept, duplicated, dropped, padded, update_rows, scales, empty=updates == 0)


def library_update_plan(
    kept: int, *, per_device_train_batch_size: int, gradient_accumulation_steps: int, steps_per_generation: int
) -> UpdatePlan:
    """This library's updates for `kept` filtered rollouts on one process: the kept rows fill the generation's
    optimizer steps in order, each up to `per_device_train_batch_size * gradient_accumulation_steps` rows, and each
    update is the mean over its rows (scale 1); steps left without a row are skipped."""
    windows = chunk_windows(0, steps_per_generation, gradient_accumulation_steps)  # optimizer step of each chunk
    sizes = fill_chunks(kept, windows, per_device_train_batch_size)  # kept rows per chunk (micro-step)
    per_step = [
        sum(size for size, window in zip(sizes, windows, strict=True) if window == w) for w in sorted(set(windows))
    ]
    update_rows = tuple(rows for rows in per_step if rows)
    return UpdatePlan(kept, 0, 0, 0, update_rows, (1.0,) * len(update_rows), empty=not update_rows)
