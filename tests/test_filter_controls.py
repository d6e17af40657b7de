"""The filter's control arms (`reward_variance_control`): the pure draws, the config checks and the trainer wiring."""

from collections import Counter

import pytest
import torch

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.filtering.controls import (
    apply_control,
    control_seed,
    random_matched_groups,
    skip_matched_groups,
)
from trl_ragen2.models.tiny import make_tiny_model

from .scripted import (
    AMPLITUDES,
    alternating_reward_for,
    dataset,
    record_loss_rows,
    script_generation,
    scripted_trainer,
    snapshot,
    tiny_trainer_args,
)


def test_random_matched_keeps_the_rules_count_drawn_uniformly():
    rule = torch.tensor([False, True, True, False, False, False, True, False])  # the rule keeps 3 of 8
    counts = torch.zeros(8)
    draws = set()
    for index in range(4000):
        keep = random_matched_groups(rule, seed=3, generation_index=index)
        assert keep.dtype == torch.bool and int(keep.sum()) == 3
        counts += keep.float()
        draws.add(tuple(keep.tolist()))
    # every group is drawn with probability 3/8; 4000 draws put each share within 0.03 of it (about 4 SDs)
    assert torch.all((counts / 4000 - 3 / 8).abs() < 0.03), counts / 4000
    assert len(draws) == 56  # all C(8, 3) subsets occur, not only the rule's
    assert random_matched_groups(torch.zeros(8, dtype=torch.bool), seed=3, generation_index=0).sum() == 0
    assert random_matched_groups(torch.ones(8, dtype=torch.bool), seed=3, generation_index=0).all()


def test_random_matched_draw_depends_only_on_seed_and_generation_index():
    rule = torch.tensor([True, True, False, False, False, False])
    first = random_matched_groups(rule, seed=11, generation_index=5)
    assert torch.equal(first, random_matched_groups(rule.clone(), seed=11, generation_index=5))
    assert control_seed(11, 5) != control_seed(11, 6) != control_seed(12, 5)
    others = {tuple(random_matched_groups(rule, seed=11, generation_index=i).tolist()) for i in range(40)}
    assert len(others) > 5


def test_skip_matched_keeps_everything_or_nothing():
    assert skip_matched_groups(torch.tensor([False, True, False])).tolist() == [True, True, True]
    assert skip_matched_groups(torch.tensor([False, False, False])).tolist() == [False, False, False]
    rule = torch.tensor([True, False])
    assert apply_control(rule, None, seed=0, generation_index=0) is rule
    with pytest.raises(ValueError, match="control must be one of"):
        apply_control(rule, "random", seed=0, generation_index=0)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"reward_variance_control": "random"}, "reward_variance_control must be one of"),
        ({"reward_variance_control": "skip_matched", "reward_variance_filtering": None}, "selects no groups"),
        (
            {
                "reward_variance_control": "random_matched",
                "reward_variance_filtering": "within_group",
                "reward_variance_within_group_ratio": 0.5,
            },
            "selects no groups",
        ),
    ],
)
def test_control_config_errors_name_the_field(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, **overrides)


def test_control_can_be_switched_off_as_text(tmp_path):
    args = tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, reward_variance_control="none")
    assert args.reward_variance_control is None


def filter_logs(trainer):
    return [log for log in trainer.state.log_history if "ragen2/filter/kept_groups" in log]


def test_random_matched_trains_on_as_many_groups_as_the_rule_keeps(tmp_path, tiny_tokenizer):
    # The rule (top-p 0.9) keeps only "P2:" on every batch; the control trains on one group drawn at random.
    trainer = scripted_trainer(tmp_path, tiny_tokenizer, max_steps=8, reward_variance_control="random_matched")
    calls = record_loss_rows(trainer)
    trainer.train()
    logs = filter_logs(trainer)
    assert [log["ragen2/filter/rule_kept_groups"] for log in logs] == [1.0] * 8
    assert [log["ragen2/filter/kept_groups"] for log in logs] == [1.0] * 8
    trained = [Counter(call) for call in calls]
    assert all(len(c) == 1 and sum(c.values()) == 4 for c in trained)  # one whole group of 4 rows each step
    assert {next(iter(c)) for c in trained} != {"P2:"}, "the draw ignores the rewards"


def test_skip_matched_trains_every_group_exactly_as_no_filter(tmp_path, tiny_tokenizer):
    skip = scripted_trainer(tmp_path / "skip", tiny_tokenizer, optim="sgd", reward_variance_control="skip_matched")
    calls = record_loss_rows(skip)
    skip.train()
    log = filter_logs(skip)[0]
    assert log["ragen2/filter/rule_kept_groups"] == 1 and log["ragen2/filter/kept_groups"] == 4
    assert sorted(Counter(row for call in calls for row in call).values()) == [4, 4, 4, 4]
    unfiltered = scripted_trainer(tmp_path / "none", tiny_tokenizer, optim="sgd", reward_variance_filtering=None)
    unfiltered.train()
    assert skip.state.log_history[0]["loss"] == pytest.approx(unfiltered.state.log_history[0]["loss"], rel=1e-6)
    after_skip, after_none = snapshot(skip.model), snapshot(unfiltered.model)
    for name in after_none:  # the filter's row selection reorders float sums: equal to float32 rounding
        torch.testing.assert_close(after_skip[name], after_none[name], atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize("control", ["random_matched", "skip_matched"])
def test_controls_skip_exactly_the_rules_empty_steps(tmp_path, tiny_tokenizer, control):
    # Batches 1 and 3 earn 0 everywhere (no group has variance: the rule keeps none); batches 2 and 4 pay the parity
    # reward (the rule keeps "P2:").
    alternating_reward = alternating_reward_for(AMPLITUDES)

    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=alternating_reward,
        args=tiny_trainer_args(
            tmp_path,
            SNRFilteredGRPOConfig,
            max_steps=4,
            reward_variance_empty_patience=0,
            reward_variance_control=control,
        ),
        train_dataset=dataset(AMPLITUDES),
        processing_class=tiny_tokenizer,
    )
    script_generation(trainer)
    trained = record_loss_rows(trainer)
    trainer.train()
    logs = filter_logs(trainer)
    assert [log["ragen2/filter/rule_kept_groups"] for log in logs] == [0.0, 1.0, 0.0, 1.0]
    assert [log["ragen2/filter/empty"] for log in logs] == [1.0, 0.0, 1.0, 0.0]
    expected = [0.0, 1.0, 0.0, 1.0] if control == "random_matched" else [0.0, 4.0, 0.0, 4.0]
    assert [log["ragen2/filter/kept_groups"] for log in logs] == expected
    assert trainer.filter_state.empty_steps == 2
    assert [sum(1 for _ in call) for call in trained if call] == [4 * int(n) for n in expected if n]
