"""Row-level operations on TRL generation batches: keep rows, trim padding, split unevenly.

A GRPO generation batch is a dict whose per-row tensors share their first dimension (B); `prompt_ids` /
`prompt_mask` are left-padded (B, Lp), completion-aligned tensors (`completion_ids`, `completion_mask`,
`tool_mask`, `*_per_token_logps`, token-level ratios, values) are right-padded (B, Lc), and 0-dim tensors such as
`num_items_in_batch` describe the whole batch. Pure torch; no trainer imports.
"""

from __future__ import annotations

from typing import Any

import torch


PROMPT_KEYS = ("prompt_ids", "prompt_mask")
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
    return batch["completion_ids"].size(0)


def is_row_tensor(value: Any, rows: int) -> bool:
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
    """Copy of `batch` whose rows contribute nothing to the loss (their loss masks are zero)."""
    out = dict(batch)
    for key in LOSS_MASK_KEYS:
        if isinstance(out.get(key), torch.Tensor):
            out[key] = torch.zeros_like(out[key])
    return out


def loss_token_count(batch: dict[str, Any]) -> torch.Tensor:
    """Number of tokens the loss covers in this (local) batch: completion_mask * tool_mask summed."""
    mask = batch["completion_mask"]
    if isinstance(batch.get("tool_mask"), torch.Tensor):
        mask = mask * batch["tool_mask"]
    return mask.sum()


def trim_padding(batch: dict[str, Any]) -> dict[str, Any]:
    """Drop prompt columns that are padding in every row (left) and completion columns past every row's end.

    Positions removed on the left are padding in every row, and positions removed on the right come after every
    row's last attended token, so log-probabilities of the remaining tokens are unchanged.
    """
    rows = num_rows(batch)
    out = dict(batch)
    prompt_width = batch["prompt_mask"].size(1)
    used = batch["prompt_mask"].bool().any(dim=0).nonzero()
    first = int(used[0]) if used.numel() else prompt_width - 1
    if first > 0:
        for key in PROMPT_KEYS:
            out[key] = batch[key][:, first:]
    completion_width = batch["completion_mask"].size(1)
    used = batch["completion_mask"].bool().any(dim=0).nonzero()
    last = int(used[-1]) + 1 if used.numel() else 1
    if last < completion_width:
        for key, value in batch.items():
            if key in PROMPT_KEYS or not is_row_tensor(value, rows) or value.dim() < 2:
                continue
            if value.size(1) == completion_width:
                out[key] = value[:, :last]
    return out


def split_rows_unevenly(batch: dict[str, Any], num_chunks: int) -> list[dict[str, Any]]:
    """Split a batch into `num_chunks` micro-batches whose sizes differ by at most one row, dropping none.

    A chunk that would be empty (fewer rows than chunks) holds one zero-loss copy of the first row instead, so
    every process still runs a forward and backward pass on every micro-step (required by DDP and ZeRO).
    """
    rows = num_rows(batch)
    pieces = torch.arange(rows).tensor_split(num_chunks)
    chunks = []
    for piece in pieces:
        if piece.numel():
            chunks.append(select_rows(batch, piece))
        else:
            chunks.append(zero_loss_rows(select_rows(batch, torch.zeros(1, dtype=torch.long))))
    return chunks
