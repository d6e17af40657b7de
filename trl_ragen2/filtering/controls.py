"""Control arms for the filter: what a filtered run would be without choosing groups by reward variance.

A filtered run differs from an unfiltered one in three ways at once: it trains on fewer groups, it makes no update
on the steps where its rule keeps nothing, and the groups it trains on are the high-variance ones. Only the last is
the paper's claim. Two controls take the configured rule's decision on each batch and keep all of it but one part:

- **`"random_matched"`**: keep as many groups as the rule keeps on this batch, chosen uniformly at random among all
  P groups. Same batch size and same skipped steps as the filter; the choice ignores the rewards.
- **`"skip_matched"`**: keep every group on the steps where the rule keeps at least one, and none on the steps where
  it keeps none. Same skipped steps as the filter; full batches otherwise.

filtered - random_matched isolates the choice by variance; skip_matched - unfiltered isolates the skipped steps.

The random draw depends only on the run's seed and the number of generation batches filtered before this one, so
every process draws the same groups without communicating, and a resumed run draws what an uninterrupted one would.
Pure torch, no trainer imports.
"""

from __future__ import annotations

import hashlib

import torch


RANDOM_MATCHED = "random_matched"
SKIP_MATCHED = "skip_matched"
CONTROLS = (RANDOM_MATCHED, SKIP_MATCHED)


def control_seed(seed: int, generation_index: int) -> int:
    """A 63-bit seed for the draw of generation batch `generation_index` of a run seeded `seed` (SHA-256 of both,
    so neighbouring seeds and batches give unrelated draws)."""
    name = "/".join(("trl-ragen2", RANDOM_MATCHED, str(seed), str(generation_index)))  # the draw's name
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def random_matched_groups(rule_keep: torch.Tensor, *, seed: int, generation_index: int) -> torch.Tensor:
    """`rule_keep.sum()` groups drawn uniformly without replacement from all P groups.

    Args:
        rule_keep (`torch.Tensor` of shape `(P,)`, bool): the groups the configured rule keeps on this batch.
        seed (`int`): the run's seed.
        generation_index (`int`): how many generation batches the filter saw before this one.

    Returns:
        `torch.Tensor` of shape `(P,)`, bool, on `rule_keep`'s device.
    """
    rule_keep = torch.as_tensor(rule_keep, dtype=torch.bool)
    count = int(rule_keep.sum())
    generator = torch.Generator().manual_seed(control_seed(seed, generation_index))
    chosen = torch.randperm(rule_keep.numel(), generator=generator)[:count]  # CPU draw: the same on every device
    keep = torch.zeros(rule_keep.numel(), dtype=torch.bool)
    keep[chosen] = True
    return keep.to(rule_keep.device)


def skip_matched_groups(rule_keep: torch.Tensor) -> torch.Tensor:
    """Every group when the rule keeps at least one, else none: `(P,)` bool on `rule_keep`'s device."""
    rule_keep = torch.as_tensor(rule_keep, dtype=torch.bool)
    return torch.full_like(rule_keep, bool(rule_keep.any()))


def apply_control(rule_keep: torch.Tensor, control: str | None, *, seed: int, generation_index: int) -> torch.Tensor:
    """The groups a control arm keeps, given what the configured rule keeps (`(P,)` bool); `control=None` returns
    `rule_keep` itself (the filter proper)."""
    if control is None:
        return rule_keep
    if control == RANDOM_MATCHED:
        return random_matched_groups(rule_keep, seed=seed, generation_index=generation_index)
    if control == SKIP_MATCHED:
        return skip_matched_groups(rule_keep)
    raise ValueError(f"apply_control: control must be one of {CONTROLS} or None, got {control!r}")
