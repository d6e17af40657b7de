"""Tests of the pure SNR-filtering functions (trl_ragen2.filtering.selection) on hand-built and generated rewards."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trl_ragen2.filtering.selection import (
    ZERO_SCORE_TOL,
    filter_stats,
    group_reward_scores,
    linear_threshold,
    select_groups,
)


def mask(*bits):
    return torch.tensor([bool(b) for b in bits])


# ---------------------------------------------------------------------------------------------------------------
# group_reward_scores


class TestGroupRewardScores:
    def test_variance_is_unbiased_sample_variance(self):
        rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0, 1.0, 2.0, 3.0, 4.0])
        scores = group_reward_scores(rewards, num_generations=4)
        # [0,1,0,1]: mean 0.5, squared deviations sum 1.0, / (4-1); constant group: 0; [1,2,3,4]: 5/3
        torch.testing.assert_close(scores, torch.tensor([1 / 3, 0.0, 5 / 3]))

    def test_std_is_square_root(self):
        rewards = torch.tensor([0.0, 2.0, 5.0, 5.0, 1.0, 4.0])
        var = group_reward_scores(rewards, 2, metric="variance")
        std = group_reward_scores(rewards, 2, metric="std")
        torch.testing.assert_close(std, var.sqrt())
        torch.testing.assert_close(var, torch.tensor([2.0, 0.0, 4.5]))

    def test_std_equals_ragens_float32_std(self):
        """RAGEN scores a group by `rewards.view(P, G).std(dim=-1)` in float32; metric="std" gives the same bits."""
        generator = torch.Generator().manual_seed(0)
        for num_generations in (2, 4, 8, 16):
            binary = (torch.rand(64 * num_generations, generator=generator) < 0.5).float()
            steps = torch.randint(-20, 100, (64 * num_generations,), generator=generator) / 10  # Sokoban-like
            continuous = torch.randn(64 * num_generations, generator=generator) * 3
            for rewards in (binary, steps, continuous):
                ragen = rewards.view(-1, num_generations).std(dim=-1)
                assert torch.equal(group_reward_scores(rewards, num_generations, metric="std"), ragen)

    def test_a_single_constant_group_scores_zero_where_ragens_float32_std_is_noise(self):
        """docs/differences.md: with one prompt group (P = 1) of G >= 8 equal rewards, torch's float32 std of the
        (1, G) row is float noise, not 0; RAGEN then counts the group as having variance, the library does not."""
        rewards = torch.full((8,), 0.3)
        ragen = rewards.view(1, 8).std(dim=-1)  # RAGEN's expression
        assert 1e-9 < ragen.item() < 1e-7  # 3.19e-08: above the zero-variance tolerance, so a candidate in RAGEN
        ours = group_reward_scores(rewards, 8, metric="std")
        assert ours.tolist() == [0.0]
        assert not select_groups(ours, strategy="top_k", top_k=1).any()  # RAGEN's top_k 1 would keep it
        assert not select_groups(ours, strategy="percentile_range", percentile_range=(0.0, 0.25)).any()
        # with P >= 2 torch's std of each row is exactly 0, as the library's
        two = torch.full((16,), 0.3)
        assert two.view(2, 8).std(dim=-1).tolist() == group_reward_scores(two, 8, metric="std").tolist() == [0.0, 0.0]

    def test_nan_rewards_are_ignored_within_their_group(self):
        nan = float("nan")
        rewards = torch.tensor([1.0, nan, 3.0, 5.0, nan, nan, 7.0, 7.0])
        scores = group_reward_scores(rewards, 4)
        # group 0 keeps [1, 3, 5] -> variance 4; group 1 has [7, 7] -> 0
        torch.testing.assert_close(scores, torch.tensor([4.0, 0.0]))

    def test_fewer_than_two_finite_rewards_score_zero(self):
        nan = float("nan")
        rewards = torch.tensor([nan, 3.0, nan, nan, 2.0, 9.0])
        torch.testing.assert_close(group_reward_scores(rewards, 2), torch.tensor([0.0, 0.0, 24.5]))

    def test_one_generation_per_group_scores_zero(self):
        assert group_reward_scores(torch.tensor([1.0, 5.0]), 1).tolist() == [0.0, 0.0]

    @pytest.mark.parametrize(
        "rewards, num_generations, metric, message",
        [
            (torch.zeros(6), 4, "variance", "not a positive multiple of num_generations=4"),
            (torch.zeros(2, 3), 3, "variance", "must be 1-D"),
            (torch.zeros(4), 0, "variance", "num_generations must be a positive int"),
            (torch.zeros(4), 2, "mad", "metric must be one of"),
            (torch.zeros(0), 2, "variance", "not a positive multiple"),
        ],
    )
    def test_invalid_arguments(self, rewards, num_generations, metric, message):
        with pytest.raises(ValueError, match=message):
            group_reward_scores(rewards, num_generations, metric=metric)


# ---------------------------------------------------------------------------------------------------------------
# select_groups: RAGEN's RewardRolloutFilter rules, worked out by hand
#
# RAGEN's rule (ragen/trainer/rollout_filter.py, _select_top_groups), in words: scores are float32; unless
# include_zero, groups with |s| <= 1e-10 are dropped, and with no candidate left nothing is kept.
#   top_p >= 1.0: every candidate.
#   top_p, linear: rank (desc, or asc for keep-smallest); threshold T = top_p * sum(candidates) - eps; walk the
#     ranking adding scores while the mass is below T and the score is > 0; keep the walked prefix if its mass
#     reached T, else nothing.
#   top_p, softmax: probabilities softmax(s) (or softmax(-s) for keep-smallest), ranked high to low; keep the
#     shortest prefix whose cumulative probability reaches top_p (at least 1, at most all).
#   top_k (float) k = int(top_k * P); top_k_abs (our int top_k) k = top_k; then k = max(1, min(k, candidates)).
#   min_p: keep s >= max * p - 1e-10, or for keep-smallest s <= min / (p + 1e-10) + 1e-10.
# Ties: this library takes the lower group index first (RAGEN's order among equal keys is torch's).

S4 = [1.0, 6.0, 0.0, 3.0]  # group 2 has zero variance
S8 = [0.5, 4.0, 0.0, 2.0, 1.0, 3.0, 0.0, 0.2]  # P = 8, six candidates without zeros

SELECTION_CASES = [
    # -----------------------------------------------------------------------------------------------------------
    # top_p, linear, keep largest
    # candidates {0,1,3}, sum 10, T = 9: 6 (mass 6 < 9), +3 -> 9 >= 9
    (S4, dict(top_p=0.9), {1, 3}),
    # T = 9.5: 6, 3 give 9 < 9.5, +1 -> 10
    (S4, dict(top_p=0.95), {0, 1, 3}),
    # T = 0.95 * 10 - 0.6 = 8.9: 6 + 3 = 9 >= 8.9
    ([1.0, 6.0, 3.0], dict(top_p=0.95, selection_eps=0.6), {1, 2}),
    # include_zero adds group 2 (score 0) to the candidates; the sum and so T stay 9; the walk stops after 6 + 3
    (S4, dict(top_p=0.9, include_zero=True), {1, 3}),
    # rho = 1.0 is RAGEN's "no filtering": every candidate, zero groups included with include_zero
    ([0.5, 0.0, 0.25, 0.0], dict(top_p=1.0, include_zero=True), {0, 1, 2, 3}),
    ([0.5, 0.0, 0.25, 0.0], dict(top_p=1.0), {0, 2}),
    ([0.5, 0.0, 0.25, 0.0], dict(top_p=1.0, top_p_mode="softmax", include_zero=True), {0, 1, 2, 3}),
    # T = 0.5 * 0.015 - 0.01 < 0: the walk starts with mass 0 >= T, so nothing is kept
    ([0.01, 0.005], dict(top_p=0.5, selection_eps=0.01), set()),
    # T = 0.5 * 0.02 - 0.01 = 0 exactly in float32: still nothing
    ([0.02], dict(top_p=0.5, selection_eps=0.01), set()),
    # every candidate is zero: T = 0, nothing
    ([0.0, 0.0, 0.0], dict(top_p=0.9, include_zero=True), set()),
    # ties: sum 11, T = 8.8: 5, then the 2s in group order: 5 + 2 (group 0) = 7, + 2 (group 2) = 9
    ([2.0, 5.0, 2.0, 2.0], dict(top_p=0.8), {0, 1, 2}),
    # negative scores are candidates (|s| > 1e-10): sum 3, T = 2.7; 3 alone reaches it
    ([3.0, -1.0, 1.0], dict(top_p=0.9), {0}),
    # top_p, linear, relative margin: T = top_p * sum - eps * sum
    # sum 10, T = 9.5 - 1 = 8.5: 6 < 8.5, 6 + 3 = 9 >= 8.5 (the absolute margin 0.1 gives T = 9.4 and keeps all three)
    ([1.0, 6.0, 3.0], dict(top_p=0.95, selection_eps=0.1, selection_eps_mode="relative"), {1, 2}),
    ([1.0, 6.0, 3.0], dict(top_p=0.95, selection_eps=0.1, selection_eps_mode="absolute"), {0, 1, 2}),
    # sum 0.015, T = 0.0075 - 0.00015 = 0.00735: 0.01 alone reaches it (absolute: T < 0, nothing; see above)
    ([0.01, 0.005], dict(top_p=0.5, selection_eps=0.01, selection_eps_mode="relative"), {0}),
    # variances of rewards with std ~0.002-0.03: sum 1e-3, T = 9e-4 - 1e-5 = 8.9e-4: 6e-4, then 9e-4 >= 8.9e-4
    ([6e-4, 3e-4, 1e-4], dict(top_p=0.9, selection_eps=0.01, selection_eps_mode="relative"), {0, 1}),
    ([6.0, 3.0, 1.0], dict(top_p=0.9, selection_eps=0.01, selection_eps_mode="relative"), {0, 1}),  # T = 8.9
    # RAGEN's absolute margin on the same small scores: T = 9e-4 - 0.01 < 0, nothing is kept
    ([6e-4, 3e-4, 1e-4], dict(top_p=0.9, selection_eps=0.01, selection_eps_mode="absolute"), set()),
    # eps = 0 is the same rule in both modes: T = 0.9 * 10 = 9
    (S4, dict(top_p=0.9, selection_eps=0.0, selection_eps_mode="relative"), {1, 3}),
    # -----------------------------------------------------------------------------------------------------------
    # top_p, linear, keep smallest
    # ascending 1, 3, 6 with T = 0.5 * 10 = 5: 1, 4, then 10
    ([6.0, 1.0, 3.0, 0.0], dict(top_p=0.5, largest=False), {0, 1, 2}),
    # with the zero group the ascending walk meets 0 first and stops at mass 0 < 5: nothing
    ([6.0, 1.0, 3.0, 0.0], dict(top_p=0.5, largest=False, include_zero=True), set()),
    # a negative score first stops the walk too
    ([3.0, -1.0, 1.0], dict(top_p=0.5, largest=False), set()),
    # ascending 1, 3 with T = 0.3 * 10 = 3: 1 < 3, 1 + 3 = 4
    ([6.0, 1.0, 3.0], dict(top_p=0.3, largest=False), {1, 2}),
    # -----------------------------------------------------------------------------------------------------------
    # top_p, softmax
    # softmax([1, 3, 2]) = [0.090, 0.665, 0.245]; ranked 0.665 (g1), 0.245 (g2), 0.090 (g0)
    ([1.0, 3.0, 2.0], dict(top_p=0.5, top_p_mode="softmax"), {1}),  # 0.665 >= 0.5
    ([1.0, 3.0, 2.0], dict(top_p=0.9, top_p_mode="softmax"), {1, 2}),  # 0.910 >= 0.9
    ([1.0, 3.0, 2.0], dict(top_p=0.95, top_p_mode="softmax"), {0, 1, 2}),
    # keep smallest ranks softmax(-s) = [0.665, 0.090, 0.245]: g0 first, then g2
    ([1.0, 3.0, 2.0], dict(top_p=0.5, top_p_mode="softmax", largest=False), {0}),
    ([1.0, 3.0, 2.0], dict(top_p=0.9, top_p_mode="softmax", largest=False), {0, 2}),
    # 8 zero groups with include_zero: uniform 1/8, the cumulative 7/8 < 0.9, so all 8
    ([0.0] * 8, dict(top_p=0.9, top_p_mode="softmax", include_zero=True), set(range(8))),
    ([0.0] * 8, dict(top_p=0.9, top_p_mode="softmax"), set()),  # no candidate at all
    # -----------------------------------------------------------------------------------------------------------
    # top_k: an int is a count, a float in (0, 1] a fraction of all P = 8 groups
    (S8, dict(strategy="top_k", top_k=0.25), {1, 5}),  # int(0.25 * 8) = 2: scores 4 and 3
    (S8, dict(strategy="top_k", top_k=0.5), {1, 3, 4, 5}),  # int(0.5 * 8) = 4 of the 6 candidates
    (S8, dict(strategy="top_k", top_k=3), {1, 3, 5}),  # a count of 3: 4, 3, 2
    (S8, dict(strategy="top_k", top_k=1), {1}),  # the int 1: one group
    (S8, dict(strategy="top_k", top_k=1.0), {0, 1, 3, 4, 5, 7}),  # the float 1.0: int(8) = 8, all 6 candidates
    (S8, dict(strategy="top_k", top_k=1.0, include_zero=True), set(range(8))),
    (S8, dict(strategy="top_k", top_k=0.01), {1}),  # int(0.08) = 0, raised to one group
    (S8, dict(strategy="top_k", top_k=100), {0, 1, 3, 4, 5, 7}),  # capped at the candidates
    (
        [float(i) for i in range(1, 101)],
        dict(strategy="top_k", top_k=0.29),
        set(range(72, 100)),
    ),  # int(28.999...) = 28
    ([1.0, 2.0, 3.0, 4.0, 5.0], dict(strategy="top_k", top_k=0.5), {3, 4}),  # int(2.5) = 2
    ([6.0, 1.0, 3.0, 0.0], dict(strategy="top_k", top_k=2, largest=False), {1, 2}),  # smallest non-zero: 1, 3
    ([6.0, 1.0, 3.0, 0.0], dict(strategy="top_k", top_k=2, largest=False, include_zero=True), {1, 3}),  # 0, 1
    ([2.0, 5.0, 2.0, 2.0], dict(strategy="top_k", top_k=2), {0, 1}),  # 5, then the first of the tied 2s
    ([2.0, 5.0, 2.0, 2.0], dict(strategy="top_k", top_k=2, largest=False), {0, 2}),  # the first two tied 2s
    ([0.0, 0.0], dict(strategy="top_k", top_k=1), set()),  # no candidate: the "at least one" does not apply
    ([-0.5, 1.0, 0.0], dict(strategy="top_k", top_k=2), {0, 1}),  # |-0.5| > 1e-10: a candidate
    # -----------------------------------------------------------------------------------------------------------
    # min_p
    ([0.5, 4.0, 0.0, 2.0, 1.0], dict(strategy="min_p", min_p=0.25), {1, 3, 4}),  # s >= 4 * 0.25 - 1e-10
    ([0.5, 4.0, 0.0, 2.0, 1.0], dict(strategy="min_p", min_p=0.0), {0, 1, 3, 4}),  # s >= -1e-10: all candidates
    ([0.5, 4.0, 0.0, 2.0, 1.0], dict(strategy="min_p", min_p=0.0, include_zero=True), {0, 1, 2, 3, 4}),
    ([1.0, 0.5, 0.49], dict(strategy="min_p", min_p=0.5), {0, 1}),  # the threshold 0.5 itself passes
    # the 1e-10 slack: s >= 3e-10 - 1e-10 = 2e-10 keeps 2.5e-10 too
    ([3e-10, 2.5e-10, 1.5e-10], dict(strategy="min_p", min_p=1.0, include_zero=True), {0, 1}),
    # keep smallest: s <= min / (p + 1e-10) + 1e-10 = 0.5 / 0.5 = 1.0
    ([0.5, 4.0, 2.0, 1.0], dict(strategy="min_p", min_p=0.5, largest=False), {0, 3}),
    ([0.5, 4.0, 2.0, 1.0], dict(strategy="min_p", min_p=0.0, largest=False), {0, 1, 2, 3}),  # min / 1e-10: all
    # a zero minimum (include_zero) gives the threshold 1e-10: only the zero group
    ([0.5, 0.0, 2.0], dict(strategy="min_p", min_p=0.5, largest=False, include_zero=True), {1}),
    # -----------------------------------------------------------------------------------------------------------
    # Zero-variance groups
    ([ZERO_SCORE_TOL, 1.0], dict(top_p=1.0), {1}),  # |s| <= 1e-10 is zero
    ([0.0, 0.0, 0.0], dict(strategy="min_p", min_p=0.5), set()),
]


@pytest.mark.parametrize("scores, kwargs, expected", SELECTION_CASES)
def test_selection_by_hand(scores, kwargs, expected):
    keep = select_groups(torch.tensor(scores), **kwargs)
    assert {i for i, kept in enumerate(keep.tolist()) if kept} == expected


def test_scores_are_compared_in_float32():
    # 1.00000001e-10 is above 1e-10 in float64 but rounds to float32(1e-10): a zero group, as in RAGEN
    scores = torch.tensor([1.00000001e-10, 1.0], dtype=torch.float64)
    assert select_groups(scores, top_p=1.0).tolist() == [False, True]
    # T = float32(0.99999999) * sum = 1.0 * float32(0.3): the kept mass 3 * float32(0.1) = 0.30000000447 is below
    # T in float64 but equals it in float32, so all three groups are kept (compared in float64: none)
    assert select_groups(torch.full((3,), 0.1), top_p=0.99999999).tolist() == [True, True, True]


def test_ties_take_the_lower_group_index():
    """The documented tie rule: among equal scores (or equal softmax probabilities) the lower group index comes
    first. RAGEN's order among equal keys is torch.topk's and torch.sort's, which is not the index order: for
    [2, 5, 2, 2] torch.topk(2) returns groups 1 and 3 on CPU. The kept count and the kept scores are the same."""
    scores = torch.tensor([1.0] * 20 + [3.0])
    keep = select_groups(scores, strategy="top_k", top_k=5)
    assert keep.nonzero().squeeze(1).tolist() == [0, 1, 2, 3, 20]
    keep = select_groups(torch.tensor([0.5] * 20), top_p=0.5)  # T = 5: ten tied groups, the first ten
    assert keep.nonzero().squeeze(1).tolist() == list(range(10))


def test_with_binary_rewards_in_four_groups_of_four_rho_0_9_drops_only_zero_variance_groups():
    """Binary rewards, G = 4: a group with k of 4 successes has sample variance k(4-k)/12, so 1/4 or 1/3 when it
    varies. Of four groups none then holds less than 20% of the mass, and the linear rule at rho >= 0.9 keeps every
    group with variance (docs/keep_rate.md, the real-model evaluation). At rho = 0.8 it can drop one."""
    dropped_at = {0.8: 0, 0.9: 0, 0.95: 0, 1.0: 0}
    for successes in itertools.product(range(5), repeat=4):  # 625 batches of 4 groups
        rewards = torch.tensor([float(i < k) for k in successes for i in range(4)])
        scores = group_reward_scores(rewards, 4)
        assert scores.tolist() == pytest.approx([k * (4 - k) / 12 for k in successes])
        for top_p in dropped_at:
            for eps in (0.0, 0.01):
                keep = select_groups(scores, top_p=top_p, selection_eps=eps)
                dropped_at[top_p] += int(keep.tolist() != [0 < k < 4 for k in successes])
    assert dropped_at[0.9] == dropped_at[0.95] == dropped_at[1.0] == 0
    assert dropped_at[0.8] > 0  # e.g. variances [1/3, 1/3, 1/3, 1/4]: 1.0 of 1.25 reaches 0.8 of the mass


def test_relative_margin_selects_the_same_groups_on_every_reward_scale():
    """Group differences d give G = 2 groups the sample variance d**2 / 2. For d = (4, 2, 1) the variances are
    (8, 2, 0.5), sum 10.5. At the config defaults (rho 0.9, eps 0.01) the relative threshold is 0.89 * 10.5 = 9.345
    and RAGEN's absolute one 9.45 - 0.01 = 9.44: both keep 8 + 2 = 10, groups 0 and 1. Scaled by 1e-3 (rewards with
    a std of 0.0007 to 0.0028, the variances 8e-6, 2e-6, 5e-7) the relative threshold is 9.345e-6 and keeps the
    same two groups; the absolute one is 9.45e-6 - 0.01 < 0 and keeps nothing."""
    for scale, absolute_keeps in ((1.0, [True, True, False]), (1e-3, [False, False, False])):
        rewards = torch.tensor([0.0, 4.0, 0.0, 2.0, 0.0, 1.0]) * scale
        scores = group_reward_scores(rewards, num_generations=2)
        torch.testing.assert_close(scores, torch.tensor([8.0, 2.0, 0.5]) * scale**2)
        relative = select_groups(scores, top_p=0.9, selection_eps=0.01, selection_eps_mode="relative")
        absolute = select_groups(scores, top_p=0.9, selection_eps=0.01, selection_eps_mode="absolute")
        assert relative.tolist() == [True, True, False]
        assert absolute.tolist() == absolute_keeps


def test_linear_threshold_by_hand():
    margin, threshold = linear_threshold(torch.tensor(10.0), 0.9, 0.01, "relative")
    assert (margin.item(), threshold.item()) == pytest.approx((0.1, 8.9))
    margin, threshold = linear_threshold(torch.tensor(10.0), 0.9, 0.01, "absolute")
    assert (margin.item(), threshold.item()) == pytest.approx((0.01, 8.99))
    assert margin.dtype == threshold.dtype == torch.float32


def test_keeps_device_and_dtype():
    keep = select_groups(torch.tensor([1.0, 2.0], dtype=torch.float16))
    assert keep.dtype == torch.bool and keep.device == torch.device("cpu")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "random"}, "strategy must be one of"),
        ({"top_p": 0.0}, "top_p must be in \\(0, 1\\], got 0.0"),
        ({"top_p": 1.5}, "top_p must be in \\(0, 1\\], got 1.5"),
        ({"strategy": "top_k"}, "top_k must be an int >= 1 .* or a float in \\(0, 1\\] .*, got None"),
        ({"strategy": "top_k", "top_k": 0}, "top_k must be >= 1 when it is an int"),
        ({"strategy": "top_k", "top_k": -1}, "top_k must be >= 1 when it is an int"),
        ({"strategy": "top_k", "top_k": 2.0}, "top_k=2.0 is a float, so it is a fraction .* pass an int"),
        ({"strategy": "top_k", "top_k": 0.0}, "top_k=0.0 is a float, so it is a fraction"),
        ({"strategy": "top_k", "top_k": float("nan")}, "top_k=nan is a float"),
        ({"strategy": "top_k", "top_k": True}, "top_k must be an int >= 1"),
        ({"strategy": "top_k", "top_k": "4"}, "top_k must be an int >= 1"),
        ({"strategy": "min_p"}, "min_p must be in \\[0, 1\\]"),
        ({"strategy": "min_p", "min_p": 2.0}, "min_p must be in \\[0, 1\\], got 2.0"),
        ({"top_p_mode": "cubic"}, "top_p_mode must be one of"),
        ({"selection_eps": -0.1}, "selection_eps must be a finite number >= 0"),
        ({"selection_eps_mode": "scaled"}, "selection_eps_mode must be one of \\('relative', 'absolute'\\)"),
        ({"selection_eps": 1.0, "selection_eps_mode": "relative"}, "selection_eps=1.0 with .*'relative' .* below 1"),
    ],
)
def test_invalid_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        select_groups(torch.tensor([1.0, 2.0]), **kwargs)


def test_invalid_scores():
    with pytest.raises(ValueError, match="NaN or inf"):
        select_groups(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        select_groups(torch.zeros(2, 2))


# ---------------------------------------------------------------------------------------------------------------
# select_groups against an independent re-derivation of RAGEN's rule


def f32(value) -> np.float32:
    return np.float32(value)


def ragen_selection(scores, strategy, value, mode, include_zero, eps, largest) -> set[int]:
    """RAGEN's group selection, re-derived from its description (see the table above) with plain Python control
    flow and numpy float32 arithmetic; torch supplies only the float32 sum, softmax and cumulative sum RAGEN uses.
    Ties go to the lower group index."""
    s = torch.tensor(scores, dtype=torch.float32)
    values = [f32(x) for x in s.tolist()]
    groups = [g for g in range(len(values)) if include_zero or abs(values[g]) > f32(1e-10)]
    if not groups:
        return set()
    mine = [values[g] for g in groups]

    def ranked(keys, high_first):
        return sorted(range(len(keys)), key=lambda j: (-keys[j] if high_first else keys[j], j))

    if strategy == "top_p" and value >= 1.0:
        chosen = list(range(len(groups)))
    elif strategy == "top_p" and mode == "softmax":
        logits = s[groups] if largest else -s[groups]
        probabilities = torch.softmax(logits, dim=0).tolist()
        order = ranked(probabilities, high_first=True)
        cumulative = torch.cumsum(torch.tensor([probabilities[j] for j in order]), dim=0).tolist()
        reach = next((n for n, c in enumerate(cumulative) if f32(c) >= f32(value)), len(order))
        chosen = order[: min(reach + 1, len(order))]
    elif strategy == "top_p":
        order = ranked(mine, high_first=largest)
        threshold = f32(value) * f32(s[groups].sum().item()) - f32(eps)
        mass, taken = 0.0, []
        for j in order:
            if f32(mass) >= threshold or mine[j] <= 0:
                break
            mass += float(mine[j])
            taken.append(j)
        chosen = taken if f32(mass) >= threshold else []
    elif strategy == "top_k":
        k = value if isinstance(value, int) else int(value * len(values))
        chosen = ranked(mine, high_first=largest)[: max(1, min(k, len(groups)))]
    elif largest:
        chosen = [j for j in range(len(mine)) if mine[j] >= max(mine) * f32(value) - f32(1e-10)]
    else:
        chosen = [j for j in range(len(mine)) if mine[j] <= min(mine) / f32(value + 1e-10) + f32(1e-10)]
    return {groups[j] for j in chosen}


score_values = st.one_of(
    st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 1e-10, 2e-10, 0.01]),  # ties, zeros, the tolerance
    st.floats(min_value=0.0, max_value=10.0, width=32),
    st.floats(min_value=-2.0, max_value=2.0, width=32),
)


@settings(max_examples=1500, deadline=None)
@given(
    scores=st.lists(score_values, min_size=1, max_size=40),
    rule=st.one_of(
        st.tuples(st.just("top_p"), st.one_of(st.floats(0.01, 1.0), st.sampled_from([0.5, 0.9, 0.99999999, 1.0]))),
        st.tuples(st.just("top_k"), st.one_of(st.integers(1, 45), st.floats(0.01, 1.0), st.sampled_from([0.25, 1.0]))),
        st.tuples(st.just("min_p"), st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 0.05, 0.2, 1.0]))),
    ),
    mode=st.sampled_from(["linear", "softmax"]),
    include_zero=st.booleans(),
    eps=st.one_of(st.sampled_from([0.0, 0.01]), st.floats(0.0, 0.5)),
    largest=st.booleans(),
)
def test_selection_equals_the_re_derived_ragen_rule(scores, rule, mode, include_zero, eps, largest):
    strategy, value = rule
    keep = select_groups(
        torch.tensor(scores),
        strategy=strategy,
        **{strategy: value},
        top_p_mode=mode,
        include_zero=include_zero,
        selection_eps=eps,
        selection_eps_mode="absolute",  # RAGEN's margin
        largest=largest,
    )
    kept = {i for i, k in enumerate(keep.tolist()) if k}
    assert kept == ragen_selection(scores, strategy, value, mode, include_zero, eps, largest)


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.floats(min_value=0.0, max_value=10.0, width=32), min_size=1, max_size=40),
    top_p=st.one_of(st.floats(0.05, 0.999), st.sampled_from([0.5, 0.9])),
    eps=st.one_of(st.sampled_from([0.0, 0.01]), st.floats(0.0, 0.04)),
    include_zero=st.booleans(),
    exponent=st.integers(-40, 40),
)
def test_relative_margin_is_scale_free_and_keeps_a_group_with_variance(scores, top_p, eps, include_zero, exponent):
    """Scores multiplied by 2**k (exact in float32) select the same groups under the relative margin, and while eps
    is below top_p a batch with any score above the zero tolerance keeps at least one group."""
    values = torch.tensor(scores, dtype=torch.float32)
    scale = 2.0**exponent
    assume(bool(torch.isfinite(values * scale).all()) and bool(((values * scale == 0) == (values == 0)).all()))
    assume(bool(((values * scale).abs() > ZERO_SCORE_TOL).eq(values.abs() > ZERO_SCORE_TOL).all()))
    # float32 subnormals (below 1.2e-38) lose bits when multiplied by top_p, so scaling is not exact there
    assume(bool(((values == 0) | ((values.abs() >= 1e-30) & ((values * scale).abs() >= 1e-30))).all()))
    assume(eps < top_p - 0.01)

    def select(s):
        return select_groups(
            s, top_p=top_p, selection_eps=eps, selection_eps_mode="relative", include_zero=include_zero
        )

    keep = select(values)
    assert torch.equal(select(values * scale), keep)
    if bool((values.abs() > ZERO_SCORE_TOL).any()):
        assert bool(keep.any())


# ---------------------------------------------------------------------------------------------------------------
# filter_stats


class TestFilterStats:
    def test_hand_computed(self):
        # groups: [0,0] (all at batch min), [1,3] (var 2), [5,5] (all at batch max), [2,4] (var 2)
        rewards = torch.tensor([0.0, 0.0, 1.0, 3.0, 5.0, 5.0, 2.0, 4.0])
        keep = mask(0, 1, 0, 0)
        stats = filter_stats(rewards, 2, keep)
        assert stats["num_groups"] == 4 and stats["kept_groups"] == 1
        assert stats["kept_fraction"] == 0.25
        assert stats["kept_variance_share"] == pytest.approx(0.5)
        # per-group std: 0, sqrt2, 0, sqrt2 -> mean sqrt2/2, population std sqrt2/2 -> ratio 1
        assert stats["std_over_mean"] == pytest.approx(1.0)
        assert stats["zero_variance_groups"] == 2
        assert stats["zero_variance_at_max"] == 1 and stats["zero_variance_at_min"] == 1

    def test_no_variance_anywhere_gives_nan_shares(self):
        stats = filter_stats(torch.ones(6), 3, mask(0, 0))
        assert math.isnan(stats["kept_variance_share"]) and math.isnan(stats["std_over_mean"])
        assert stats["zero_variance_groups"] == 2
        # every group is at the (single) batch value: counted once, as at-max
        assert stats["zero_variance_at_max"] == 2 and stats["zero_variance_at_min"] == 0

    def test_shape_mismatch(self):
        with pytest.raises(ValueError, match="keep must have shape \\(2,\\)"):
            filter_stats(torch.zeros(4), 2, mask(1, 0, 1))
