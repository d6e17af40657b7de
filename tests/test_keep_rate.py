"""Keep-rate control (trl_ragen2.filtering.keep_rate): schedule values, auto-switch transitions and the guard's kept
sets, each worked out by hand on constructed reward sequences."""

import math

import pytest
import torch

from trl_ragen2.filtering.keep_rate import (
    AUTO_OFF_BELOW,
    AUTO_ON_ABOVE,
    FilterDecision,
    KeepRateControl,
    auto_switch,
    guard_min_kept,
    min_kept_groups,
    scheduled_top_p,
    select_under,
)
from trl_ragen2.filtering.selection import group_reward_scores, std_over_mean


G = 4


def rewards_for(amplitudes):
    """Groups of G = 4 rollouts earning [0, a, 0, a]: variance a**2 / 3, std a / sqrt(3)."""
    return torch.tensor([value for a in amplitudes for value in (0.0, a, 0.0, a)])


def kept(mask) -> set[int]:
    return set(mask.nonzero().squeeze(1).tolist())


def run(control, amplitude_sequence, **selection):
    """The kept groups and decisions of a run over one batch per optimizer step, as the trainer makes them."""
    signal, on, results = None, True, []
    for step, amplitudes in enumerate(amplitude_sequence):
        rewards = rewards_for(amplitudes)
        decision = control.decide(step, std_over_mean(rewards, G), signal, on)
        if decision.auto_on is not None:
            signal, on = decision.auto_signal, decision.auto_on
        keep, _ = select_under(decision, group_reward_scores(rewards, G), selection_eps=0.01, **selection)
        results.append((decision, kept(keep)))
    return results


# ---------------------------------------------------------------------------------------------------------------
# Schedules


@pytest.mark.parametrize(
    "schedule, expected",
    [
        # warm-up 2, then 0.9 -> 0.5 over 4 steps: -0.1 per step
        ("linear", {0: 0.9, 2: 0.9, 3: 0.8, 4: 0.7, 5: 0.6, 6: 0.5, 7: 0.5, 100: 0.5}),
        # 0.5 + 0.4 * (1 + cos(pi * t)) / 2 at t = (step - 2) / 4
        (
            "cosine",
            {2: 0.9, 3: 0.5 + 0.2 * (1 + math.sqrt(0.5)), 4: 0.7, 5: 0.5 + 0.2 * (1 - math.sqrt(0.5)), 6: 0.5, 9: 0.5},
        ),
        ("constant", {0: 0.9, 3: 0.9, 100: 0.9}),
    ],
)
def test_schedule_values_by_hand(schedule, expected):
    end = None if schedule == "constant" else 0.5
    for step, value in expected.items():
        got = scheduled_top_p(step, start=0.9, end=end, schedule=schedule, schedule_steps=4, warmup_steps=2)
        assert got == pytest.approx(value, abs=1e-12), (schedule, step)


def test_schedule_can_rise():
    values = [scheduled_top_p(s, start=0.6, end=1.0, schedule="linear", schedule_steps=2) for s in range(4)]
    assert values == pytest.approx([0.6, 0.8, 1.0, 1.0], abs=1e-12)


def test_schedule_errors_name_the_argument():
    with pytest.raises(ValueError, match="schedule must be one of"):
        scheduled_top_p(0, start=0.9, end=0.5, schedule="step", schedule_steps=4)
    with pytest.raises(ValueError, match="needs an end value and schedule_steps >= 1"):
        scheduled_top_p(0, start=0.9, end=0.5, schedule="linear", schedule_steps=0)


def test_warmup_turns_the_filter_off_and_the_schedule_starts_after_it():
    control = KeepRateControl(top_p=1.0, top_p_end=0.5, schedule="linear", schedule_steps=2, warmup_steps=1)
    decisions = [control.decide(step) for step in range(5)]
    assert [d.active for d in decisions] == [False, True, True, True, True]
    assert [d.top_p for d in decisions] == pytest.approx([1.0, 1.0, 0.75, 0.5, 0.5], abs=1e-12)
    assert all(d.auto_on is None and d.auto_signal is None for d in decisions)


@pytest.mark.parametrize(
    "schedule, kept_sets",
    [
        # variances [1, 4, 9, 16] / 3, total 10; from the top the kept mass is 5.33, 8.33, 9.67, 10.
        # rho 1.0 (every candidate), then 0.85 (threshold 8.49: three groups), 0.7 (6.99: two), 0.55 (5.49: two)
        ("linear", [{0, 1, 2, 3}, {0, 1, 2, 3}, {1, 2, 3}, {2, 3}, {2, 3}, {3}]),
        # rho 1.0, 0.912 (9.11: three), 0.7 (two), 0.488 (4.87: one), 0.4 (3.99: one)
        ("cosine", [{0, 1, 2, 3}, {0, 1, 2, 3}, {1, 2, 3}, {2, 3}, {3}, {3}]),
    ],
)
def test_schedule_kept_sets_on_a_fixed_batch(schedule, kept_sets):
    control = KeepRateControl(top_p=1.0, top_p_end=0.4, schedule=schedule, schedule_steps=4, warmup_steps=1)
    results = run(control, [[1.0, 2.0, 3.0, 4.0]] * 6)
    assert [keep for _, keep in results] == kept_sets
    assert results[0][0].active is False  # warm-up: every group, by the inactive path


# ---------------------------------------------------------------------------------------------------------------
# Auto switch


def test_thresholds_lie_between_the_two_table_8_measurements():
    # Table 8: Sokoban's Std/Mean 1.16-1.29 gained from filtering, FrozenLake's 0.33 lost.
    assert 0.33 < AUTO_OFF_BELOW < AUTO_ON_ABOVE < 1.16


def test_hysteresis_transitions_without_smoothing():
    observed = [1.2, 0.6, 0.4, 0.6, 0.79, 0.8, math.nan, 0.3, 0.5]
    signal, on, states = None, True, []
    for value in observed:
        signal, on = auto_switch(value, signal, on, on_above=0.8, off_below=0.5, smoothing=0.0)
        states.append(on)
    # on; 0.6 stays on (>= 0.5); 0.4 turns off; 0.6 and 0.79 stay off (< 0.8); 0.8 turns on; NaN changes nothing;
    # 0.3 turns off; 0.5 stays off
    assert states == [True, True, False, False, False, True, True, False, False]
    assert signal == 0.5


def test_smoothing_is_an_exponential_moving_average():
    signal, on = auto_switch(0.2, None, True, smoothing=0.5)
    assert (signal, on) == (0.2, False)  # the first observation sets the signal: below 0.5, off
    signal, on = auto_switch(1.0, signal, on, smoothing=0.5)
    assert signal == pytest.approx(0.6) and on is False  # 0.5 * 0.2 + 0.5 * 1.0, inside the band
    signal, on = auto_switch(1.6, signal, on, smoothing=0.5)
    assert signal == pytest.approx(1.1) and on is True
    assert auto_switch(math.nan, None, False) == (None, False)  # no variance anywhere: no information


def test_auto_kept_sets_on_a_constructed_sequence():
    # Std/Mean of the group stds is that of the amplitudes (a common factor 1/sqrt(3) cancels):
    #   [0, 1, 10, 0]: 1.529 (on)  [1, 1, 1, 1]: 0 (off)  [0, 1, 1, 2]: 0.707 (band)  [0, 0, 1, 2]: 1.106 (on)
    #   [1, 1, 1, 2]: 0.346 (off)
    sequence = [[0, 1, 10, 0], [1, 1, 1, 1], [0, 1, 1, 2], [0, 0, 1, 2], [0, 1, 1, 2], [1, 1, 1, 2]]
    control = KeepRateControl(top_p=0.9, auto=True, auto_smoothing=0.0)
    results = run(control, sequence, strategy="auto")
    assert [d.auto_on for d, _ in results] == [True, False, False, True, True, False]
    assert [d.auto_signal for d, _ in results] == pytest.approx(
        [1.5293, 0.0, 0.7071, 1.1055, 0.7071, 0.3464], abs=1e-4
    )
    assert [keep for _, keep in results] == [
        {2},  # variances [0, 1/3, 100/3, 0]: 100/3 >= 0.9 * 101/3 - 0.01
        {0, 1, 2, 3},  # off: every group
        {0, 1, 2, 3},  # 0.707 is inside the band: still off
        {2, 3},  # on: [0, 0, 1/3, 4/3], 4/3 < 1.49 <= 5/3
        {1, 2, 3},  # 0.707: still on; [0, 1/3, 1/3, 4/3] needs all three (5/3 < 1.79 <= 2)
        {0, 1, 2, 3},  # 0.346 < 0.5: off
    ]


def test_auto_warmup_observes_but_keeps_every_group():
    control = KeepRateControl(top_p=0.9, auto=True, auto_smoothing=0.0, warmup_steps=2)
    results = run(control, [[1, 1, 1, 2], [0, 0, 1, 2], [0, 0, 1, 2]], strategy="auto")
    assert [d.auto_on for d, _ in results] == [False, True, True]  # the switch moves during the warm-up
    assert [d.active for d, _ in results] == [False, False, True]
    assert [keep for _, keep in results] == [{0, 1, 2, 3}, {0, 1, 2, 3}, {2, 3}]


# ---------------------------------------------------------------------------------------------------------------
# Guard


@pytest.mark.parametrize(
    "fraction, groups, expected", [(0.3, 10, 3), (0.25, 4, 1), (0.01, 8, 1), (0.0, 8, 0), (1.0, 8, 8), (0.5, 3, 2)]
)
def test_min_kept_groups_is_a_ceiling_without_float_error(fraction, groups, expected):
    assert min_kept_groups(fraction, groups) == expected


@pytest.mark.parametrize(
    "amplitudes, fraction, include_zero, expected",
    [
        ([0, 1, 10, 0], 0.0, False, {2}),  # the rule alone
        ([0, 1, 10, 0], 0.5, False, {1, 2}),  # two groups: the next by variance is group 1
        ([0, 1, 10, 0], 0.75, False, {1, 2}),  # three wanted, but the zero-variance groups are not candidates
        ([0, 1, 10, 0], 0.75, True, {0, 1, 2}),  # candidates with include_zero; zero ties go to the lower index
        ([0, 1, 10, 0], 1.0, True, {0, 1, 2, 3}),
        ([3, 1, 2, 0], 0.5, False, {0, 2}),  # the rule keeps 0 and 2 (threshold 4.19 <= 3 + 4/3): nothing to add
        ([0.01, 0.02, 0, 0], 0.0, False, set()),  # threshold 0.9 * 1.7e-4 - 0.01 < 0: the linear rule keeps none
        ([0.01, 0.02, 0, 0], 0.25, False, {1}),  # ... the guard keeps the highest-variance group
        ([0, 0, 0, 0], 1.0, False, set()),  # no variance anywhere: still an empty step
    ],
)
def test_guard_kept_sets(amplitudes, fraction, include_zero, expected):
    decision = FilterDecision(active=True, top_p=0.9)
    scores = group_reward_scores(rewards_for(amplitudes), G)
    keep, added = select_under(
        decision, scores, min_kept_fraction=fraction, include_zero=include_zero, selection_eps=0.01
    )
    assert kept(keep) == expected
    unguarded, _ = select_under(decision, scores, include_zero=include_zero, selection_eps=0.01)
    assert added == len(expected) - len(kept(unguarded))
    assert kept(unguarded) <= kept(keep)


def test_guard_follows_a_keep_smallest_ranking():
    scores = torch.tensor([4.0, 1.0, 9.0, 0.0, 2.0])
    keep = torch.tensor([False, True, False, False, False])
    # ascending ranking among the candidates (0 excluded): 1 (kept), 2.0, 4.0, 9.0
    assert kept(guard_min_kept(scores, keep, min_fraction=0.6, largest=False)) == {0, 1, 4}
    assert kept(guard_min_kept(scores, keep, min_fraction=0.6, largest=True)) == {0, 1, 2}
    # with include_zero the zero-variance group ranks first when keeping the smallest
    assert kept(guard_min_kept(scores, keep, min_fraction=0.6, largest=False, include_zero=True)) == {1, 3, 4}


def test_guard_errors_name_the_argument():
    with pytest.raises(ValueError, match="min_fraction must be in \\[0, 1\\], got 1.5"):
        guard_min_kept(torch.ones(2), torch.ones(2, dtype=torch.bool), min_fraction=1.5)
    with pytest.raises(ValueError, match="keep must have shape \\(2,\\)"):
        guard_min_kept(torch.ones(2), torch.ones(3, dtype=torch.bool), min_fraction=0.5)


def test_an_inactive_decision_keeps_every_group_and_ignores_the_rule():
    scores = group_reward_scores(rewards_for([0, 0, 0, 0]), G)
    keep, added = select_under(FilterDecision(active=False, top_p=1.0), scores, strategy="min_p", min_p=0.5)
    assert kept(keep) == {0, 1, 2, 3} and added == 0
