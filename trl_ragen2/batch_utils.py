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


def chunk_sizes(rows: int, num_chunks: int) -> list[int]:
    """Sizes of an even split of `rows` into `num_chunks` (they differ by at most one; leading chunks larger)."""
    return [len(piece) for piece in torch.arange(rows).tensor_split(num_chunks)]


def aligned_chunk_sizes(rows_per_process: list[int], num_chunks: int) -> list[int]:
    """Per-chunk row counts every process pads to: the largest chunk any process has, and at least one row.

    Collectives inside the loss (TRL gathers per-row statistics) need the same number of rows on every process at
    every micro-step; a process with fewer kept rows pads with zero-loss rows (it would otherwise wait anyway).
    """
    per_process = [chunk_sizes(rows, num_chunks) for rows in rows_per_process]
    return [max(1, *(sizes[i] for sizes in per_process)) for i in range(num_chunks)]


def split_rows_unevenly(
    batch: dict[str, Any], num_chunks: int, pad_to: list[int] | None = None
) -> list[dict[str, Any]]:
    """Split a batch into `num_chunks` micro-batches whose sizes differ by at most one row, dropping none.

    Chunk `i` is padded with zero-loss copies of the first row up to `pad_to[i]` rows (default: one row), so every
    process still runs a forward and backward pass on every micro-step (DDP and ZeRO need it) with the same number
    of rows as the others (see [`aligned_chunk_sizes`]).
    """
    pad_to = pad_to or [1] * num_chunks
    placeholder = zero_loss_rows(select_rows(batch, torch.zeros(1, dtype=torch.long)))
    chunks = []
    for piece, target in zip(torch.arange(num_rows(batch)).tensor_split(num_chunks), pad_to, strict=True):
        chunk = select_rows(batch, piece) if piece.numel() else None
        missing = target - piece.numel()
        if missing > 0:
            padding = select_rows(placeholder, torch.zeros(missing, dtype=torch.long))
            chunk = padding if chunk is None else concat_rows(chunk, padding)
        chunks.append(chunk)
    return chunks


def concat_rows(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Stack two batches row-wise, right-padding completion-aligned and left-padding prompt tensors to one width."""
    rows_first, rows_second = num_rows(first), num_rows(second)
    out = {}
    for key, a in first.items():
        b = second[key]
        if not (is_row_tensor(a, rows_first) and is_row_tensor(b, rows_second)):
            out[key] = a
            continue
        if a.dim() >= 2 and a.size(1) != b.size(1):
            width = max(a.size(1), b.size(1))
            # prompt tensors are left-padded; everything else is right-padded (pad values are masked out)
            side = "left" if key in PROMPT_KEYS else "right"
            a, b = (_pad_columns(t, width, side) for t in (a, b))
        out[key] = torch.cat([a, b], dim=0)
    return out


def _pad_columns(tensor: torch.Tensor, width: int, side: str) -> torch.Tensor:
    missing = width - tensor.size(1)
    if missing == 0:
        return tensor
    pad = torch.zeros((tensor.size(0), missing, *tensor.shape[2:]), dtype=tensor.dtype, device=tensor.device)
    return torch.cat([pad, tensor] if side == "left" else [tensor, pad], dim=1)
