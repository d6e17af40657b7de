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
from trl_ragen2.reward_checks import (
    RewardFunctionError,
    check_finite_rewards,
    empty_patience_message,
    empty_step_cause,
    reward_function_error,
)
from trl_ragen2.rollout import EpisodeSpec, RolloutConfig
from trl_ragen2.tiny import make_tiny_model
from trl_ragen2_envs import make_env

from .scripted import AMPLITUDES, dataset, parity_reward_for, script_generation, tiny_trainer_args


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


def test_empty_step_causes_name_nan():
    assert empty_step_cause(torch.full((8,), math.nan)).startswith("every reward of the batch was NaN (8 rollouts)")
    assert empty_step_cause(torch.tensor([1.0, 1.0, math.nan, 1.0])).startswith("1 of 4 rewards were NaN")
    assert empty_step_cause(torch.ones(4)) == "every group's rollouts earned the same reward"
    message = empty_patience_message(3, 7, empty_step_cause(torch.full((4,), math.nan)))
    assert "3 consecutive steps: every reward of the batch was NaN" in message and "stops at step 7" in message
    assert "return a number (not None or NaN) for every completion" in message and "temperature" not in message
    assert "higher temperature" in empty_patience_message(3, 7, "every group's rollouts earned the same reward")


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
    with caplog.at_level(logging.WARNING, logger="trl_ragen2.grpo_trainer"):
        trainer.train()
    assert trainer.state.global_step == 1
    assert "every reward of the batch was NaN (16 rollouts)" in caplog.text
    assert "earned the same reward" not in caplog.text


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
