"""Tests of the pure SNR-filtering functions (trl_ragen2.filtering) on hand-built and generated rewards."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2.filtering import ZERO_SCORE_TOL, filter_stats, group_reward_scores, select_groups


def mask(*bits):
    return torch.tensor([bool(b) for b in bits])


# ---------------------------------------------------------------------------------------------------------------
# group_reward_scores
# ---------------------------------------------------------------------------------------------------------------


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
# select_groups: hand-built cases
# ---------------------------------------------------------------------------------------------------------------


class TestSelectGroupsHandBuilt:
    def test_linear_top_p_keeps_shortest_prefix_reaching_mass(self):
        scores = torch.tensor([1.0, 6.0, 0.0, 3.0])  # total 10 -> threshold 9: 6 + 3 reaches it
        assert select_groups(scores, top_p=0.9).tolist() == [False, True, False, True]
        # threshold 9.5 needs the third group too
        assert select_groups(scores, top_p=0.95).tolist() == [True, True, False, True]

    def test_selection_eps_lowers_the_threshold(self):
        scores = torch.tensor([1.0, 6.0, 3.0])  # threshold 0.95 * 10 = 9.5: needs all three
        assert select_groups(scores, top_p=0.95).tolist() == [True, True, True]
        assert select_groups(scores, top_p=0.95, selection_eps=0.6).tolist() == [False, True, True]

    def test_top_p_one_keeps_every_nonzero_group(self):
        scores = torch.tensor([0.1, 0.0, 0.2, 0.3])
        assert select_groups(scores, top_p=1.0).tolist() == [True, False, True, True]
        assert select_groups(scores, top_p=1.0, include_zero=True).tolist() == [True, False, True, True]

    def test_all_zero_linear_keeps_nothing(self):
        scores = torch.zeros(5)
        assert not select_groups(scores).any()
        assert not select_groups(scores, include_zero=True).any()  # the candidate sum is 0

    def test_all_zero_softmax_with_include_zero_keeps_everything(self):
        # Uniform softmax over 8 zero scores: cumulative mass reaches 0.9 at the 8th group.
        scores = torch.zeros(8)
        assert select_groups(scores, top_p_mode="softmax", include_zero=True).all()
        assert not select_groups(scores, top_p_mode="softmax").any()  # no candidates at all

    def test_softmax_mode(self):
        scores = torch.tensor([1.0, 3.0, 2.0])
        # softmax of sorted [3, 2, 1]: 0.665, 0.245, 0.090 -> cumulative 0.665, 0.910, 1.0
        assert select_groups(scores, top_p=0.5, top_p_mode="softmax").tolist() == [False, True, False]
        assert select_groups(scores, top_p=0.9, top_p_mode="softmax").tolist() == [False, True, True]
        assert select_groups(scores, top_p=0.95, top_p_mode="softmax").tolist() == [True, True, True]

    def test_top_k_fraction_and_count(self):
        scores = torch.tensor([0.5, 4.0, 0.0, 2.0, 1.0, 3.0, 0.0, 0.2])
        assert select_groups(scores, strategy="top_k", top_k=0.25).tolist() == [0, 1, 0, 0, 0, 1, 0, 0]
        assert select_groups(scores, strategy="top_k", top_k=3).tolist() == [0, 1, 0, 1, 0, 1, 0, 0]
        # a tiny fraction still keeps one group
        assert select_groups(scores, strategy="top_k", top_k=0.01).sum() == 1
        # never more than the candidates (6 non-zero groups)
        assert select_groups(scores, strategy="top_k", top_k=100).sum() == 6
        assert select_groups(scores, strategy="top_k", top_k=100, include_zero=True).sum() == 8

    def test_min_p(self):
        scores = torch.tensor([0.5, 4.0, 0.0, 2.0, 1.0])
        assert select_groups(scores, strategy="min_p", min_p=0.25).tolist() == [False, True, False, True, True]
        assert select_groups(scores, strategy="min_p", min_p=0.0).tolist() == [True, True, False, True, True]
        assert select_groups(scores, strategy="min_p", min_p=0.0, include_zero=True).all()

    def test_ties_prefer_lower_group_index(self):
        scores = torch.tensor([2.0, 5.0, 2.0, 2.0])
        assert select_groups(scores, strategy="top_k", top_k=2).tolist() == [True, True, False, False]
        assert select_groups(scores, strategy="top_k", top_k=2, largest=False).tolist() == [True, False, True, False]

    def test_keep_smallest(self):
        scores = torch.tensor([6.0, 1.0, 3.0, 0.0])
        assert select_groups(scores, strategy="top_k", top_k=2, largest=False).tolist() == [False, True, True, False]
        assert select_groups(scores, strategy="top_k", top_k=2, largest=False, include_zero=True).tolist() == [
            False,
            True,
            False,
            True,
        ]
        # ascending mass: 1 + 3 = 4 < 0.5 * 10 - 0 -> needs 6 too
        assert select_groups(scores, top_p=0.5, largest=False).tolist() == [True, True, True, False]
        assert select_groups(scores, strategy="min_p", min_p=0.5, largest=False).tolist() == [False, True, True, False]

    def test_single_group(self):
        assert select_groups(torch.tensor([0.7])).tolist() == [True]
        assert select_groups(torch.tensor([0.0])).tolist() == [False]
        assert select_groups(torch.tensor([0.7]), strategy="top_k", top_k=0.1).tolist() == [True]

    def test_scores_at_tolerance_count_as_zero(self):
        scores = torch.tensor([ZERO_SCORE_TOL, 1.0])
        assert select_groups(scores, top_p=1.0).tolist() == [False, True]

    def test_keeps_device_and_dtype(self):
        keep = select_groups(torch.tensor([1.0, 2.0], dtype=torch.float16))
        assert keep.dtype == torch.bool and keep.device == torch.device("cpu")

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"strategy": "random"}, "strategy must be one of"),
            ({"top_p": 0.0}, "top_p must be in \\(0, 1\\], got 0.0"),
            ({"top_p": 1.5}, "top_p must be in \\(0, 1\\], got 1.5"),
            ({"strategy": "top_k"}, "top_k must be > 0"),
            ({"strategy": "top_k", "top_k": -1}, "top_k must be > 0"),
            ({"strategy": "min_p"}, "min_p must be in \\[0, 1\\]"),
            ({"strategy": "min_p", "min_p": 2.0}, "min_p must be in \\[0, 1\\], got 2.0"),
            ({"top_p_mode": "cubic"}, "top_p_mode must be one of"),
            ({"selection_eps": -0.1}, "selection_eps must be a finite number >= 0"),
        ],
    )
    def test_invalid_arguments_name_the_argument(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            select_groups(torch.tensor([1.0, 2.0]), **kwargs)

    def test_invalid_scores(self):
        with pytest.raises(ValueError, match="NaN or inf"):
            select_groups(torch.tensor([1.0, float("nan")]))
        with pytest.raises(ValueError, match="non-empty 1-D"):
            select_groups(torch.zeros(2, 2))


# ---------------------------------------------------------------------------------------------------------------
# select_groups: properties
# ---------------------------------------------------------------------------------------------------------------

score_lists = st.lists(
    st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=100.0, allow_nan=False, width=32)),
    min_size=1,
    max_size=24,
)


def ranked_candidates(scores, include_zero=False, largest=True, dtype=torch.float32):
    """Reference ranking: indices sorted by score (desc or asc), ties by index, zero groups dropped.

    The zero test runs in the dtype the scores are given in, as select_groups does.
    """
    order = sorted(range(len(scores)), key=lambda i: (-scores[i] if largest else scores[i], i))
    nonzero = (torch.tensor(scores, dtype=dtype) > ZERO_SCORE_TOL).tolist()
    return [i for i in order if include_zero or nonzero[i]]


@settings(max_examples=300, deadline=None)
@given(
    scores=score_lists,
    top_p=st.floats(min_value=0.01, max_value=1.0),
    include_zero=st.booleans(),
    largest=st.booleans(),
)
def test_linear_top_p_is_minimal_prefix_reaching_mass(scores, top_p, include_zero, largest):
    keep = select_groups(
        torch.tensor(scores, dtype=torch.float64), top_p=top_p, include_zero=include_zero, largest=largest
    )
    ranked = ranked_candidates(scores, include_zero, largest, dtype=torch.float64)
    kept = [i for i in ranked if keep[i]]
    assert kept == ranked[: len(kept)], "the kept set is a prefix of the stable ranking"
    assert keep.sum() == len(kept), "no group outside the candidates is kept"
    total = sum(scores[i] for i in ranked)
    if total <= 0:
        assert len(kept) == 0
        return
    threshold = top_p * total
    assert sum(scores[i] for i in kept) >= threshold * (1 - 1e-9), "the kept mass reaches the threshold"
    assert len(kept) >= 1
    if len(kept) > 1:
        shorter = sum(scores[i] for i in kept[:-1])
        assert shorter < threshold * (1 + 1e-9), "one group fewer would not reach it: the prefix is minimal"


@settings(max_examples=200, deadline=None)
@given(scores=score_lists, top_k=st.one_of(st.floats(0.01, 0.99), st.integers(1, 30)), include_zero=st.booleans())
def test_top_k_counts(scores, top_k, include_zero):
    keep = select_groups(torch.tensor(scores), strategy="top_k", top_k=top_k, include_zero=include_zero)
    ranked = ranked_candidates(scores, include_zero)
    expected = max(1, int(top_k * len(scores))) if top_k < 1 else int(top_k)
    expected = min(expected, len(ranked))
    assert int(keep.sum()) == expected
    assert [i for i in ranked if keep[i]] == ranked[:expected]


@settings(max_examples=200, deadline=None)
@given(scores=score_lists, top_p=st.floats(0.01, 1.0), include_zero=st.booleans())
def test_softmax_top_p_keeps_at_least_one_candidate(scores, top_p, include_zero):
    keep = select_groups(torch.tensor(scores), top_p=top_p, top_p_mode="softmax", include_zero=include_zero)
    ranked = ranked_candidates(scores, include_zero)
    kept = [i for i in ranked if keep[i]]
    assert kept == ranked[: len(kept)]
    assert (len(kept) >= 1) == (len(ranked) >= 1)
    if top_p >= 1.0:
        assert len(kept) == len(ranked)


@settings(max_examples=200, deadline=None)
@given(scores=score_lists, min_p=st.floats(0.0, 1.0))
def test_min_p_keeps_exactly_the_groups_above_threshold(scores, min_p):
    keep = select_groups(torch.tensor(scores, dtype=torch.float64), strategy="min_p", min_p=min_p)
    ranked = ranked_candidates(scores, dtype=torch.float64)
    if not ranked:
        assert not keep.any()
        return
    threshold = min_p * max(scores)
    assert [bool(keep[i]) for i in range(len(scores))] == [
        i in ranked and scores[i] >= threshold for i in range(len(scores))
    ]


# ---------------------------------------------------------------------------------------------------------------
# filter_stats
# ---------------------------------------------------------------------------------------------------------------


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
