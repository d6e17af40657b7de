"""RAGEN's batch-adjust modes (copy, delete, pad) against this library's layout, on the same filtered batches.

Every expected value is worked out by hand from RAGEN's rules (branch `feature/loss_scaling`):
  divisor = lcm(P, ppo_mini_batch_size, n_gpus); copy adds (-K) mod divisor duplicates, delete drops K mod divisor
  rows, pad adds (-K) mod mini_batch zero-loss rows; updates = rows / mini_batch; under pad an update holding r real
  rows has r / mini_batch times the mean gradient of its rows (RAGEN scales each seq-mean micro-batch loss by real
  rows / micro-batch size).
The library's layout comes from its own code (`micro_steps.fill_chunks`): mini-batches of per_device x GA rows,
filled in order, each the mean over its rows; steps without a row are skipped.
"""

import pytest

from trl_ragen2.filtering.batch_adjust import UpdatePlan, library_update_plan, ragen_update_plan


# The paper's recipe: P = 8 prompts x G = 16, mini-batch 32, micro-batch 4, one GPU; the library's equivalent is
# per_device_train_batch_size 4, gradient_accumulation_steps 8, steps_per_generation 32 (4 updates of 32 rows).
PAPER = dict(num_groups=8, mini_batch_size=32)
LIBRARY = dict(per_device_train_batch_size=4, gradient_accumulation_steps=8, steps_per_generation=32)


@pytest.mark.parametrize(
    "kept, mode, expected",
    [
        # 3 of 8 groups (48 rows; Table 7's rho = 0.9 kept 3.2 groups on average). divisor lcm(8, 32, 1) = 32.
        (48, "copy", UpdatePlan(48, 16, 0, 0, (32, 32), (1.0, 1.0), False)),  # 16 copies: 2 full updates
        (48, "delete", UpdatePlan(48, 0, 16, 0, (32,), (1.0,), False)),  # 16 of the kept rows never train
        (48, "pad", UpdatePlan(48, 0, 0, 16, (32, 16), (1.0, 0.5), False)),  # the second update is half-weighted
        # 1 group (16 rows): copy duplicates every row once; delete empties the step; pad halves the update
        (16, "copy", UpdatePlan(16, 16, 0, 0, (32,), (1.0,), False)),
        (16, "delete", UpdatePlan(16, 0, 16, 0, (), (), True)),
        (16, "pad", UpdatePlan(16, 0, 0, 16, (16,), (0.5,), False)),
        # 2 groups (32 rows): already a multiple of the divisor, every mode trains the 32 rows once
        (32, "copy", UpdatePlan(32, 0, 0, 0, (32,), (1.0,), False)),
        (32, "delete", UpdatePlan(32, 0, 0, 0, (32,), (1.0,), False)),
        (32, "pad", UpdatePlan(32, 0, 0, 0, (32,), (1.0,), False)),
        # RAGEN's guide's own example: 18 real rows pad to 32; micro-batches [4, 4, 4, 4, 2, 0, 0, 0] scaled by
        # 1, 1, 1, 1, 2/4 and divided by 8 give 18/32
        (18, "pad", UpdatePlan(18, 0, 0, 14, (18,), (0.5625,), False)),
        # nothing kept: RAGEN skips the step before adjusting (rollout/empty_after_filter)
        (0, "copy", UpdatePlan(0, 0, 0, 0, (), (), True)),
        (0, "pad", UpdatePlan(0, 0, 0, 0, (), (), True)),
    ],
)
def test_ragen_modes_on_the_paper_batch(kept, mode, expected):
    assert ragen_update_plan(kept, **PAPER, mode=mode) == expected


@pytest.mark.parametrize(
    "kept, expected",
    [
        (48, UpdatePlan(48, 0, 0, 0, (32, 16), (1.0, 1.0), False)),  # two updates, like copy and pad; no copies
        (16, UpdatePlan(16, 0, 0, 0, (16,), (1.0,), False)),  # one update of the 16 rows, their mean
        (32, UpdatePlan(32, 0, 0, 0, (32,), (1.0,), False)),  # the same as every RAGEN mode
        (128, UpdatePlan(128, 0, 0, 0, (32, 32, 32, 32), (1.0,) * 4, False)),  # no filtering: 4 updates
        (0, UpdatePlan(0, 0, 0, 0, (), (), True)),  # an empty step (counted by reward_variance_empty_patience)
    ],
)
def test_library_layout_on_the_paper_batch(kept, expected):
    assert library_update_plan(kept, **LIBRARY) == expected


def test_grouping_layout_64x2_makes_delete_drop_every_filtered_batch():
    # P = 64 groups of 2: the divisor is lcm(64, 32, 1) = 64, so any batch of fewer than 64 kept rows is deleted
    assert ragen_update_plan(40, num_groups=64, mini_batch_size=32, mode="delete").empty
    assert ragen_update_plan(40, num_groups=64, mini_batch_size=32, mode="copy").update_rows == (32, 32)
    assert ragen_update_plan(40, num_groups=64, mini_batch_size=32, mode="pad").update_scales == (1.0, 0.25)
    assert library_update_plan(40, **LIBRARY).update_rows == (32, 8)


def test_several_gpus_change_only_the_divisor():
    # 8 GPUs: lcm(8, 32, 8) = 32 as with one; 3 GPUs: lcm(8, 32, 3) = 96, so copy pads 48 kept rows to 96
    assert ragen_update_plan(48, **PAPER, num_gpus=8, mode="copy").duplicated == 16
    assert ragen_update_plan(48, **PAPER, num_gpus=3, mode="copy") == UpdatePlan(
        48, 48, 0, 0, (32, 32, 32), (1.0, 1.0, 1.0), False
    )


def test_invalid_mode():
    with pytest.raises(ValueError, match="mode must be one of \\('copy', 'delete', 'pad'\\), got 'trim'"):
        ragen_update_plan(8, **PAPER, mode="trim")
