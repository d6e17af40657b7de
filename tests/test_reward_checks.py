"""Trainer-side errors that name the field, the value and the fix: reward functions that raise, inf and NaN
rewards, dataset rows (seed type, unknown env_config keys) and RolloutConfig fields."""

from __future__ import annotations

import functools
import logging
import math
import re

import pytest
import torch

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.agents.rollout import EpisodeSpec, RolloutConfig
from trl_ragen2.filtering.reward_checks import (
    RewardFunctionError,
    check_finite_rewards,
    empty_patience_message,
    empty_step_cause,
    reward_function_error,
)
from trl_ragen2.models.tiny import make_tiny_model
from trl_ragen2_envs import make_env

from .scripted import AMPLITUDES, dataset, parity_reward_for, script_generation, snapshot, tiny_trainer_args


# ---------------------------------------------------------------------------------------------------------------
# Which reward function raised


def good_reward(completions, **kwargs):
    return [1.0] * len(completions)


def failing_reward(completions, **kwargs):
    return [1.0 / 0 for _ in completions]


async def failing_async_reward(completions, **kwargs):
    raise KeyError("answer")


class FailingCallable:
    def __call__(self, completions, **kwargs):
        raise ValueError("bad row")


class Scorer:
    def score(self, completions, **kwargs):
        raise RuntimeError("scorer down")


def raised_by(func, *args, **kwargs) -> BaseException:
    try:
        func(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 -- the test inspects whatever was raised
        return error
    raise AssertionError("expected an exception")


@pytest.mark.parametrize(
    "func, name, error_type",
    [
        (failing_reward, "failing_reward", "ZeroDivisionError"),
        (functools.partial(failing_reward, extra=1), "partial_reward", "ZeroDivisionError"),
        (FailingCallable(), "FailingCallable", "ValueError"),
        (Scorer().score, "score", "RuntimeError"),
    ],
    ids=["function", "partial", "callable-object", "bound-method"],
)
def test_the_reward_function_that_raised_is_named(func, name, error_type):
    error = raised_by(lambda: func(completions=["a"]))  # called from elsewhere, as the trainer calls it
    named = reward_function_error(error, [good_reward, func], ["good_reward", name])
    assert isinstance(named, RewardFunctionError)
    assert str(named).startswith(f"reward function {name!r} (reward_funcs[1]) raised {error_type}: ")
    assert "return None for a completion it cannot score" in str(named)


def test_an_async_reward_function_is_named_from_its_coroutine_frame():
    import asyncio

    error = raised_by(asyncio.run, failing_async_reward(completions=["a"]))
    named = reward_function_error(error, [failing_async_reward], ["failing_async_reward"])
    assert "'failing_async_reward' (reward_funcs[0]) raised KeyError: 'answer'" in str(named)


def test_an_error_raised_elsewhere_is_not_attributed_to_a_reward_function():
    error = raised_by(lambda: 1 / 0)
    assert reward_function_error(error, [good_reward, failing_reward], ["good_reward", "failing_reward"]) is None


def test_a_long_original_message_is_cut():
    error = raised_by(FailingCallable(), completions=[])
    error.args = ("y" * 10_000,)
    named = reward_function_error(error, [FailingCallable()], ["FailingCallable"])
    assert "yyy..." in str(named) and len(str(named)) < 1000


# ---------------------------------------------------------------------------------------------------------------
# inf and NaN rewards


def test_infinite_rewards_are_rejected_naming_function_rollout_and_value():
    rewards = torch.tensor([[0.0, 1.0], [math.nan, -math.inf], [0.5, math.inf]])
    with pytest.raises(ValueError, match=r"'length' \(reward_funcs\[1\]\) returned -inf for rollout 1 .*2 infinite"):
        check_finite_rewards(rewards, ["accuracy", "length"])
    check_finite_rewards(torch.tensor([[0.0, math.nan], [math.nan, math.nan]]), ["accuracy", "length"])  # NaN ok


# The filter's selection at the config defaults, as the trainer passes it to empty_step_cause
DEFAULT_SELECTION = dict(top_p=0.9, selection_eps=0.01, selection_eps_mode="relative")
RAGEN_SELECTION = dict(top_p=0.9, selection_eps=0.01, selection_eps_mode="absolute")


def test_empty_step_cause_names_zero_variance_and_its_fix():
    cause = empty_step_cause(torch.tensor([1.0] * 4 + [0.0] * 4), 4, **DEFAULT_SELECTION)
    assert cause.kind == "zero_variance"
    assert cause.text == (
        "every group has zero reward variance: in each of the 2 groups the scored rollouts earned the same reward "
        "(rewards from 0 to 1), so there is no learning signal"
    )
    assert "(every reward was 0)" in empty_step_cause(torch.zeros(8), 4, **DEFAULT_SELECTION).text
    message = empty_patience_message(3, 7, cause)
    assert message.startswith("SNR filter kept no prompt group for 3 consecutive steps: every group has zero reward")
    assert "Training stops at step 7" in message and "higher temperature" in message
    assert "reward_variance_selection_eps" not in message  # the margin is not the cause
    # a variance inside the zero tolerance (1e-10) counts as none, and the message says so
    tiny = empty_step_cause(torch.tensor([0.0, 1e-5, 0.0, 1e-5]), 4, **DEFAULT_SELECTION)
    assert (
        tiny.kind == "zero_variance" and "largest group variance, 3.33e-11, is within the zero tolerance" in tiny.text
    )


def test_empty_step_cause_names_variance_below_the_margin_with_its_numbers():
    # Four groups [0, 0.004], G = 2: each has sample variance 0.004**2 / 2 = 8e-6 (std 0.0028), sum 3.2e-5.
    # RAGEN's absolute margin: threshold 0.9 * 3.2e-5 - 0.01 = -0.0099712 <= 0, so nothing is kept.
    rewards = torch.tensor([0.0, 0.004] * 4)
    cause = empty_step_cause(rewards, 2, **RAGEN_SELECTION)
    assert cause.kind == "below_margin"
    assert cause.text == (
        "4 of 4 groups have reward variance, but their summed reward variance 3.2e-05 is below the selection "
        "margin: the linear top-p threshold rho * sum - margin = 0.9 * 3.2e-05 - 0.01 = -0.00997 is <= 0, and then "
        "the linear rule keeps no group (margin: reward_variance_selection_eps=0.01 in score units, "
        "reward_variance_selection_eps_mode='absolute')"
    )
    assert cause.fix.startswith("Set reward_variance_selection_eps_mode='relative'")
    assert "lower reward_variance_selection_eps below 0.9 * 3.2e-05 = 2.88e-05, or scale the rewards up" in cause.fix
    message = empty_patience_message(5, 5, cause)
    assert "every group" not in message and "earned the same reward" not in message
    # the threshold is over the rule's metric: with "std" the sum is 4 * 0.004 / sqrt(2) = 0.0113 and the threshold
    # 0.9 * 0.0113 - 0.01 = 0.0002 > 0, so the margin is not what emptied such a step
    assert empty_step_cause(rewards, 2, metric="std", **RAGEN_SELECTION).kind == "selection"
    # a relative margin at or above rho (select_groups allows it, the config does not)
    cause = empty_step_cause(rewards, 2, top_p=0.5, selection_eps=0.5, selection_eps_mode="relative")
    assert cause.kind == "below_margin" and "0.5 * 3.2e-05 - 1.6e-05 = 0 is <= 0" in cause.text
    assert cause.fix == "Lower reward_variance_selection_eps below reward_variance_top_p=0.5"


def test_empty_step_cause_names_nan_and_inf_rewards():
    nan, inf = math.nan, math.inf
    cause = empty_step_cause(torch.full((8,), nan), 4, **DEFAULT_SELECTION)
    assert cause.kind == "nan" and cause.text.startswith("every reward of the batch was NaN (8 rollouts)")
    assert "return a finite number (not None, NaN or inf) for every completion" in cause.fix
    message = empty_patience_message(3, 7, cause)
    assert "3 consecutive steps: every reward of the batch was NaN" in message and "temperature" not in message
    # inf is named as inf, not as NaN
    cause = empty_step_cause(torch.tensor([inf, -inf, nan, nan]), 4, **DEFAULT_SELECTION)
    assert (
        cause.kind == "nan"
        and cause.text == "no reward of the batch was finite (2 of 4 rewards were NaN and 2 were inf)"
    )
    # one scored rollout per group: no group has a variance to measure
    cause = empty_step_cause(torch.tensor([1.0, nan, nan, nan, nan, 5.0, inf, nan]), 4, **DEFAULT_SELECTION)
    assert cause.kind == "nan"
    assert cause.text == (
        "5 of 8 rewards were NaN and 1 was inf, so no group had two scored rollouts to compare (a group's variance "
        "needs two)"
    )
    # some rewards unscored, the scored ones equal within each group: both are named
    cause = empty_step_cause(torch.tensor([1.0, 1.0, nan, 1.0, 2.0, inf, 2.0, 2.0]), 4, **DEFAULT_SELECTION)
    assert cause.kind == "zero_variance"
    assert cause.text.startswith("1 of 8 rewards was NaN and 1 was inf (ignored within their groups); besides them, ")
    assert cause.fix.startswith("Check why the reward functions leave some completions without a finite reward")


# ---------------------------------------------------------------------------------------------------------------
# The same errors from a training run


def tiny_trainer(tmp_path, tokenizer, reward_funcs, **args):
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=reward_funcs,
        args=tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, **args),
        train_dataset=dataset(AMPLITUDES),
        processing_class=tokenizer,
    )
    return script_generation(trainer)


def test_training_names_the_reward_function_that_raised(tmp_path, tiny_tokenizer):
    trainer = tiny_trainer(tmp_path, tiny_tokenizer, [parity_reward_for(AMPLITUDES), failing_reward])
    with pytest.raises(
        RewardFunctionError, match=r"'failing_reward' \(reward_funcs\[1\]\) raised ZeroDivisionError"
    ) as caught:
        trainer.train()
    assert isinstance(caught.value.__cause__, ZeroDivisionError)  # the original is kept as the cause


def test_training_rejects_an_infinite_reward(tmp_path, tiny_tokenizer):
    def overflowing_reward(completions, **kwargs):
        return [math.inf if i == 5 else 0.0 for i in range(len(completions))]

    trainer = tiny_trainer(tmp_path, tiny_tokenizer, overflowing_reward)
    with pytest.raises(ValueError, match=r"'overflowing_reward' \(reward_funcs\[0\]\) returned inf for rollout 5"):
        trainer.train()


def test_training_stopped_by_all_nan_rewards_names_nan(tmp_path, tiny_tokenizer, caplog):
    def unscored(completions, **kwargs):
        return [None] * len(completions)

    trainer = tiny_trainer(tmp_path, tiny_tokenizer, unscored, max_steps=3, reward_variance_empty_patience=1)
    with caplog.at_level(logging.WARNING, logger="trl_ragen2.grpo.grpo_trainer"):
        trainer.train()
    assert trainer.state.global_step == 1
    assert "every reward of the batch was NaN (16 rollouts)" in caplog.text
    assert "earned the same reward" not in caplog.text


# Rewards with a std of about 0.002: [0, a, 0, a] in every group has sample std a / sqrt(3) = 0.00202 (variance
# 4.08e-6, summed over the 4 groups 1.63e-5), far below RAGEN's absolute margin 0.01 / 0.9 = 0.011.
SMALL_AMPLITUDE = 0.0035


def test_rewards_with_a_std_of_0_002_train_at_the_default_settings(tmp_path, tiny_tokenizer):
    small = dict.fromkeys(AMPLITUDES, SMALL_AMPLITUDE)
    trainer = tiny_trainer(tmp_path, tiny_tokenizer, parity_reward_for(small), max_steps=6)
    before = snapshot(trainer.model)
    trainer.train()
    after = snapshot(trainer.model)
    assert trainer.args.reward_variance_filtering == "top_p" and trainer.args.reward_variance_selection_eps == 0.01
    assert trainer.state.global_step == 6, "past the default empty-step patience of 5"
    assert any(not torch.equal(before[name], after[name]) for name in before), "the parameters must change"
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert [log["ragen2/filter/kept_groups"] for log in logs] == [4.0] * 6
    assert trainer.filter_state.empty_steps == 0


def test_a_run_stopped_by_ragens_absolute_margin_names_the_margin(tmp_path, tiny_tokenizer, caplog):
    small = dict.fromkeys(AMPLITUDES, SMALL_AMPLITUDE)
    trainer = tiny_trainer(
        tmp_path,
        tiny_tokenizer,
        parity_reward_for(small),
        max_steps=3,
        reward_variance_selection_eps_mode="absolute",  # the paper configs' setting
        reward_variance_empty_patience=1,
    )
    before = snapshot(trainer.model)
    with caplog.at_level(logging.WARNING, logger="trl_ragen2.grpo.grpo_trainer"):
        trainer.train()
    assert trainer.state.global_step == 1
    assert all(torch.equal(before[name], param) for name, param in snapshot(trainer.model).items())
    assert "4 of 4 groups have reward variance, but their summed reward variance 1.63e-05 is below" in caplog.text
    assert "reward_variance_selection_eps=0.01 in score units" in caplog.text
    assert "Set reward_variance_selection_eps_mode='relative'" in caplog.text
    assert "earned the same reward" not in caplog.text
    assert trainer.state.log_history[0]["ragen2/filter/zero_variance_groups"] == 0


# ---------------------------------------------------------------------------------------------------------------
# Dataset rows and RolloutConfig


@pytest.mark.parametrize(
    "seed, shown", [("abc", "'abc' (str)"), (2.5, "2.5 (float)"), (-1, "-1 (int)"), (True, "True (bool)")]
)
def test_a_bad_seed_column_names_the_column_value_and_type(seed, shown):
    with pytest.raises(
        ValueError, match=re.escape(f"seed must be an integer >= 0, got {shown}") + ".*seed column.*cast_column"
    ):
        EpisodeSpec.from_row({"env": "sokoban", "seed": seed})


def test_unknown_env_config_keys_are_listed_with_the_valid_ones():
    message = r"SokobanEnv does not take 'boxes', 'sise' .*its keywords are dim_room, .*num_boxes.*fix their spelling"
    with pytest.raises(TypeError, match=message):
        make_env("sokoban", sise=6, boxes=2)
    spec = EpisodeSpec.from_row({"env": "sokoban", "seed": 0, "env_config": '{"sise": 6, "boxes": 2}'})
    with pytest.raises(TypeError, match=message):
        make_env(spec.env, **spec.env_config)  # what the rollout does with a row


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("max_turns", 0, "max_turns must be an integer >= 1, got 0 (int)"),
        ("max_turns", 2.5, "max_turns must be an integer >= 1, got 2.5 (float)"),
        ("max_turns", True, "max_turns must be an integer >= 1, got True (bool)"),
        ("max_actions_per_turn", "2", "max_actions_per_turn must be an integer >= 1, got '2' (str)"),
        ("max_tokens_per_turn", -5, "max_tokens_per_turn must be an integer >= 1, got -5"),
        (
            "max_actions_per_episode",
            0,
            "max_actions_per_episode must be an integer >= 1 or None (RAGEN's default), got 0",
        ),
        (
            "prompt_max_tokens",
            1.0,
            "prompt_max_tokens must be an integer >= 1 or None (RAGEN's default), got 1.0 (float)",
        ),
        ("max_completion_tokens", 0, "max_completion_tokens must be an integer >= 1 or None (RAGEN's default), got 0"),
        ("format_penalty", math.nan, "format_penalty must be a finite number, got nan"),
        ("format_penalty", "-0.1", "format_penalty must be a finite number, got '-0.1'"),
        ("think_prefix", None, "think_prefix must be text, got None"),
        ("eval_temperature", 0.0, "eval_temperature must be a positive number or None, got 0.0"),
        ("eval_temperature", math.inf, "eval_temperature must be a positive number or None, got inf"),
    ],
)
def test_rollout_config_validates_every_field_when_built(field, value, expected):
    with pytest.raises(ValueError, match="^" + re.escape(f"RolloutConfig.{expected}")):
        RolloutConfig(**{field: value})


def test_rollout_config_accepts_ragen_values():
    config = RolloutConfig(max_turns=9, max_actions_per_turn=1, max_actions_per_episode=9, prompt_max_tokens=200,
                           max_completion_tokens=4096, format_penalty=0, think_prefix="", eval_temperature=0.5)  # fmt: skip
    assert (config.max_turns, config.format_penalty, config.eval_temperature) == (9, 0, 0.5)
