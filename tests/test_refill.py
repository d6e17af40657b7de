"""Dynamic sampling (`reward_variance_refill`): the selection over the pool, the prompt stream, and the trainer.

The pool rules are checked against hand-computed choices; the prompt stream against the order a plain pass over the
dataloader gives; the trainer's step against plain `GRPOTrainer`'s gradient on the kept groups alone, and a resumed
run against an uninterrupted one.
"""

from collections import Counter

import pytest
import torch

from trl_ragen2 import SNRFilteredGRPOTrainer
from trl_ragen2.filtering.prompt_stream import PromptStream
from trl_ragen2.filtering.refill import rows_in_pool_order, select_from_pool, share_of_rows
from trl_ragen2.runs.samples import read_samples

from .exact_runs import EXACT, LOSS_TYPES, loss_settings, make_trainer, plain_gradient_on
from .exactness import assert_same_gradient, record_gradients
from .ppo_helpers import ppo_trainer, record_critic_rows
from .scripted import parity_reward_for, record_loss_rows, scripted_trainer, snapshot


# ---------------------------------------------------------------------------------------------------------------
# The selection over the pool


def group_rewards(*per_group):
    """Rewards of groups of 2, one pair per argument."""
    return torch.tensor([r for pair in per_group for r in pair], dtype=torch.float32)


def test_nonzero_variance_keeps_the_first_varying_groups_in_generation_order():
    rewards = group_rewards((1, 1), (0, 1), (0, 0), (0, 5), (1, 0))  # variances 0, .5, 0, 12.5, .5
    every = torch.ones(5, dtype=torch.bool)
    keep = select_from_pool(rewards, 2, every, refill="nonzero_variance", target=2)
    assert keep.tolist() == [False, True, False, True, False]  # in order, not by size
    keep = select_from_pool(rewards, 2, every, refill="nonzero_variance", target=10)
    assert keep.tolist() == [False, True, False, True, True]  # short of the target: every varying group


def test_pooled_keeps_the_rules_groups_highest_score_first_up_to_the_target():
    rewards = group_rewards((0, 1), (0, 5), (1, 0), (0, 0), (0, 3))  # variances .5, 12.5, .5, 0, 4.5
    rule = torch.tensor([True, True, True, False, True])
    keep = select_from_pool(rewards, 2, rule, refill="pooled", target=3)
    assert keep.tolist() == [True, True, False, False, True]  # 12.5, 4.5, then the first of the two .5 ties
    rule_without_best = torch.tensor([True, False, True, False, False])
    keep = select_from_pool(rewards, 2, rule_without_best, refill="pooled", target=3)
    assert keep.tolist() == [True, False, True, False, False]  # never a group the rule did not keep


def test_unscored_groups_never_count_as_varying():
    rewards = torch.tensor([float("nan"), float("nan"), 0.0, 1.0])
    keep = select_from_pool(rewards, 2, torch.ones(2, dtype=torch.bool), refill="nonzero_variance", target=2)
    assert keep.tolist() == [False, True]


def test_pool_order_and_shares():
    # 2 processes x 2 rounds x 3 rows: gathered p0r0 (0-2), p0r1 (3-5), p1r0 (6-8), p1r1 (9-11)
    assert rows_in_pool_order(2, 2, 3).tolist() == [0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11]
    kept = torch.tensor([4, 5, 6, 7, 9])
    assert [share_of_rows(kept, 2, p).tolist() for p in (0, 1)] == [[4, 5, 6], [7, 9]]


# ---------------------------------------------------------------------------------------------------------------
# The prompt stream


class SlotLoader:
    """A dataloader stand-in: `passes` of `slots` generation batches, each yielded `size` times; pass k's batches
    are `(k, 0), (k, 1), ...` (a new shuffle per pass, as TRL's RepeatSampler gives)."""

    def __init__(self, slots, size):
        self.slots, self.size, self.passes = slots, size, 0

    def __len__(self):
        return self.slots * self.size

    def __iter__(self):
        self.passes += 1
        return iter([(self.passes - 1, s) for s in range(self.slots) for _ in range(self.size)])


def test_the_trainer_sees_every_batch_refill_did_not_take_in_order_across_passes():
    stream = PromptStream(SlotLoader(slots=3, size=2), slot_size=2)
    pulled = [next(stream)]  # the trainer starts slot 0
    drawn = [stream.draw(), stream.draw()]  # refill takes slots 1 and 2
    pulled += [next(stream) for _ in range(5)]  # its repeat of slot 0, then the next pass
    assert drawn == [(0, 1), (0, 2)]
    assert pulled == [(0, 0), (0, 0), (1, 0), (1, 0), (1, 1), (1, 1)]
    assert stream.slots_started() == 5  # 3 slots of pass 0 and 2 of pass 1 were begun


def test_a_restored_stream_continues_exactly():
    def run(stream, actions):
        return [stream.draw() if action == "draw" else next(stream) for action in actions]

    actions = ["next", "draw", "next", "next", "draw", "draw", "next", "next", "next", "draw", "next"]
    uninterrupted = run(PromptStream(SlotLoader(slots=3, size=2), 2), actions)
    first = PromptStream(SlotLoader(slots=3, size=2), 2)
    head = run(first, actions[:5])
    resumed = PromptStream(SlotLoader(slots=3, size=2), 2)
    resumed.restore(first.state())
    assert head + run(resumed, actions[5:]) == uninterrupted


def test_a_loader_of_partial_generation_batches_is_refused():
    with pytest.raises(ValueError, match="not a multiple of the 2 pulls"):
        PromptStream(SlotLoader(slots=3, size=1), slot_size=2)


# ---------------------------------------------------------------------------------------------------------------
# The trainer

# Two generation batches of 2 groups each, in this order (no shuffle): round 1 keeps only "P2:" (amplitude 10),
# round 2 adds "P1:" (amplitude 1); the zero-amplitude groups never vary.
PROMPTS = ["P0:", "P2:", "P3:", "P1:", "P0:", "P3:", "P2:", "P1:"]
REFILL = dict(per_device_train_batch_size=8, shuffle_dataset=False, reward_variance_refill="nonzero_variance",
              mi_diagnostics=False)  # fmt: skip


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_a_refilled_step_equals_plain_grpo_on_the_kept_groups_of_both_rounds(tmp_path, tiny_tokenizer, loss_type):
    settings = loss_settings(loss_type, 0.05)
    trainer = scripted_trainer(tmp_path / "refill", tiny_tokenizer, prompts=PROMPTS, **REFILL, **EXACT, **settings)
    grads = record_gradients(trainer)
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["ragen2/filter/generation_rounds"] == 2 and log["ragen2/filter/kept_rows"] == 8
    reference = plain_gradient_on(tmp_path, tiny_tokenizer, ["P2:", "P1:"], **settings)
    assert_same_gradient(grads.steps[0], reference)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "vespo"])
def test_rounds_of_different_widths_are_padded_to_one_batch(tmp_path, tiny_tokenizer, loss_type):
    long = "P1: a prompt much longer than the others:"
    amplitudes = {"P0:": 0.0, "P2:": 10.0, "P3:": 0.0, long: 1.0}
    settings = loss_settings(loss_type, 0.05)
    trainer = make_trainer(tmp_path / "refill", tiny_tokenizer, SNRFilteredGRPOTrainer, ["P0:", "P2:", "P3:", long],
                           reward_funcs=parity_reward_for(amplitudes), **REFILL, **EXACT, **settings)  # fmt: skip
    grads = record_gradients(trainer)
    trainer.train()
    assert trainer.state.log_history[0]["ragen2/filter/generation_rounds"] == 2
    reference = plain_gradient_on(tmp_path, tiny_tokenizer, ["P2:", long], parity_reward_for(amplitudes), **settings)
    assert_same_gradient(grads.steps[0], reference)


def test_refill_draws_the_next_prompts_in_order_and_the_trainer_continues_after_them(tmp_path, tiny_tokenizer):
    trainer = scripted_trainer(tmp_path, tiny_tokenizer, prompts=PROMPTS, max_steps=2, **REFILL)
    trained = record_loss_rows(trainer)
    trainer.train()
    # step 1: P2 (round 1) + P1 (round 2); step 2: round 3 (P0, P3) keeps nothing, round 4 keeps P2 and P1
    assert [sorted(set(call)) for call in trained] == [["P1:", "P2:"], ["P1:", "P2:"]]
    logs = trainer.state.log_history[:2]
    assert [log["ragen2/filter/generation_rounds"] for log in logs] == [2, 2]
    assert [log["ragen2/filter/prompts_consumed"] for log in logs] == [4, 8]
    assert [log["ragen2/filter/groups_generated_per_kept"] for log in logs] == [2, 2]


def test_the_round_limit_with_a_target_out_of_reach(tmp_path, tiny_tokenizer):
    prompts = ["P2:", "P0:", "P0:", "P3:", "P3:", "P0:"]  # rounds of 2 groups: only the first round's P2 varies
    results = {}
    for at_limit in ("train", "skip"):
        trainer = scripted_trainer(tmp_path / at_limit, tiny_tokenizer, prompts=prompts,
                                   **REFILL, reward_variance_refill_max_rounds=3,
                                   reward_variance_refill_at_limit=at_limit, reward_variance_empty_patience=0,
                                   **EXACT)  # fmt: skip
        before = snapshot(trainer.model)
        grads = record_gradients(trainer)
        trainer.train()
        log = trainer.state.log_history[0]
        moved = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
        results[at_limit] = (log["ragen2/filter/generation_rounds"], log["ragen2/filter/kept_rows"], moved)
        if at_limit == "train":  # what was kept trains exactly: plain GRPOTrainer's step on P2's group alone
            assert_same_gradient(grads.steps[0], plain_gradient_on(tmp_path, tiny_tokenizer, ["P2:"]))
    assert results == {"train": (3, 4, True), "skip": (3, 0, False)}


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_a_refilled_step_over_several_micro_steps_equals_plain_grpo(tmp_path, tiny_tokenizer, loss_type):
    """The 8 kept rows of two rounds over 4 micro-steps of 2 rows (GA = 4): the step is still plain GRPO's."""
    settings = loss_settings(loss_type, 0.05)
    trainer = scripted_trainer(tmp_path / "refill", tiny_tokenizer, prompts=PROMPTS,
                               **{**REFILL, "per_device_train_batch_size": 2}, gradient_accumulation_steps=4,
                               **EXACT, **settings)  # fmt: skip
    grads = record_gradients(trainer)
    trainer.train()
    assert trainer.state.log_history[0]["ragen2/filter/kept_rows"] == 8
    assert_same_gradient(grads.steps[0], plain_gradient_on(tmp_path, tiny_tokenizer, ["P2:", "P1:"], **settings))


def test_a_resumed_run_draws_and_trains_what_the_uninterrupted_run_does(tmp_path, tiny_tokenizer):
    """Shuffled prompts, 4 steps of 2-3 rounds: the stream crosses a pass of the sampler; resume from step 2."""
    settings = dict(REFILL, shuffle_dataset=True, max_steps=4, save_strategy="steps", save_steps=1,
                    reward_variance_refill_max_rounds=3, **EXACT)  # fmt: skip
    full = scripted_trainer(tmp_path / "full", tiny_tokenizer, prompts=PROMPTS, **settings)
    full_rows = record_loss_rows(full)
    full.train()
    resumed = scripted_trainer(tmp_path / "full", tiny_tokenizer, prompts=PROMPTS, **settings)
    resumed_rows = record_loss_rows(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-2"))

    def consumed(trainer):
        return [log["ragen2/filter/prompts_consumed"] for log in trainer.state.log_history if "loss" in log]

    assert consumed(full) == consumed(resumed)  # the resumed history holds steps 1-2
    assert consumed(full)[-1] > len(PROMPTS)  # past the first pass
    assert full_rows[2:] == resumed_rows
    for name, param in full.model.named_parameters():
        torch.testing.assert_close(param, dict(resumed.model.named_parameters())[name], rtol=0, atol=0)


def test_ppo_refill_trains_actor_and_critic_on_the_kept_groups_of_every_round(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, prompts=PROMPTS, **REFILL)
    actor_rows, critic_rows = record_loss_rows(trainer), record_critic_rows(trainer)
    trainer.train()
    assert [Counter(call) for call in actor_rows] == [Counter({"P2:": 4, "P1:": 4})]
    assert [Counter(call) for call in critic_rows] == [Counter({"P2:": 4, "P1:": 4})]
    log = trainer.state.log_history[0]
    assert log["ragen2/filter/generation_rounds"] == 2
    # Every token's return is its row's own reward (gamma = lambda = 1): completions of 2-5 tokens, the odd ones paid
    # 10 in P2's group (round 1) and 1 in P1's (round 2); the mean is over the 28 model tokens.
    assert log["ragen2/ppo/returns/min"] == 0.0 and log["ragen2/ppo/returns/max"] == 10.0
    assert log["ragen2/ppo/returns/mean"] == pytest.approx((3 * 10 + 5 * 10 + 3 * 1 + 5 * 1) / 28)


def test_the_sample_log_shows_the_first_round_and_counts_the_rounds(tmp_path, tiny_tokenizer):
    trainer = scripted_trainer(tmp_path, tiny_tokenizer, prompts=PROMPTS, sample_log_every_n_steps=1, **REFILL)
    trainer.train()
    (record,), _ = read_samples(tmp_path / "out" / "samples.jsonl")
    assert record["generation_rounds"] == 2 and record["refill_kept_groups"] == 2
    assert record["num_groups"] == 2  # the first round's groups, P0 and P2: P2 kept, P0 not
    assert sorted((g["prompt"], g["kept"]) for g in record["groups"]) == [("P0:", False), ("P2:", True)]


def test_with_several_optimizer_steps_per_generation_refill_takes_the_next_unstarted_batch(tmp_path, tiny_tokenizer):
    """steps_per_generation = 2, GA = 1: the Trainer pulls one repeat of a generation batch per optimizer step, so a
    refill reads past the repeat it has not pulled yet; every prompt is still drawn once, in order."""
    trainer = scripted_trainer(tmp_path, tiny_tokenizer, prompts=PROMPTS, **{**REFILL, "per_device_train_batch_size": 4},
                               gradient_accumulation_steps=1, steps_per_generation=2, max_steps=4)  # fmt: skip
    trained = record_loss_rows(trainer)
    trainer.train()
    assert [sorted(set(call)) for call in trained] == [["P1:", "P2:"]] * 4  # 8 kept rows over 2 steps, twice
    logs = [log for log in trainer.state.log_history if "ragen2/filter/generation_rounds" in log]
    assert [(log["ragen2/filter/generation_rounds"], log["ragen2/filter/prompts_consumed"]) for log in logs] == [
        (2, 4),
        (2, 8),
    ]
