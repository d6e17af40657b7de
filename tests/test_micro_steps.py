"""Pure layout and normalisation rules of filtered micro-steps, on hand-computed cases."""

import pytest
import torch
from trl.trainer.utils import nanstd

from trl_ragen2.filtering.advantages import batch_dependent, kept_row_advantages
from trl_ragen2.filtering.micro_steps import (
    LOSS_TYPES,
    MicroStep,
    chunk_windows,
    correct_trl_metrics,
    fill_chunks,
    loss_factors,
    plan_micro_steps,
)


# ---------------------------------------------------------------------------------------------------------------
# Layout: kept rows fill optimizer steps in order


@pytest.mark.parametrize(
    "rows, windows, capacity, expected",
    [
        # the recipes' shape: 4 rows per micro-step, 8 micro-steps per optimizer step, 4 steps per generation;
        # one kept group of 16 rows fills the first step (2 rows per micro-step), the other three get nothing
        (16, [0] * 8 + [1] * 8 + [2] * 8 + [3] * 8, 4, [2] * 8 + [0] * 24),
        # 40 rows: the first step is full (32), the second takes the remaining 8, one per micro-step
        (40, [0] * 8 + [1] * 8, 4, [4] * 8 + [1] * 8),
        # uneven within a step: 4 rows over 3 micro-steps -> 2 + 1 + 1
        (4, [0, 0, 0], 4, [2, 1, 1]),
        # nothing kept
        (0, [0, 0, 1, 1], 2, [0, 0, 0, 0]),
        # a generation that starts in the middle of an optimizer step (S=3, GA=2, started at micro-step 1)
        (5, [0, 1, 1], 2, [2, 2, 1]),
    ],
)
def test_fill_chunks(rows, windows, capacity, expected):
    assert fill_chunks(rows, windows, capacity) == expected
    assert sum(expected) == rows


def test_fill_chunks_rejects_more_rows_than_the_generation_holds():
    with pytest.raises(ValueError, match="do not fit"):
        fill_chunks(9, [0, 0], capacity=4)


def test_chunk_windows():
    assert chunk_windows(0, 4, 2) == [0, 0, 1, 1]
    assert chunk_windows(6, 3, 4) == [1, 1, 2]  # micro-steps 6, 7, 8


def test_plan_one_generation_per_step_two_processes():
    # process 0 keeps 3 rows (2 + 1 over two micro-steps), process 1 keeps 1 (1 + 0); tokens per chunk given
    plan = plan_micro_steps([[2, 1], [1, 0]], [[10, 4], [6, 0]], first_micro_step=0, accumulation_steps=2)
    p0, p1 = plan
    assert [s.rows for s in p0] == [s.rows for s in p1] == [2, 1]  # padded to the largest count per micro-step
    assert [s.real_rows for s in p0] == [2, 1] and [s.real_rows for s in p1] == [1, 0]
    assert [s.global_real_rows for s in p0] == [3, 1]
    assert [s.processes_with_rows for s in p0] == [2, 1]
    # one unit: the whole optimizer step, 4 kept rows and 20 tokens, weight 1
    assert {(s.unit_rows, s.unit_tokens, s.unit_weight) for s in p0 + p1} == {(4, 20, 1.0)}


def test_plan_two_generations_per_step():
    # S = 1, GA = 2: each optimizer step holds two generations, each one unit of weight 1/2
    first = plan_micro_steps([[4]], [[12]], first_micro_step=0, accumulation_steps=2)[0]
    second = plan_micro_steps([[0]], [[0]], first_micro_step=1, accumulation_steps=2)[0]
    assert (first[0].unit_rows, first[0].unit_weight, first[0].window) == (4, 0.5, 0)
    assert (second[0].unit_rows, second[0].rows, second[0].window) == (0, 1, 0)  # one placeholder row


def test_plan_generation_straddling_optimizer_steps():
    # S = 3, GA = 2, generation made at micro-step 1: micro-step 1 closes step 0, micro-steps 2-3 form step 1
    plan = plan_micro_steps([[1, 2, 3]], [[5, 6, 7]], first_micro_step=1, accumulation_steps=2)[0]
    assert [s.window for s in plan] == [0, 1, 1]
    assert [(s.unit_rows, s.unit_tokens, s.unit_weight) for s in plan] == [(1, 5, 0.5), (5, 13, 1.0), (5, 13, 1.0)]


def test_plan_several_iterations_reuse_the_chunks():
    # num_iterations = 2, S = GA = 2: the second pass over the same two chunks is the next optimizer step
    plan = plan_micro_steps([[3, 2]], [[9, 4]], first_micro_step=0, accumulation_steps=2, num_iterations=2)[0]
    assert [s.real_rows for s in plan] == [3, 2, 3, 2]
    assert [s.window for s in plan] == [0, 0, 1, 1]
    assert {(s.unit_rows, s.unit_tokens) for s in plan} == {(5, 13)}


# ---------------------------------------------------------------------------------------------------------------
# Normalisation factors: TRL's micro-batch normaliser -> the unit's, after the DDP mean over processes


def step(unit_rows=4, unit_tokens=20, weight=1.0, rows=2, real_rows=2, global_real_rows=4):
    return MicroStep(rows, real_rows, global_real_rows, 1, unit_rows, unit_tokens, weight, 0)


@pytest.mark.parametrize(
    "loss_type, expected_policy",
    [
        # rows: TRL divides by 2 rows and GA=3; the unit has 4 rows over P=2 processes -> 2 * 3 * 2 / 4
        ("grpo", 3.0),
        ("sapo", 3.0),
        ("luspo", 3.0),
        ("dr_grpo", 3.0),
        # tokens: TRL divides by 5 tokens and GA=3; the unit has 20 -> 2 * 3 * 5 / 20
        ("bnpo", 1.5),
        # generation tokens: TRL divides by num_items 30 / P * GA / S (S=6); the unit has 20 -> 30 * 3 / (6 * 20)
        ("dapo", 0.75),
        ("cispo", 0.75),
        ("vespo", 0.75),
    ],
)
def test_loss_factors(loss_type, expected_policy):
    policy, entropy = loss_factors(
        loss_type, step(), rows=2, tokens=5, num_processes=2, accumulation_steps=3, steps_per_generation=6,
        num_items_in_batch=30.0,
    )  # fmt: skip
    assert policy == pytest.approx(expected_policy)
    assert entropy == pytest.approx(1.5)  # the entropy bonus is a token mean for every loss type


def test_loss_factors_scale_with_the_unit_weight_and_vanish_without_kept_rows():
    kwargs = dict(rows=2, tokens=5, num_processes=1, accumulation_steps=2, steps_per_generation=1,
                  num_items_in_batch=5.0)  # fmt: skip
    full = loss_factors("grpo", step(weight=1.0), **kwargs)
    half = loss_factors("grpo", step(weight=0.5), **kwargs)
    assert half == pytest.approx((full[0] / 2, full[1] / 2))
    assert loss_factors("grpo", step(unit_rows=0, unit_tokens=0), **kwargs) == (0.0, 0.0)
    assert loss_factors("dapo", step(unit_tokens=0), **kwargs) == (0.0, 0.0)
    assert set(LOSS_TYPES) == {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"}
    with pytest.raises(ValueError, match="unknown loss_type"):
        loss_factors("ppo", step(), **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Metrics over the kept rows


def test_metrics_of_a_micro_step_without_kept_rows_are_dropped():
    empty = step(real_rows=0, global_real_rows=0)
    appended = {"entropy": [0.0], "clip_ratio/low_mean": [0.0], "entropy_coef": [0.05]}
    assert correct_trl_metrics(appended, empty, num_processes=2, sequence_level=False) == {"entropy_coef": [0.05]}


def test_sequence_level_means_leave_out_placeholders():
    # 2 processes x 2 rows, 3 kept: TRL averaged over 4 rows, one of them a placeholder adding 0 (or 1 for vespo)
    partial = step(rows=2, global_real_rows=3)
    appended = {
        "clip_ratio/low_mean": [0.5],  # 2 of 4 rows -> 2 of 3 kept rows
        "clip_ratio/low_min": [0.0],
        "clip_ratio/high_max": [1.0],
        "vespo/phi_seq_mean": [0.85],  # (3.4 - 1) / 3 = 0.8
        "entropy": [1.25],  # token-weighted: placeholders have no token
    }
    seq = correct_trl_metrics(appended, partial, num_processes=2, sequence_level=True)
    assert seq["clip_ratio/low_mean"] == pytest.approx([2 / 3])
    assert seq["clip_ratio/low_min"] == [0.0] and seq["clip_ratio/high_max"] == [1.0]
    assert seq["vespo/phi_seq_mean"] == pytest.approx([0.8])
    assert seq["entropy"] == [1.25]
    token = correct_trl_metrics(appended, partial, num_processes=2, sequence_level=False)
    assert token["clip_ratio/low_mean"] == [0.5]  # token-weighted at token level: already over kept rows
    assert token["vespo/phi_seq_mean"] == pytest.approx([0.8])  # vespo's weight is per sequence at any level
    # every kept row low-clipped: the sequence-level minimum over kept rows is 1, not the placeholder's 0
    all_clipped = correct_trl_metrics({"clip_ratio/low_mean": [0.75], "clip_ratio/low_min": [0.0]}, partial, 2, True)
    assert all_clipped == {"clip_ratio/low_mean": [1.0], "clip_ratio/low_min": [1.0]}


# ---------------------------------------------------------------------------------------------------------------
# Advantages over the kept rows: TRL's own formulas (checked against TRL's nanstd on the same rows)


def test_kept_row_advantages_follow_trl_formulas():
    rewards = torch.tensor([[0.0, 1.0], [10.0, 2.0], [0.0, 3.0], [10.0, 4.0], [1.0, 0.0], [3.0, 0.0]])
    weights = torch.tensor([1.0, 0.5])
    summed = rewards @ weights  # (6,)
    group_mean = summed.view(-1, 2).mean(1).repeat_interleave(2)
    batch = kept_row_advantages(rewards, weights, 2, "batch", "sum_then_normalize")
    torch.testing.assert_close(batch, (summed - group_mean) / (nanstd(summed) + 1e-4))
    none = kept_row_advantages(rewards, weights, 2, "none", "sum_then_normalize")
    torch.testing.assert_close(none, summed - group_mean)
    group = kept_row_advantages(rewards, weights, 2, "group", "sum_then_normalize")
    torch.testing.assert_close(group, (summed - group_mean) / (summed.view(-1, 2).std(1).repeat_interleave(2) + 1e-4))
    grouped = rewards.view(3, 2, 2)
    z = ((grouped - grouped.mean(1, keepdim=True)) / (nanstd(grouped, dim=1, keepdim=True) + 1e-4)).view(6, 2)
    s = z @ weights
    torch.testing.assert_close(
        kept_row_advantages(rewards, weights, 2, "group", "normalize_then_sum"), (s - s.mean()) / (nanstd(s) + 1e-4)
    )


def test_kept_row_advantages_zero_unscorable_rows():
    rewards = torch.tensor([[float("nan")], [1.0], [0.0], [2.0]])
    advantages = kept_row_advantages(rewards, torch.ones(1), 2, "batch", "sum_then_normalize")
    assert advantages[0] == 0.0 and torch.isfinite(advantages).all()


def test_batch_dependent_options():
    assert batch_dependent("batch", "sum_then_normalize") and batch_dependent("group", "normalize_then_sum")
    assert not batch_dependent("group", "sum_then_normalize") and not batch_dependent("none", "sum_then_normalize")
