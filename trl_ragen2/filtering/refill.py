"""Dynamic sampling: refill the batch with informative groups instead of shrinking it (DAPO, arXiv 2503.14476).

With `reward_variance_refill` set, a generation whose filter keeps fewer groups than a target does not train on
what is left: the trainer generates further rounds of prompt groups, from the training sampler in order, and selects
again over the pool of every round, until the target is reached or `reward_variance_refill_max_rounds` rounds were
made. Off by default: RAGEN shrinks the batch, and so does the paper.

Two rules choose over the pool (`docs/dynamic_sampling.md` says why both):

- `"nonzero_variance"` (DAPO's dynamic sampling): every group whose rewards vary, in the order they were generated,
  up to the target;
- `"pooled"`: the configured rule (`reward_variance_filtering`, with its keep rate) ranks every group of the pool
  at once, so a top-p share is taken of the whole pool's variance mass; when it keeps more than the target, the
  target's worth with the highest scores stay.

This module holds the settings (`RefillArguments`) and the pure selection; the trainer draws the rounds
(`trl_ragen2.grpo.refill`) and the prompt stream (`trl_ragen2.filtering.prompt_stream`) keeps the sampler's order.
Torch only; no trainer imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .selection import ZERO_SCORE_TOL, group_reward_scores


NONZERO_VARIANCE = "nonzero_variance"
POOLED = "pooled"
REFILL_RULES = (NONZERO_VARIANCE, POOLED)
AT_LIMIT = ("train", "skip")


@dataclass
class RefillArguments:
    r"""
    Dynamic sampling (DAPO): generate more prompt groups when the filter keeps too few (`docs/dynamic_sampling.md`).

    Parameters:
        reward_variance_refill (`str` or `None`, *optional*, defaults to `None`):
            `None` shrinks the batch to the kept groups (the paper's and RAGEN's behaviour). `"nonzero_variance"`
            refills it DAPO's way: further rounds of prompt groups are generated until `reward_variance_refill_target_groups`
            groups with non-zero reward variance are kept, in the order they were generated. `"pooled"` refills
            with the configured rule: `reward_variance_filtering` selects over every group generated so far.
        reward_variance_refill_target_groups (`int` or `None`, *optional*, defaults to `None`):
            Groups a refilled generation trains on; `None`: the generation batch's group count, as in DAPO. At most
            that count (the kept rows must fit the generation's micro-batches).
        reward_variance_refill_max_rounds (`int`, *optional*, defaults to `3`):
            Generation rounds per generation step, the first included (DAPO's `max_num_gen_batches`), at least 2.
        reward_variance_refill_at_limit (`str`, *optional*, defaults to `"train"`):
            When the last round still falls short of the target: `"train"` on the groups kept so far, or `"skip"`
            the update (logged as an empty step whose cause is the round limit).
    """

    reward_variance_refill: str | None = field(
        default=None,
        metadata={
            "help": "Dynamic sampling: 'nonzero_variance' (DAPO) or 'pooled' (the configured rule over every "
            "round's groups); None shrinks the batch, as the paper does."
        },
    )
    reward_variance_refill_target_groups: int | None = field(
        default=None, metadata={"help": "Groups a refilled step trains on (None: the generation batch's groups)."}
    )
    reward_variance_refill_max_rounds: int = field(
        default=3, metadata={"help": "Generation rounds per step, the first included (DAPO's max_num_gen_batches)."}
    )
    reward_variance_refill_at_limit: str = field(
        default="train",
        metadata={"help": "Short of the target after the last round: 'train' on what is kept, or 'skip'."},
    )

    def validate_refill_fields(self, generation_groups: int) -> None:
        """Raise a `ValueError` naming the field, its value and the fix; `generation_groups` is the generation
        batch's prompt-group count."""
        refill = self.reward_variance_refill
        if isinstance(refill, str) and refill.lower() in ("none", "null"):
            self.reward_variance_refill = refill = None
        if refill is None:
            return
        if refill not in REFILL_RULES:
            raise ValueError(
                f"reward_variance_refill must be one of {REFILL_RULES} or None, got {refill!r}; None shrinks the "
                "batch to the kept groups (the paper's behaviour)"
            )
        conflicts = {
            "reward_variance_filtering": (self.reward_variance_filtering in (None, "within_group"), "'top_p'"),
            "reward_variance_control": (self.reward_variance_control is not None, "None"),
            "reward_variance_metric": (self.reward_variance_metric not in ("variance", "std"), "'variance'"),
        }
        for name, (bad, fix) in conflicts.items():
            if bad:
                raise ValueError(
                    f"reward_variance_refill={refill!r} selects whole groups by their rewards, but {name}="
                    f"{getattr(self, name)!r}; set {name}={fix}, or reward_variance_refill=None"
                )
        target = self.reward_variance_refill_target_groups
        if target is not None and not (isinstance(target, int) and 1 <= target <= generation_groups):
            raise ValueError(
                f"reward_variance_refill_target_groups must be an int in [1, {generation_groups}] (the generation "
                f"batch's groups, whose micro-batches the kept rows fill), got {target!r}; None uses {generation_groups}"
            )
        rounds = self.reward_variance_refill_max_rounds
        if not (isinstance(rounds, int) and rounds >= 2):
            raise ValueError(
                f"reward_variance_refill_max_rounds must be an int >= 2 (the first round and at least one refill), "
                f"got {rounds!r}; DAPO's recipes use 3 to 10"
            )
        if self.reward_variance_refill_at_limit not in AT_LIMIT:
            raise ValueError(
                f"reward_variance_refill_at_limit must be one of {AT_LIMIT}, got "
                f"{self.reward_variance_refill_at_limit!r}"
            )


def select_from_pool(
    rewards: torch.Tensor,
    num_generations: int,
    rule_keep: torch.Tensor,
    *,
    refill: str,
    target: int,
    metric: str = "variance",
) -> torch.Tensor:
    """The groups a refilled generation trains on, from the pool of every round so far.

    Args:
        rewards (`torch.Tensor` of shape `(R * P * G,)`): raw rewards of the pool, round after round, each round in
            group order (NaN: no reward function scored the rollout).
        num_generations (`int`): G.
        rule_keep (`torch.Tensor` of shape `(R * P,)`): the configured rule's choice over the whole pool (read by
            `"pooled"` only).
        refill (`str`): `"nonzero_variance"` or `"pooled"`.
        target (`int`): at most this many groups are kept.
        metric (`str`): the group score `"pooled"` ranks by when the rule keeps more than `target`.

    Returns:
        `torch.Tensor` of shape `(R * P,)`, bool. `"nonzero_variance"`: the first `target` groups whose rewards vary
        (variance above the selection's zero tolerance). `"pooled"`: the rule's groups; past `target`, those with
        the highest scores (a tie goes to the group generated first).

    >>> rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])  # 4 groups of 2
    >>> select_from_pool(rewards, 2, torch.ones(4, dtype=torch.bool), refill="nonzero_variance", target=1).tolist()
    [False, True, False, False]
    """
    variance = group_reward_scores(rewards.cpu(), num_generations, metric="variance")  # (R*P,), NaN-aware
    if refill == NONZERO_VARIANCE:
        candidates = variance > ZERO_SCORE_TOL
        order = torch.arange(candidates.numel())
    elif refill == POOLED:
        candidates = rule_keep.cpu().bool()
        scores = group_reward_scores(rewards.cpu(), num_generations, metric=metric)
        order = torch.sort(-scores.nan_to_num(-torch.inf), stable=True).indices  # highest first, earlier on ties
    else:
        raise ValueError(f"refill must be one of {REFILL_RULES}, got {refill!r}")
    keep = torch.zeros_like(candidates)
    chosen = order[candidates[order]][:target]
    keep[chosen] = True
    return keep


def rows_in_pool_order(num_processes: int, rounds: int, local_rows: int) -> torch.Tensor:
    """Where each pool row sits in the gathered pool, `(num_processes * rounds * local_rows,)`.

    Each process holds its rows of every round, round after round (`(rounds * B,)` locally); a gather stacks the
    processes. The pool's order is round-major (round r's global rows are process 0's B rows, then process 1's, as
    TRL orders one batch). Entry j is the gathered index of pool row j.

    >>> rows_in_pool_order(2, 2, 1).tolist()  # gathered: p0r0, p0r1, p1r0, p1r1; pool: p0r0, p1r0, p0r1, p1r1
    [0, 2, 1, 3]
    """
    gathered = torch.arange(num_processes * rounds * local_rows).view(num_processes, rounds, local_rows)
    return gathered.transpose(0, 1).reshape(-1)


def share_of_rows(kept: torch.Tensor, num_processes: int, process_index: int) -> torch.Tensor:
    """This process's contiguous share of the kept pool rows `kept` (1-D indices, in pool order): the rows are dealt
    as evenly as possible, leading processes larger by at most one.

    >>> share_of_rows(torch.arange(5), 2, 1).tolist()
    [3, 4]
    """
    return torch.tensor_split(kept, num_processes)[process_index]
