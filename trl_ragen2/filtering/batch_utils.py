"""Row-level operations on TRL generation batches: keep rows, trim completion padding, cut micro-batches.

A GRPO generation batch is a dict whose per-row tensors share their first dimension (B); `prompt_ids` /
`prompt_mask` are left-padded (B, Lp), completion-aligned tensors (`completion_ids`, `completion_mask`,
`tool_mask`, `*_per_token_logps`, token-level ratios, values) are right-padded (B, Lc), and 0-dim tensors such as
`num_items_in_batch` describe the whole batch. Pure torch; no trainer imports.
"""

from __future__ import annotations

from typing import Any

import torch


PROMPT_KEYS = ("prompt_ids", "prompt_mask")
# Each row's index in the batch the filter chose from (the generation batch, or a refill's pool), where a trainer
# needs it after filtering (the PPO trainer's returns and turn rewards); removed before the micro-steps.
ROW_INDEX_KEY = "ragen2_row_index"
LOSS_MASK_KEYS = ("completion_mask", "tool_mask")
# Keys holding images or per-image data: their first dimension is not the row dimension.
MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_sizes",
    "num_images",
    "num_tiles",
    "image_position_ids",
)


def num_rows(batch: dict[str, Any]) -> int:
    """Rows (B) of a generation batch."""
    return batch["completion_ids"].size(0)


def is_row_tensor(value: Any, rows: int) -> bool:
    """Whether `value` is a per-row tensor of a batch with `rows` rows (its first dimension is the row)."""
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.size(0) == rows


def select_rows(batch: dict[str, Any], index: torch.Tensor) -> dict[str, Any]:
    """Index every per-row tensor with `index` (a 1-D long tensor); other values are kept as they are."""
    rows = num_rows(batch)
    present = [key for key in MULTIMODAL_KEYS if batch.get(key) is not None]
    if present:
        raise ValueError(
            f"row filtering does not support image inputs (batch has {present}); disable filtering with "
            "reward_variance_filtering=None for vision-language training"
        )
    index = index.to(batch["completion_ids"].device)
    return {key: value[index] if is_row_tensor(value, rows) else value for key, value in batch.items()}


def zero_loss_rows(batch: dict[str, Any]) -> dict[str, Any]:
    """Copy of `batch` whose rows are placeholders: they contribute nothing to the loss or its statistics.

    Their loss masks are zero, and a vLLM importance-sampling ratio is set to 1 (TRL's `vespo` weight sums the log
    of that ratio over every column, masked or not; with ratio 1 a placeholder's weight is exactly 1).
    """
    out = dict(batch)
    for key in LOSS_MASK_KEYS:
        if isinstance(out.get(key), torch.Tensor):
            out[key] = torch.zeros_like(out[key])
    if isinstance(out.get("importance_sampling_ratio"), torch.Tensor):
        out["importance_sampling_ratio"] = torch.ones_like(out["importance_sampling_ratio"])
    return out


def loss_token_count(batch: dict[str, Any]) -> torch.Tensor:
    """Number of tokens the loss covers in this (local) batch: completion_mask * tool_mask summed."""
    return row_loss_tokens(batch).sum()


def row_loss_tokens(batch: dict[str, Any]) -> torch.Tensor:
    """Loss tokens of each row, (B,): completion_mask * tool_mask summed over the completion."""
    mask = batch["completion_mask"]
    if isinstance(batch.get("tool_mask"), torch.Tensor):
        mask = mask * batch["tool_mask"]
    return mask.sum(dim=1)


def _completion_keys(batch: dict[str, Any]) -> list[str]:
    """Keys of the per-row tensors aligned with the completion columns (right-padded)."""
    rows, width = num_rows(batch), batch["completion_ids"].size(1)
    return [
        key
        for key, value in batch.items()
        if key not in PROMPT_KEYS and is_row_tensor(value, rows) and value.dim() >= 2 and value.size(1) == width
    ]


def trim_completion_padding(batch: dict[str, Any], multiple_of: int | None = None) -> dict[str, Any]:
    """Drop the completion columns past every row's last attended token, keeping a multiple of `multiple_of`.

    Nothing attends to those columns (the model is causal and they are masked), so every remaining log-probability
    is unchanged. Prompt columns are never trimmed: removing left padding would shift the positions the old and
    reference log-probabilities were computed at.
    """
    width = batch["completion_mask"].size(1)
    used = batch["completion_mask"].bool().any(dim=0).nonzero()
    last = int(used[-1]) + 1 if used.numel() else 1
    if multiple_of:
        last = -(-last // multiple_of) * multiple_of
    if last >= width:
        return batch
    out = dict(batch)
    for key in _completion_keys(batch):
        out[key] = batch[key][:, :last]
    return out


def minimal_placeholder_rows(batch: dict[str, Any], count: int, multiple_of: int | None = None) -> dict[str, Any]:
    """`count` placeholder rows only `multiple_of` (default 1) prompt and completion columns wide.

    For a micro-step in which a process holds no kept row: its forward pass costs next to nothing, yet every
    process still runs one (DDP and the collectives inside TRL's loss need it).
    """
    width = multiple_of or 1
    first = select_rows(batch, torch.zeros(count, dtype=torch.long))
    completion_keys = _completion_keys(first)
    out = zero_loss_rows(first)
    for key in PROMPT_KEYS:
        out[key] = first[key][:, -width:]  # left-padded: the last columns are prompt tokens in every row
    for key in completion_keys:
        out[key] = out[key][:, :width]
    return out


def micro_batches(
    batch: dict[str, Any], sizes: list[int], aligned: list[int], multiple_of: int | None = None
) -> list[dict[str, Any]]:
    """Cut a (shuffled) batch into consecutive micro-batches of `sizes[i]` rows, padded to `aligned[i]` rows.

    Padding rows are zero-loss copies of the micro-batch's first row (same width, so no column moves), or minimal
    placeholders when the micro-batch has no row of its own. `sum(sizes)` may be smaller than the batch (its
    placeholder source row, when a process kept nothing).
    """
    chunks, start = [], 0
    for size, target in zip(sizes, aligned, strict=True):
        if size == 0:
            chunks.append(minimal_placeholder_rows(batch, target, multiple_of))
            continue
        chunk = select_rows(batch, torch.arange(start, start + size))
        if target > size:
            chunk = concat_rows(
                chunk, zero_loss_rows(select_rows(chunk, torch.zeros(target - size, dtype=torch.long)))
            )
        chunks.append(chunk)
        start += size
    return chunks


def concat_rows(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Stack two batches of the same column widths row-wise; other values come from `first`."""
    rows_first, rows_second = num_rows(first), num_rows(second)
    out = {}
    for key, a in first.items():
        b = second[key]
        both_rows = is_row_tensor(a, rows_first) and is_row_tensor(b, rows_second)
        out[key] = torch.cat([a, b], dim=0) if both_rows else a
    return out
