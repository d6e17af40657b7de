"""Tests of the paper's ablation filters and RAGEN's ranking metrics (trl_ragen2.filtering.ablations,
trl_ragen2.filtering.group_metrics), on hand-worked cases and against brute force.

RAGEN's rules (branch `more-experiments` for the two ablations, `main` for the metrics), in words:
  percentile_range: rank the candidates (zero scores dropped unless include_zero) high to low (low to high for
    keep-smallest); with N candidates keep ranks [round(low * N), max(that + 1, min(round(high * N), N))), Python's
    round (halves to even).
  within_group: k = max(1, round(ratio * G)) rollouts per group; sort the group's rewards ascending and keep the
    j lowest plus the k - j highest, for the first j (0 ... k) with the largest float32 sample variance.
  metrics: reward = group mean, reward_sum = group sum, entropy = mean over the group of each rollout's mean token
    entropy over its loss tokens, entropy_variance = their std (ddof 1), length = mean loss-token count.
"""

import itertools
import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2.filtering.ablations import max_variance_subset, select_within_group, within_group_count
from trl_ragen2.filtering.group_metrics import group_scores, row_mean_entropy
from trl_ragen2.filtering.selection import select_groups


def kept(mask) -> set[int]:
    return {i for i, k in enumerate(mask.tolist()) if k}


# ---------------------------------------------------------------------------------------------------------------
# percentile_range

S8 = [5.0, 1.0, 3.0, 0.0, 4.0, 2.0, 0.0, 6.0]
# Without zeros: N = 6 candidates, ranked 7 (6), 0 (5), 4 (4), 2 (3), 5 (2), 1 (1).
# With zeros: N = 8, then 3 and 6 (0, 0) in index order.

PERCENTILE_CASES = [
    # (0, .25): ranks round(0) = 0 to round(1.5) = 2
    (S8, (0.0, 0.25), {}, {7, 0}),
    # (.25, .5): round(1.5) = 2 to round(3.0) = 3: one group
    (S8, (0.25, 0.5), {}, {4}),
    # (.5, .75): 3 to round(4.5) = 4 (halves to even)
    (S8, (0.5, 0.75), {}, {2}),
    # (.75, 1): round(4.5) = 4 to 6
    (S8, (0.75, 1.0), {}, {5, 1}),
    # include_zero: N = 8, two ranks per quartile
    (S8, (0.0, 0.25), dict(include_zero=True), {7, 0}),
    (S8, (0.25, 0.5), dict(include_zero=True), {4, 2}),
    (S8, (0.5, 0.75), dict(include_zero=True), {5, 1}),
    (S8, (0.75, 1.0), dict(include_zero=True), {3, 6}),
    # keep smallest: ranked 1 (1), 5 (2), 2 (3), 4 (4), 0 (5), 7 (6); (0, .25) keeps ranks 0 and 1
    (S8, (0.0, 0.25), dict(largest=False), {1, 5}),
    (S8, (0.0, 1.0), {}, {0, 1, 2, 4, 5, 7}),
    # N = 2: the bottom quartile starts at round(1.5) = 2 = N and keeps nothing
    ([3.0, 1.0], (0.75, 1.0), {}, set()),
    # N = 1: (.5, .75) is round(0.5) = 0 to round(0.75) = 1
    ([3.0], (0.5, 0.75), {}, {0}),
    # a band narrower than one rank keeps one: round(1.2) = 1, round(1.4) = 1, raised to 2
    ([4.0, 3.0, 2.0, 1.0], (0.3, 0.35), {}, {1}),
    # ties rank in index order: ranked 1 (5), 0, 2, 3 (the 2s); ranks 1 and 2 are groups 0 and 2
    ([2.0, 5.0, 2.0, 2.0], (0.25, 0.75), {}, {0, 2}),
    # no candidate
    ([0.0, 0.0], (0.0, 1.0), {}, set()),
]


@pytest.mark.parametrize("scores, band, kwargs, expected", PERCENTILE_CASES)
def test_percentile_range_by_hand(scores, band, kwargs, expected):
    keep = select_groups(torch.tensor(scores), strategy="percentile_range", percentile_range=band, **kwargs)
    assert kept(keep) == expected


def test_the_four_quartiles_partition_the_candidates():
    scores = torch.tensor([float(i % 7) + 0.5 for i in range(32)])
    quartiles = [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    kept_sets = [kept(select_groups(scores, strategy="percentile_range", percentile_range=q)) for q in quartiles]
    assert [len(s) for s in kept_sets] == [8, 8, 8, 8]
    assert set().union(*kept_sets) == set(range(32))
    assert min(scores[list(kept_sets[0])]) >= max(scores[list(kept_sets[1])])  # Q1 holds the highest scores


@pytest.mark.parametrize(
    "band, message",
    [
        ((0.5, 0.5), " band must satisfy 0 <= low < high <= 1, got low=0.5, high=0.5"),
        ((-0.1, 0.5), " band must satisfy 0 <= low < high <= 1, got low=-0.1"),
        ((0.5, 1.5), " band must satisfy 0 <= low < high <= 1, got low=0.5, high=1.5"),
        ((0.1,), " must be a pair (low, high), got (0.1,)"),
        ((float("nan"), 1.0), " band must be two numbers, got low=nan"),
    ],
)
def test_invalid_percentile_band_names_the_argument(band, message):
    with pytest.raises(ValueError, match=re.escape(f"select_groups: percentile_range{message}")):
        select_groups(torch.tensor([1.0, 2.0]), strategy="percentile_range", percentile_range=band)


# ---------------------------------------------------------------------------------------------------------------
# within_group

WITHIN_CASES = [
    # k = 2 of [0, 1, 2, 3]: j = 0 keeps {2, 3} (var 0.5), j = 1 {0, 3} (var 4.5), j = 2 {0, 1} (0.5)
    ([0.0, 1.0, 2.0, 3.0], 0.5, {0, 3}),
    # ties: ascending (stable) order 0, 1, 2, 3; j = 1 keeps the lowest index of the 0s and the highest of the 1s
    ([0.0, 0.0, 1.0, 1.0], 0.5, {0, 3}),
    # k = 1 (0.25 * 4): j = 0, the highest reward
    ([3.0, 1.0, 2.0, 0.0], 0.25, {0}),
    # k = 1 with a tie at the top: the ascending order is 2, 3, 0, 1, and the top-1 is its last, index 1
    ([1.0, 1.0, 0.0, 0.0], 0.25, {1}),
    # equal variances: j = 0 ({0 (index 2), 10}, var 50) and j = 1 ({0 (index 0), 10}, var 50); the first j wins
    ([0.0, 0.0, 0.0, 10.0], 0.5, {2, 3}),
    # k = 3 of [0, 2, 9, 10]: j = 0 {2, 9, 10} var 19, j = 1 {0, 9, 10} var 30.33, j = 2 {0, 2, 10} var 28,
    # j = 3 {0, 2, 9} var 22.33
    ([0.0, 2.0, 9.0, 10.0], 0.75, {0, 2, 3}),
    # ratio 1: every rollout
    ([0.0, 2.0, 9.0, 10.0], 1.0, {0, 1, 2, 3}),
    # NaN rollouts (unscored) rank last: k = 2 among 0 (1), 1 (3), 5 (2): j = 1 keeps {0, 5} (var 12.5)
    ([math.nan, 0.0, 5.0, 1.0], 0.5, {1, 2}),
    # k = 3 with two finite rewards: both, and the first NaN rollout fills the third place
    ([math.nan, math.nan, 5.0, 1.0], 0.75, {0, 2, 3}),
]


@pytest.mark.parametrize("rewards, ratio, expected", WITHIN_CASES)
def test_within_group_by_hand(rewards, ratio, expected):
    assert kept(select_within_group(torch.tensor(rewards), 4, ratio)) == expected


def test_within_group_keeps_every_group_and_k_rollouts_each():
    # two groups of 4: [0, 1, 2, 3] keeps rows 0 and 3, [5, 5, 5, 5] (no variance) keeps its top two, rows 6 and 7
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 5.0])
    assert kept(select_within_group(rewards, 4, 0.5)) == {0, 3, 6, 7}


@pytest.mark.parametrize(
    "ratio, G, k",
    [(0.5, 16, 8), (0.5, 5, 2), (0.3, 5, 2), (0.1, 4, 1), (0.7, 5, 4), (0.25, 2, 1), (1.0, 3, 3), (0.5, 1, 1)],
)
def test_kept_count_rounds_half_to_even_and_keeps_at_least_one(ratio, G, k):
    # round(2.5) = 2, round(1.5) = 2, round(0.4) = 0 -> 1, round(3.5) = 4, round(0.5) = 0 -> 1
    assert within_group_count(ratio, G) == k


@settings(max_examples=400, deadline=None)
@given(
    group=st.lists(
        st.one_of(st.sampled_from([0.0, 1.0, -0.1]), st.floats(-10.0, 10.0, width=32)), min_size=1, max_size=8
    ),
    data=st.data(),
)
def test_within_group_finds_the_subset_of_largest_variance(group, data):
    """The "j lowest + k - j highest" search reaches the brute-force maximum over every k-subset."""
    keep = data.draw(st.integers(1, len(group)))
    mask = max_variance_subset(torch.tensor(group), keep)
    assert int(mask.sum()) == keep

    def variance(values):
        return torch.tensor(values, dtype=torch.float64).var().item() if len(values) > 1 else 0.0

    best = max(variance([group[i] for i in subset]) for subset in itertools.combinations(range(len(group)), keep))
    chosen = variance([group[i] for i, k in enumerate(mask.tolist()) if k])
    assert chosen >= best - 1e-5 * max(1.0, best)  # float32 comparisons may pick a subset equal up to rounding


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(keep_ratio=0.0), "keep_ratio must be in \\(0, 1\\], got 0.0"),
        (dict(keep_ratio=1.5), "keep_ratio must be in \\(0, 1\\], got 1.5"),
        (dict(keep_ratio=0.5, num_generations=3), "rewards must be 1-D with a positive multiple of num_generations=3"),
    ],
)
def test_within_group_invalid_arguments(kwargs, message):
    kwargs = {"num_generations": 4, **kwargs}
    with pytest.raises(ValueError, match=f"select_within_group: {message}"):
        select_within_group(torch.zeros(8), **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# RAGEN's ranking metrics


def test_reward_metrics_by_hand():
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])  # G = 4
    assert group_scores("reward", 4, rewards=rewards).tolist() == [0.5, 2.0]
    assert group_scores("reward_sum", 4, rewards=rewards).tolist() == [2.0, 8.0]
    assert group_scores("variance", 4, rewards=rewards).tolist() == pytest.approx([1 / 3, 0.0])
    assert group_scores("std", 4, rewards=rewards).tolist() == pytest.approx([math.sqrt(1 / 3), 0.0])


def test_nan_rewards_are_left_out_of_mean_and_sum():
    rewards = torch.tensor([math.nan, 1.0, 3.0, math.nan, math.nan, math.nan, math.nan, math.nan])
    assert group_scores("reward", 4, rewards=rewards).tolist() == [2.0, 0.0]  # a group without a score: 0
    assert group_scores("reward_sum", 4, rewards=rewards).tolist() == [4.0, 0.0]


def test_entropy_and_length_metrics_by_hand():
    entropies = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [1.0, 1.0, 9.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]])
    rows = row_mean_entropy(entropies, mask)
    assert rows.tolist() == [1.5, 4.0, 1.0, 0.0]  # the masked tokens do not count; a row without tokens is 0
    assert group_scores("entropy", 2, row_entropies=rows).tolist() == [2.75, 0.5]
    assert group_scores("entropy_variance", 2, row_entropies=rows).tolist() == pytest.approx(
        [math.sqrt(2 * 1.25**2), math.sqrt(2 * 0.5**2)]  # ddof 1: sqrt(sum of squared deviations / 1)
    )
    lengths = mask.sum(dim=1).float()  # [2, 1, 2, 0]
    assert group_scores("length", 2, row_lengths=lengths).tolist() == [1.5, 1.0]


def test_a_metric_without_its_values_names_them():
    with pytest.raises(ValueError, match="metric='entropy' needs row_entropies"):
        group_scores("entropy", 2, rewards=torch.zeros(4))
    with pytest.raises(ValueError, match="metric must be one of"):
        group_scores("mad", 2, rewards=torch.zeros(4))
    with pytest.raises(ValueError, match="row_lengths must be 1-D with a positive multiple of num_generations=2"):
        group_scores("length", 2, row_lengths=torch.zeros(3))


def test_reward_metric_with_keep_smallest_keeps_the_hardest_prompts():
    # mean rewards 0.5, 2.0, 0.0 (zero: not a candidate), 1.0; top_k 1 of the smallest candidates: group 0
    rewards = torch.tensor([0.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0])
    scores = group_scores("reward", 2, rewards=rewards)
    assert kept(select_groups(scores, strategy="top_k", top_k=1, largest=False)) == {0}
    assert kept(select_groups(scores, strategy="top_k", top_k=1, largest=False, include_zero=True)) == {2}
