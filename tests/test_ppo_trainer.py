"""SNRFilteredPPOTrainer on the tiny offline model: what reaches the actor and critic, GAE in the batch, resume."""

import copy
import logging
from collections import Counter

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForTokenClassification
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2.models.tiny import make_tiny_model, tiny_model_path
from trl_ragen2.ppo.ppo_config import SNRFilteredPPOConfig
from trl_ragen2.ppo.ppo_trainer import SNRFilteredPPOTrainer

from .ppo_helpers import make_args, ppo_trainer, record_critic_rows
from .scripted import AMPLITUDES, dataset, parity_reward_for, record_loss_rows, script_generation, snapshot


def changed(before, module):
    return [name for name, param in module.named_parameters() if not torch.equal(before[name], param)]


def test_filtered_ppo_trains_actor_and_critic_on_the_kept_groups_only(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer)
    actor_rows, critic_rows = record_loss_rows(trainer), record_critic_rows(trainer)
    actor_before, critic_before = snapshot(trainer.model), snapshot(trainer.critic)
    trainer.train()
    assert [Counter(call) for call in actor_rows] == [Counter({"P2:": 4})]
    assert [Counter(call) for call in critic_rows] == [Counter({"P2:": 4})]
    assert changed(actor_before, trainer.model), "the kept group must train the actor"
    critic_changed = changed(critic_before, trainer.critic)
    assert any("score" in name for name in critic_changed) and any("layers" in name for name in critic_changed)
    logs = trainer.state.log_history[0]
    assert logs["ragen2/filter/kept_rows"] == 4
    for key in ("value_loss", "value_clipfrac", "explained_variance", "values/mean", "critic_grad_norm"):
        assert f"ragen2/ppo/{key}" in logs
    for name in ("returns", "advantages"):
        for stat in ("mean", "std", "min", "max"):
            assert f"ragen2/ppo/{name}/{stat}" in logs
    # Kept group P2: rewards [0, 10, 0, 10] on odd-length completions, gamma = lambda = 1 -> every return is 0 or 10.
    assert logs["ragen2/ppo/returns/min"] == 0.0 and logs["ragen2/ppo/returns/max"] == 10.0


def test_critic_learns_a_constant_per_prompt_reward(tmp_path, tiny_tokenizer):
    rewards = {"P0:": 0.0, "P1:": 1.0, "P2:": 2.0, "P3:": 3.0}

    def constant_reward(prompts, **kwargs):
        return [rewards[p] for p in prompts]

    trainer = ppo_trainer(
        tmp_path,
        tiny_tokenizer,
        prompts=rewards,
        reward=constant_reward,
        reward_variance_filtering=None,  # every group has zero variance: the filter would keep none
        per_device_train_batch_size=8,  # 4 prompts x 2 rollouts
        num_generations=2,
        max_steps=30,
        learning_rate=1e-6,  # the actor barely matters: generation is scripted
        critic_learning_rate=1e-2,
        lr_scheduler_type="constant",
    )
    trainer.train()
    explained = [log["ragen2/ppo/explained_variance"] for log in trainer.state.log_history if "loss" in log]
    assert explained[0] < 0.1, "an untrained critic explains nothing"
    assert min(explained[-3:]) > 0.9
    value_losses = [log["ragen2/ppo/value_loss"] for log in trainer.state.log_history if "loss" in log]
    assert value_losses[-1] < 0.05 * value_losses[0]


def test_filter_off_actor_loss_is_trls_with_token_level_advantages(tmp_path, tiny_tokenizer, monkeypatch):
    seen = []
    trl_compute_loss = GRPOTrainer._compute_loss

    def recording(self, model, inputs):
        loss = trl_compute_loss(self, model, inputs)
        seen.append((inputs, loss.detach()))
        return loss

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", recording)
    trainer = ppo_trainer(
        tmp_path,
        tiny_tokenizer,
        reward_variance_filtering=None,
        whiten_advantages=False,
        entropy_coef=0.0,  # the loss is then the clipped surrogate alone
    )
    trainer.train()
    ((inputs, loss),) = seen
    mask = inputs["completion_mask"].float()
    advantages = inputs["advantages"]
    assert advantages.shape == inputs["completion_ids"].shape, "TRL's loss receives (B, T) advantages"
    assert len(inputs["completion_ids"]) == 16, "no row is filtered"
    assert torch.all(advantages[mask == 0] == 0)
    # on-policy (ratio 1) the clipped surrogate is -sum(A * mask) / (number of loss tokens), dapo's token mean
    expected = -(advantages * mask).sum() / inputs["num_items_in_batch"]
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert not any(key.startswith("ragen2/filter") for key in trainer.state.log_history[0])


@pytest.mark.parametrize(
    "options",
    [
        {"num_iterations": 2, "max_steps": 2, "cliprange_value": 1e-3},
        {
            "gradient_accumulation_steps": 2,
            "per_device_train_batch_size": 4,
            "steps_per_generation": 4,
            "max_steps": 2,
        },
        {"gradient_checkpointing": True},
        {"loss_type": "grpo", "gamma": 0.9, "lam": 0.95},
    ],
    ids=["num_iterations", "steps_per_generation", "gradient_checkpointing", "loss_grpo_discounted"],
)
def test_training_options(tmp_path, tiny_tokenizer, options):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, **options)
    actor_before, critic_before = snapshot(trainer.model), snapshot(trainer.critic)
    trainer.train()
    assert changed(actor_before, trainer.model) and changed(critic_before, trainer.critic)
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == options.get("max_steps", 1)
    if options.get("num_iterations") == 2:
        # the second pass over the batch starts from moved values: a tiny clip range clips them
        assert logs[0]["ragen2/ppo/value_clipfrac"] == 0.0 and logs[1]["ragen2/ppo/value_clipfrac"] > 0.5


def test_empty_filter_steps_change_neither_actor_nor_critic(tmp_path, tiny_tokenizer):
    flat = dict.fromkeys(AMPLITUDES, 0.0)  # every rollout earns 0: no group has variance
    trainer = ppo_trainer(
        tmp_path, tiny_tokenizer, reward=parity_reward_for(flat), max_steps=2, weight_decay=0.1,
        reward_variance_empty_patience=0,
    )  # fmt: skip
    actor_before, critic_before = snapshot(trainer.model), snapshot(trainer.critic)
    trainer.train()
    assert trainer.state.global_step == 2 and trainer.filter_state.empty_steps == 2
    assert not changed(actor_before, trainer.model) and not changed(critic_before, trainer.critic)
    assert not trainer.critic_optimizer.state, "the critic optimizer never took a step"


def test_resume_restores_the_critic_exactly(tmp_path, tiny_tokenizer):
    def run(max_steps, resume=None):
        trainer = ppo_trainer(tmp_path, tiny_tokenizer, max_steps=max_steps, save_strategy="steps", save_steps=1)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run(2)
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert {"model.safetensors", "config.json", "optimizer.pt", "scheduler.pt"} <= {
        p.name for p in (checkpoint / "critic").iterdir()
    }

    def assert_same_critic(a, b):
        for (name, pa), pb in zip(a.critic.named_parameters(), b.critic.parameters(), strict=True):
            torch.testing.assert_close(pa, pb, atol=0, rtol=0, msg=name)
        state_a, state_b = a.critic_optimizer.state_dict(), b.critic_optimizer.state_dict()
        assert state_a["param_groups"] == state_b["param_groups"]
        for index, moments in state_a["state"].items():
            for key, value in moments.items():
                torch.testing.assert_close(value, state_b["state"][index][key], atol=0, rtol=0)
        assert a.critic_lr_scheduler.state_dict() == b.critic_lr_scheduler.state_dict()

    # Restored at the end of step 2 with nothing left to train: weights and optimizer state as saved.
    restored = run(2, resume=str(tmp_path / "out" / "checkpoint-2"))
    assert_same_critic(full, restored)
    # Resumed after step 1 and trained step 2 again: the same critic as the uninterrupted run.
    resumed = run(2, resume=str(checkpoint))
    assert resumed.state.global_step == 2
    assert_same_critic(full, resumed)


def test_save_model_puts_the_critic_beside_the_policy_and_never_in_it(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer)
    trainer.train()
    trainer.save_model()
    policy_keys = set(trainer.model.state_dict())
    assert policy_keys == set(make_tiny_model(tiny_tokenizer).state_dict()), "no critic parameter in the policy"
    assert not any("score" in key for key in policy_keys)
    policy_params = {p.data_ptr() for p in trainer.model.parameters()}
    assert not policy_params & {p.data_ptr() for p in trainer.critic.parameters()}, "no shared storage"

    saved = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "out" / "critic"))
    for (name, a), b in zip(saved.state_dict().items(), trainer.unwrapped_critic.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    # and it reloads as the critic of a new run
    again = ppo_trainer(tmp_path / "again", tiny_tokenizer, critic_model_name_or_path=str(tmp_path / "out" / "critic"))
    for a, b in zip(again.critic.parameters(), trainer.critic.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_default_critic_starts_from_the_policy_backbone(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer)
    policy_backbone = trainer.model.model.state_dict()
    critic_backbone = trainer.unwrapped_critic.model.state_dict()
    assert policy_backbone.keys() == critic_backbone.keys()
    for key, value in policy_backbone.items():
        torch.testing.assert_close(critic_backbone[key], value, msg=key)
    assert trainer.unwrapped_critic.score.out_features == 1
    assert trainer.unwrapped_critic.dropout.p == 0.0


def test_single_rollout_per_prompt_disables_the_filter_with_a_warning(tmp_path, tiny_tokenizer, caplog):
    def prompt_reward(prompts, **kwargs):
        return [AMPLITUDES[p] for p in prompts]

    with caplog.at_level(logging.WARNING, logger="trl_ragen2.ppo.ppo_config"):
        trainer = ppo_trainer(
            tmp_path, tiny_tokenizer, reward=prompt_reward, num_generations=1, per_device_train_batch_size=4
        )
    assert "filtering is disabled" in caplog.text and "num_generations=1" in caplog.text
    assert trainer.args.reward_variance_filtering is None and trainer.num_generations == 1
    actor_before, critic_before = snapshot(trainer.model), snapshot(trainer.critic)
    trainer.train()
    assert changed(actor_before, trainer.model) and changed(critic_before, trainer.critic)
    logs = trainer.state.log_history[0]
    assert (logs["ragen2/ppo/returns/min"], logs["ragen2/ppo/returns/max"]) == (0.0, 10.0)


def test_kl_in_reward_replaces_the_kl_loss(tmp_path, tiny_tokenizer):
    model = tiny_model_path(cache_dir=tmp_path / "models")  # beta > 0 reloads the reference model by name
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, model=model, beta=0.1, kl_in_reward=True, max_steps=2)
    trainer.train()
    logs = trainer.state.log_history[1]
    assert "ragen2/ppo/kl" in logs and logs["ragen2/ppo/kl"] != 0.0  # the policy moved away from the reference
    assert "kl" not in logs, "no KL term in the loss"
    assert trainer.beta == 0.1


def rollout_with_feedback(prompts, trainer):
    """Two assistant turns around two environment-feedback tokens: [x x | fb fb | x EOS]."""
    tokenizer = trainer.processing_class
    x, feedback = tokenizer.encode(" x")[0], tokenizer.encode(" y")[0]
    prompt_ids = [tokenizer.encode(p) for p in prompts]
    completion = [x, x, feedback, feedback, x, tokenizer.eos_token_id]
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": [list(completion) for _ in prompts],
        "logprobs": None,
        "env_mask": [[1, 1, 0, 0, 1, 1] for _ in prompts],
        "turn_spans": [[(0, 2), (2, 6)] for _ in prompts],
        "turn_rewards": [[0.25, 0.75] for _ in prompts],
    }


@pytest.mark.parametrize("use_turn_rewards", [False, True])
def test_gae_skips_feedback_tokens_and_pays_turn_rewards(tmp_path, tiny_tokenizer, use_turn_rewards):
    def episode_return(prompts, **kwargs):
        return [1.0] * len(prompts)

    trainer = SNRFilteredPPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=episode_return,
        args=make_args(
            tmp_path,
            reward_variance_filtering=None,
            whiten_advantages=False,
            per_device_train_batch_size=4,
            num_generations=2,
            use_turn_rewards=use_turn_rewards,
        ),  # fmt: skip
        train_dataset=dataset(["P0:", "P1:"]),
        processing_class=tiny_tokenizer,
        rollout_func=rollout_with_feedback,
    )
    batches = []
    generate = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: batches.append(generate(inputs)) or batches[-1]
    trainer.train()
    batch = batches[0]
    assert batch["tool_mask"][0].tolist() == [1, 1, 0, 0, 1, 1]
    # gamma = lambda = 1: the return target is the reward still to come after each model token's state
    later = 0.75 if use_turn_rewards else 1.0
    expected_returns = torch.tensor([1.0, 1.0, 0.0, 0.0, later, later]).expand(4, 6)
    torch.testing.assert_close(batch["returns"], expected_returns)
    assert torch.all(batch["old_values"][:, 2:4] == 0) and torch.all(batch["advantages"][:, 2:4] == 0)
    torch.testing.assert_close(batch["advantages"], (expected_returns - batch["old_values"]) * batch["tool_mask"])


def test_lora_critic_beside_a_lora_policy(tmp_path, tiny_tokenizer):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])

    def lora_trainer():
        trainer = SNRFilteredPPOTrainer(
            model=make_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=parity_reward_for(AMPLITUDES),
            args=make_args(tmp_path, save_strategy="steps", save_steps=1),
            train_dataset=dataset(AMPLITUDES),
            processing_class=tiny_tokenizer,
            peft_config=lora,
            critic_peft_config=lora,
        )
        return script_generation(trainer)

    trainer = lora_trainer()
    assert not any("score" in key for key in trainer.model.state_dict()), "the policy's adapters hold no critic"
    trainable = [name for name, p in trainer.critic.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name or "score" in name for name in trainable)
    assert any("score" in name for name in trainable), "the new value head is trained in full"
    before = snapshot(trainer.critic)
    trainer.train()
    moved = changed(before, trainer.critic)
    assert any("lora_B" in name for name in moved) and any("score" in name for name in moved)
    assert all(name in trainable for name in moved)
    # the checkpoint holds the critic's adapters and head, and a resumed run restores them
    assert (tmp_path / "out" / "checkpoint-1" / "critic" / "adapter_model.safetensors").exists()
    resumed = lora_trainer()
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-1"))
    for (name, a), b in zip(trainer.critic.named_parameters(), resumed.critic.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)


def value_model(tokenizer, num_labels=1):
    config = copy.deepcopy(make_tiny_model(tokenizer).config)
    config.num_labels = num_labels
    return AutoModelForTokenClassification.from_config(config)


def test_evaluation_computes_values_but_trains_no_critic(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, per_device_eval_batch_size=16, eval_strategy="no")
    trainer.eval_dataset = dataset(AMPLITUDES)
    critic_rows = record_critic_rows(trainer)
    before = snapshot(trainer.critic)
    metrics = trainer.evaluate()
    assert not critic_rows and not changed(before, trainer.critic)
    assert metrics["eval_ragen2/ppo/value_loss"] > 0 and "eval_ragen2/ppo/explained_variance" in metrics
    assert metrics["eval_ragen2/ppo/returns/max"] == 10.0 and metrics["eval_ragen2/ppo/returns/min"] == 0.0
    assert trainer.filter_state.filtered_steps == 0, "evaluation is never filtered"


def test_value_model_argument(tmp_path, tiny_tokenizer):
    critic = value_model(tiny_tokenizer)
    trainer = SNRFilteredPPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward_for(AMPLITUDES),
        args=make_args(tmp_path),
        train_dataset=dataset(AMPLITUDES),
        processing_class=tiny_tokenizer,
        value_model=critic,
    )
    assert trainer.unwrapped_critic is critic


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"value_model": "labels2"}, ValueError, "num_labels=1"),
        ({"value_model": "ok", "critic_model_name_or_path": "somewhere"}, ValueError, "pass only one"),
        ({"grpo_args": True}, TypeError, "SNRFilteredPPOConfig"),
    ],
)
def test_trainer_argument_errors(tmp_path, tiny_tokenizer, kwargs, error, message):
    critic = {"labels2": 2, "ok": 1}.get(kwargs.get("value_model"))
    critic = value_model(tiny_tokenizer, critic) if critic else None
    if kwargs.get("grpo_args"):
        args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    else:
        args = make_args(tmp_path, critic_model_name_or_path=kwargs.get("critic_model_name_or_path"))
    with pytest.raises(error, match=message):
        SNRFilteredPPOTrainer(
            model=make_tiny_model(tiny_tokenizer),
            reward_funcs=parity_reward_for(AMPLITUDES),
            args=args,
            train_dataset=dataset(AMPLITUDES),
            processing_class=tiny_tokenizer,
            value_model=critic,
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"gamma": 1.5}, "gamma must be in \\[0, 1\\], got 1.5"),
        ({"lam": -0.1}, "lam must be in \\[0, 1\\], got -0.1"),
        ({"critic_learning_rate": 0.0}, "critic_learning_rate must be > 0"),
        ({"vf_coef": 0.0}, "vf_coef must be > 0"),
        ({"cliprange_value": -0.2}, "cliprange_value must be > 0 or None"),
        ({"kl_in_reward": True}, "kl_in_reward=True needs a KL coefficient, but beta=0.0"),
        ({"num_generations": 1, "per_device_train_batch_size": 1}, "num_generations=1 needs at least 2 rollouts"),
        ({"reward_variance_top_p": 1.2}, "reward_variance_top_p must be in"),  # the GRPO variant's checks run too
    ],
)
def test_config_validation(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_args(tmp_path, **overrides)


@pytest.mark.parametrize(
    "layout, group_size",
    [
        ({"per_device_train_batch_size": 4}, 2),
        ({"per_device_train_batch_size": 3, "gradient_accumulation_steps": 2}, 3),
        ({"per_device_train_batch_size": 2, "steps_per_generation": 3}, 2),
        ({"per_device_train_batch_size": 2, "generation_batch_size": 8}, 4),
        ({"per_device_train_batch_size": 4, "per_device_eval_batch_size": 3, "eval_strategy": "steps"}, 2),
    ],
)
def test_one_rollout_config_equals_the_grouped_one(tmp_path, layout, group_size):
    """With `num_generations=1`, GRPOConfig's checks run with another group size; every field they derive must be
    the one a grouped config gets (a TRL release that derives something from `num_generations` fails here)."""
    layout = {"reward_variance_filtering": None, "eval_steps": 1, **layout}
    one = make_args(tmp_path, num_generations=1, **layout)
    grouped = make_args(tmp_path, num_generations=group_size, num_generations_eval=1, **layout)
    assert (one.num_generations, one.num_generations_eval) == (1, None)
    differing = {key for key, value in one.to_dict().items() if grouped.to_dict()[key] != value}
    assert differing == {"num_generations", "num_generations_eval"}


def test_config_defaults_follow_the_paper(tmp_path, caplog):
    args = SNRFilteredPPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    assert (args.gamma, args.lam, args.critic_learning_rate, args.learning_rate) == (1.0, 1.0, 1e-5, 1e-6)
    assert (args.epsilon, args.epsilon_high, args.entropy_coef, args.beta) == (0.2, 0.28, 0.001, 0.0)
    assert args.scale_rewards == "none" and args.loss_type == "dapo"
    with caplog.at_level(logging.WARNING, logger="trl_ragen2.ppo.ppo_config"):
        args = make_args(tmp_path, scale_rewards="group")
    assert args.scale_rewards == "none" and "has no effect in PPO" in caplog.text


def test_sokoban_rollouts_train_ppo_with_turn_rewards(tmp_path, tiny_tokenizer):
    """End to end with the RAGEN multi-turn rollout: feedback tokens carry nothing, each turn's reward is paid at its
    last model token, and the return target of a turn is the reward still to come (gamma = lambda = 1)."""
    from trl_ragen2.agents.rollout import RolloutConfig
    from trl_ragen2.agents.rollout_func import RagenRollout, env_return
    from trl_ragen2_envs.datasets import build_rows

    trainer = SNRFilteredPPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=env_return,
        args=make_args(
            tmp_path,
            per_device_train_batch_size=8,
            max_completion_length=512,
            use_turn_rewards=True,
            whiten_advantages=False,
            reward_variance_filtering=None,
        ),  # fmt: skip
        train_dataset=Dataset.from_list(build_rows("sokoban", "train", 8)),
        processing_class=tiny_tokenizer,
        rollout_func=RagenRollout(RolloutConfig(max_turns=2)),
    )
    replies = ["go</think><answer>Up || Left</answer>", "go</think><answer>Down</answer>", "babble", "babble"]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        encoded = [tiny_tokenizer.encode(replies[i % 4], add_special_tokens=False) for i in range(len(prompt_ids))]
        return [ids + [tiny_tokenizer.eos_token_id] for ids in encoded], None

    trainer._generate_single_turn = generate
    captured = []
    add_gae = trainer._add_gae_advantages

    def recording_add_gae(batch, inputs, rows, **kwargs):
        add_gae(batch, inputs, rows, **kwargs)
        captured.append((batch, inputs, rows))

    trainer._add_gae_advantages = recording_add_gae
    trainer.train()

    batch, inputs, rows = captured[0]
    checked_turns = 0
    for i, row in enumerate(rows):
        spans, turn_rewards = inputs[row]["turn_spans"], inputs[row]["turn_rewards"]
        assert len(spans) == 2, "two turns each (max_turns=2)"
        model_tokens = batch["tool_mask"][i] * batch["completion_mask"][i]
        assert torch.all(batch["returns"][i][model_tokens == 0] == 0), "feedback and padding carry no return"
        for k, (start, end) in enumerate(spans):
            reward_to_go = sum(turn_rewards[k:])
            assert batch["returns"][i, start].item() == pytest.approx(reward_to_go, abs=1e-5)
            assert batch["returns"][i, end - 1].item() == pytest.approx(reward_to_go, abs=1e-5)
            checked_turns += 1
        assert batch["returns"][i, spans[0][0]].item() == pytest.approx(inputs[row]["ragen2_return"], abs=1e-5)
    assert checked_turns == 16
    assert len({tuple(r) for r in (inputs[row]["turn_rewards"] for row in rows)}) > 1, "turn rewards differ"
