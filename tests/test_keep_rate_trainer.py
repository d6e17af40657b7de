"""Keep-rate control in SNRFilteredGRPOTrainer: the logged `top_p` / `auto_on` follow the schedule and the switch,
the rows trained on are the kept groups', each step stays exactly plain GRPOTrainer's, and resume is exact."""

import json

import pytest
from trl import GRPOConfig, GRPOTrainer, TrlParser

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.models.tiny import make_tiny_model

from .exactness import assert_same_gradient, record_gradients
from .ppo_helpers import ppo_trainer, record_critic_rows
from .scripted import AMPLITUDES, dataset, parity_reward_for, record_loss_rows, script_generation, tiny_trainer_args


PROMPTS = list(AMPLITUDES)  # P0: .. P3:, one group each per step
# SGD, no clipping, learning rate 0: every step sees the initial weights, so each has a plain reference.
FROZEN = dict(optim="sgd", max_grad_norm=0.0, learning_rate=0.0, mi_diagnostics=False)


def make_trainer(tmp_path, tokenizer, reward_func=None, prompts=PROMPTS, trainer_cls=SNRFilteredGRPOTrainer, **args):
    config_cls = SNRFilteredGRPOConfig if trainer_cls is SNRFilteredGRPOTrainer else GRPOConfig
    trainer = trainer_cls(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=reward_func or parity_reward_for(AMPLITUDES),
        args=tiny_trainer_args(tmp_path, config_cls, **args),
        train_dataset=dataset(prompts),
        processing_class=tokenizer,
    )
    return script_generation(trainer)


def step_reward_for(sequence):
    """Step t pays `sequence[t][i] * (length % 2)` to prompt Pi: groups [0, a, 0, a] with the step's amplitudes."""

    def step_reward(prompts, completion_ids, trainer_state, **kwargs):
        amplitudes = sequence[trainer_state.global_step]
        return [amplitudes[PROMPTS.index(p)] * (len(ids) % 2) for p, ids in zip(prompts, completion_ids, strict=True)]

    return step_reward


def logged(trainer, key):
    return [log[key] for log in trainer.state.log_history if "loss" in log]


def trained_prompts(calls):
    return [sorted(set(call)) for call in calls]


def plain_gradient(tmp_path, tokenizer, prompts):
    plain = make_trainer(
        tmp_path, tokenizer, prompts=prompts, trainer_cls=GRPOTrainer, per_device_train_batch_size=4 * len(prompts),
        **{k: v for k, v in FROZEN.items() if k != "mi_diagnostics"},
    )  # fmt: skip
    grads = record_gradients(plain)
    plain.train()
    return grads.steps[0]


def test_logged_top_p_follows_the_schedule_and_each_step_is_exact(tmp_path, tiny_tokenizer):
    # Variances [0, 1/3, 100/3, 0]. Warm-up 1 step, then rho 1.0 -> 0.5 over 2 steps.
    trainer = make_trainer(
        tmp_path / "snr", tiny_tokenizer, max_steps=4, reward_variance_top_p=1.0, reward_variance_top_p_end=0.5,
        reward_variance_top_p_schedule="linear", reward_variance_schedule_steps=2, reward_variance_warmup_steps=1,
        **FROZEN,
    )  # fmt: skip
    calls = record_loss_rows(trainer)
    grads = record_gradients(trainer)
    trainer.train()
    assert logged(trainer, "ragen2/filter/active") == [0.0, 1.0, 1.0, 1.0]
    assert logged(trainer, "ragen2/filter/top_p") == pytest.approx([1.0, 1.0, 0.75, 0.5], abs=1e-12)
    # warm-up: every group; rho 1: every candidate (the two with variance); rho 0.75 (25.24 <= 100/3) and 0.5: P2
    assert logged(trainer, "ragen2/filter/kept_groups") == [4.0, 2.0, 1.0, 1.0]
    assert trained_prompts(calls) == [PROMPTS, ["P1:", "P2:"], ["P2:"], ["P2:"]]
    assert "ragen2/filter/auto_on" not in trainer.state.log_history[0]

    # Warm-up is plain GRPO on the whole batch; a filtered step is plain GRPO on its kept groups alone.
    assert_same_gradient(grads.steps[0], plain_gradient(tmp_path / "all", tiny_tokenizer, PROMPTS))
    assert_same_gradient(grads.steps[1], plain_gradient(tmp_path / "two", tiny_tokenizer, ["P1:", "P2:"]))
    assert_same_gradient(grads.steps[2], plain_gradient(tmp_path / "one", tiny_tokenizer, ["P2:"]))


# Std/Mean of the step's amplitudes: 1.529 (on), 0 (off), 0.707 (inside the 0.5-0.8 band), 1.106 (on), 0.707, 0.346
AUTO_SEQUENCE = [[0, 1, 10, 0], [1, 1, 1, 1], [0, 1, 1, 2], [0, 0, 1, 2], [0, 1, 1, 2], [1, 1, 1, 2]]


def test_auto_switch_decides_each_step_with_hysteresis(tmp_path, tiny_tokenizer):
    trainer = make_trainer(
        tmp_path, tiny_tokenizer, step_reward_for(AUTO_SEQUENCE), max_steps=6, reward_variance_filtering="auto",
        reward_variance_auto_smoothing=0.0, **FROZEN,
    )  # fmt: skip
    calls = record_loss_rows(trainer)
    trainer.train()
    assert logged(trainer, "ragen2/filter/auto_on") == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert logged(trainer, "ragen2/filter/active") == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert logged(trainer, "ragen2/filter/top_p") == [0.9, 1.0, 1.0, 0.9, 0.9, 1.0]
    assert logged(trainer, "ragen2/filter/auto_signal") == pytest.approx(
        [1.5293, 0.0, 0.7071, 1.1055, 0.7071, 0.3464], abs=1e-4
    )
    assert logged(trainer, "ragen2/filter/auto_signal") == pytest.approx(
        logged(trainer, "ragen2/filter/std_over_mean")
    )
    assert trained_prompts(calls) == [
        ["P2:"],
        PROMPTS,
        PROMPTS,
        ["P2:", "P3:"],
        ["P1:", "P2:", "P3:"],
        PROMPTS,
    ]
    assert trainer.filter_state.auto_on is False and trainer.filter_state.empty_steps == 0


def test_early_selection_before_the_reference_pass_makes_the_same_auto_decision(tmp_path, tiny_tokenizer):
    """With `rollout_field` rewards the selection is made twice per generation (before TRL's reference pass and
    after the rewards); the switch must move once. Smoothed (decay 0.5): 1.529 on, 0.765 on, 0.935 on, 0.468 off;
    moving it twice per step would turn it off at step 2 already (0.765, then 0.382)."""
    from trl_ragen2.models.tiny import tiny_model_path

    sequence = [[0, 1, 10, 0], [1, 1, 1, 1], [0, 0, 1, 2], [1, 1, 1, 1]]

    def rollout(prompts, trainer):
        amplitudes = dict(zip(PROMPTS, sequence[trainer.state.global_step], strict=True))
        tokenizer, token, seen = trainer.processing_class, trainer.processing_class.encode("x")[0], {}
        prompt_ids, completion_ids, scores = [], [], []
        for prompt in prompts:
            copy_index = seen.get(prompt, 0) % trainer.num_generations
            seen[prompt] = copy_index + 1
            prompt_ids.append(tokenizer(prompt)["input_ids"])
            completion_ids.append([token] * (copy_index + 1) + [tokenizer.eos_token_id])
            scores.append(amplitudes[prompt] * (copy_index % 2))  # [0, a, 0, a]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "score": scores}

    def score_reward(completions, score, **kwargs):
        return [float(value) for value in score]

    score_reward.rollout_field = "score"
    trainer = SNRFilteredGRPOTrainer(
        model=tiny_model_path(cache_dir=tmp_path / "models"),
        reward_funcs=score_reward,
        args=tiny_trainer_args(
            tmp_path, SNRFilteredGRPOConfig, max_steps=4, beta=0.1, reward_variance_filtering="auto", **FROZEN
        ),
        train_dataset=dataset(PROMPTS),
        processing_class=tiny_tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    assert logged(trainer, "ragen2/filter/auto_on") == [1.0, 1.0, 1.0, 0.0]
    assert logged(trainer, "ragen2/filter/kept_groups") == [1.0, 4.0, 2.0, 4.0]
    assert logged(trainer, "ragen2/filter/scoring_rows_skipped") == [12.0, 0.0, 8.0, 0.0]


def test_ppo_warmup_trains_actor_and_critic_on_every_group_then_filters(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, max_steps=2, reward_variance_warmup_steps=1)
    actor_rows, critic_rows = record_loss_rows(trainer), record_critic_rows(trainer)
    trainer.train()
    assert trained_prompts(actor_rows) == [PROMPTS, ["P2:"]]
    assert trained_prompts(critic_rows) == [PROMPTS, ["P2:"]]
    assert logged(trainer, "ragen2/filter/active") == [0.0, 1.0]


def test_guard_keeps_the_next_highest_variance_group(tmp_path, tiny_tokenizer):
    trainer = make_trainer(tmp_path, tiny_tokenizer, reward_variance_min_kept_fraction=0.5, **FROZEN)
    calls = record_loss_rows(trainer)
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["ragen2/filter/guard_added"] == 1.0 and log["ragen2/filter/kept_groups"] == 2.0
    assert trained_prompts(calls) == [["P1:", "P2:"]]  # rho 0.9 keeps P2; the guard adds P1, not a zero group


def test_resume_continues_the_schedule_and_the_switch_exactly(tmp_path, tiny_tokenizer):
    # Std/Mean 0.346, 0, 0.707, 1.106, 1.106, smoothed (decay 0.5): 0.346, 0.173, 0.440, 0.773, 0.939. The switch is
    # off until the last step. A fresh switch (on, no signal) resumed at step 3 would read 0.707 and stay on.
    sequence = [[1, 1, 1, 2], [1, 1, 1, 1], [0, 1, 1, 2], [0, 0, 1, 2], [0, 0, 1, 2]]
    settings = dict(
        reward_variance_filtering="auto", reward_variance_auto_smoothing=0.5, reward_variance_top_p_schedule="cosine",
        reward_variance_top_p_end=0.5, reward_variance_schedule_steps=4, reward_variance_warmup_steps=0,
        save_strategy="steps", save_steps=1, **FROZEN,
    )  # fmt: skip
    keys = ["ragen2/filter/auto_on", "ragen2/filter/auto_signal", "ragen2/filter/top_p", "ragen2/filter/kept_groups"]

    straight = make_trainer(tmp_path / "straight", tiny_tokenizer, step_reward_for(sequence), max_steps=5, **settings)
    straight.train()
    expected = {key: logged(straight, key) for key in keys}
    assert expected["ragen2/filter/auto_on"] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert expected["ragen2/filter/auto_signal"] == pytest.approx([0.3464, 0.1732, 0.4402, 0.7729, 0.9392], abs=1e-4)
    assert expected["ragen2/filter/top_p"] == [1.0, 1.0, 1.0, 1.0, 0.5]  # on at step 5: the cosine's end value
    assert expected["ragen2/filter/kept_groups"] == [4.0, 4.0, 4.0, 4.0, 1.0]

    card = (tmp_path / "straight" / "out" / "README.md").read_text()  # the model card, written at each save
    assert "- Keep rate: cosine from 0.9 to 0.5 over 4 steps, after 0 warm-up steps without filtering" in card
    assert "on at 0.8, off below 0.5 (smoothing 0.5); on at the end: True" in card

    checkpoint = tmp_path / "straight" / "out" / "checkpoint-2"
    saved = json.loads((checkpoint / "ragen2_filter_state.json").read_text())
    assert saved["auto_on"] is False and saved["auto_signal"] == pytest.approx(0.1732, abs=1e-4)

    resumed = make_trainer(tmp_path / "resumed", tiny_tokenizer, step_reward_for(sequence), max_steps=5, **settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 5
    # The resumed log history holds the checkpoint's two steps, then the three the resumed run made.
    assert [log["step"] for log in resumed.state.log_history if "loss" in log] == [1, 2, 3, 4, 5]
    for key in keys:
        assert logged(resumed, key) == expected[key], key


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"reward_variance_filtering": "adaptive"}, "reward_variance_filtering must be one of .*'auto'"),
        ({"reward_variance_top_p_schedule": "step"}, "reward_variance_top_p_schedule must be one of"),
        (
            {"reward_variance_top_p_schedule": "linear", "reward_variance_schedule_steps": 10},
            "reward_variance_top_p_end must be in \\(0, 1\\] with reward_variance_top_p_schedule='linear', got None",
        ),
        (
            {"reward_variance_top_p_schedule": "cosine", "reward_variance_top_p_end": 1.5},
            "reward_variance_top_p_end must be in \\(0, 1\\] .* got 1.5",
        ),
        (
            {"reward_variance_top_p_schedule": "linear", "reward_variance_top_p_end": 0.5},
            "reward_variance_schedule_steps must be >= 1 with .* got 0",
        ),
        ({"reward_variance_top_p_end": 0.5}, "reward_variance_top_p_end=0.5 has no effect with .*'constant'"),
        (
            {
                "reward_variance_filtering": "min_p",
                "reward_variance_min_p": 0.1,
                "reward_variance_top_p_end": 0.5,
                "reward_variance_top_p_schedule": "linear",
                "reward_variance_schedule_steps": 4,
            },
            "anneals reward_variance_top_p, which reward_variance_filtering='min_p' does not use",
        ),  # fmt: skip
        ({"reward_variance_warmup_steps": -1}, "reward_variance_warmup_steps must be an int >= 0 .* got -1"),
        ({"reward_variance_schedule_steps": 2.5}, "reward_variance_schedule_steps must be an integer, got 2.5"),
        (
            {"reward_variance_auto_on_above": 0.4},
            "reward_variance_auto_off_below \\(0.5\\) must be <= reward_variance_auto_on_above \\(0.4\\)",
        ),
        ({"reward_variance_auto_off_below": -0.1}, "reward_variance_auto_off_below must be a finite number >= 0"),
        ({"reward_variance_auto_smoothing": 1.0}, "reward_variance_auto_smoothing must be in \\[0, 1\\), got 1.0"),
        (
            {"reward_variance_min_kept_fraction": 1.5},
            "reward_variance_min_kept_fraction must be in \\[0, 1\\], got 1.5",
        ),
    ],
)
def test_config_validation(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, **overrides)


def test_fields_parse_from_the_command_line(tmp_path):
    argv = ["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false", "--report_to", "none"]
    argv += ["--reward_variance_filtering", "auto", "--reward_variance_top_p", "1.0"]
    argv += ["--reward_variance_top_p_schedule", "cosine", "--reward_variance_top_p_end", "0.9"]
    argv += ["--reward_variance_schedule_steps", "100", "--reward_variance_warmup_steps", "10"]
    argv += ["--reward_variance_auto_on_above", "1.0", "--reward_variance_min_kept_fraction", "0.25"]
    (args,) = TrlParser((SNRFilteredGRPOConfig,)).parse_args_and_config(argv)
    control = args.keep_rate_control()
    assert control.auto and control.schedule == "cosine" and control.top_p_end == 0.9
    assert (control.schedule_steps, control.warmup_steps, control.auto_on_above) == (100, 10, 1.0)
    assert args.reward_variance_min_kept_fraction == 0.25
