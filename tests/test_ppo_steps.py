"""SNRFilteredPPOTrainer's critic step: exact on the kept rows, a true no-op without them, its own schedule, dropout
and gradient scaler, and the completions table showing the GAE advantages the loss used."""

import pytest
import torch
from transformers import TrainerCallback

from trl_ragen2.models.tiny import make_tiny_model
from trl_ragen2.ppo.critic import completion_values
from trl_ragen2.ppo.gae import clipped_value_loss
from trl_ragen2.ppo.ppo_config import SNRFilteredPPOConfig
from trl_ragen2.ppo.ppo_trainer import SNRFilteredPPOTrainer

from .exactness import ROW_KEYS, concat_micro_batches
from .scripted import AMPLITUDES, dataset, parity_reward_for, script_generation, snapshot, tiny_trainer_args


def ppo_trainer(tmp_path, tokenizer, prompts=AMPLITUDES, eval_dataset=None, value_model=None, **args):
    config = tiny_trainer_args(
        tmp_path, SNRFilteredPPOConfig, **{"critic_learning_rate": 1e-2, "mi_diagnostics": False, **args}
    )
    trainer = SNRFilteredPPOTrainer(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=parity_reward_for(AMPLITUDES),
        args=config,
        train_dataset=dataset(prompts),
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        value_model=value_model,
    )
    return script_generation(trainer)


class CriticRecorder(TrainerCallback):
    """The critic's gradient at each optimizer step (recorded inside its update), its parameters and moments."""

    def __init__(self, trainer):
        self.trainer, self.grads, self.states = trainer, [], []
        original = trainer._critic_optimizer_step

        def step():
            self.grads.append(
                {n: p.grad.clone() if p.grad is not None else None for n, p in trainer.critic.named_parameters()}
            )
            original()

        trainer._critic_optimizer_step = step
        trainer.add_callback(self)

    def on_step_end(self, args, state, control, **kwargs):
        optimizer = self.trainer.critic_optimizer.optimizer
        moments = {n: {k: v.clone() for k, v in optimizer.state[p].items()} for n, p in self.trainer.critic.named_parameters()}  # fmt: skip
        self.states.append((snapshot(self.trainer.critic), moments))


def record_critic_batches(trainer):
    """The kept rows of each critic micro-batch, with the value targets the critic trained on."""
    parts = []
    original = trainer._critic_training_step

    def critic_step(batch):
        real = trainer.micro_step.real_rows
        keys = (*ROW_KEYS, "returns", "old_values", "rollout_scored")
        if real:
            parts.append({key: batch[key][:real].detach().clone() for key in keys if key in batch})
        return original(batch)

    trainer._critic_training_step = critic_step
    return parts


@pytest.mark.parametrize(
    "layout",
    [
        dict(prompts=list(AMPLITUDES), per_device_train_batch_size=16),
        dict(prompts=["P2:", "P0:", "P3:"], per_device_train_batch_size=4, gradient_accumulation_steps=3),
        dict(prompts=list(AMPLITUDES), per_device_train_batch_size=2, gradient_accumulation_steps=8),
    ],
    ids=["one_micro_batch", "uneven", "placeholders"],
)
def test_critic_gradient_is_the_token_mean_value_loss_of_the_kept_rows(tmp_path, tiny_tokenizer, layout):
    layout = dict(layout)
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, layout.pop("prompts"), optim="sgd", max_grad_norm=0.0, **layout)
    recorder = CriticRecorder(trainer)
    parts = record_critic_batches(trainer)
    initial = {n: p.detach().clone() for n, p in trainer.critic.state_dict().items()}
    trainer.train()
    batch = concat_micro_batches(parts)
    assert len(batch["returns"]) == 4
    # Reference: the critic at its initial weights, the clipped value loss averaged over the kept rows' model tokens.
    critic = trainer.unwrapped_critic
    critic.load_state_dict(initial)
    critic.zero_grad(set_to_none=True)
    values = completion_values(
        critic, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]
    )
    mask = batch["completion_mask"].float() * batch["rollout_scored"].unsqueeze(1)
    per_token, _ = clipped_value_loss(
        values, batch["old_values"], batch["returns"], mask, trainer.args.cliprange_value
    )
    (per_token.sum() / mask.sum()).backward()
    for name, param in critic.named_parameters():
        torch.testing.assert_close(recorder.grads[0][name], param.grad, rtol=1e-5, atol=1e-8, msg=name)


def test_critic_steps_without_a_kept_row_are_true_no_ops(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                          steps_per_generation=8, max_steps=4, optim="adamw_torch", weight_decay=0.1)  # fmt: skip
    recorder = CriticRecorder(trainer)
    trainer.train()
    (params_1, moments_1), *later = recorder.states
    assert moments_1["score.weight"], "the first step updated the critic"
    for params, moments in later:
        for name in params_1:
            assert torch.equal(params_1[name], params[name]), name
            for key, value in moments_1[name].items():
                assert torch.equal(value, moments[name][key]), f"{name} {key}"
    logs = [log for log in trainer.state.log_history if "ragen2/filter/skipped_updates" in log]
    assert [("ragen2/ppo/value_loss" in log) for log in logs] == [True, False, False, False]


def test_metric_based_critic_schedule_steps_after_evaluation(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, lr_scheduler_type="reduce_lr_on_plateau", max_steps=2,
                          eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=16,
                          metric_for_best_model="eval_loss", eval_dataset=dataset(AMPLITUDES))  # fmt: skip
    trainer.train()
    scheduler = trainer.critic_lr_scheduler
    assert isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    assert scheduler.last_epoch == 2, "stepped once per evaluation, with the evaluation loss"
    assert scheduler.best == trainer.lr_scheduler.best  # the policy's schedule saw the same metric


def test_disable_dropout_applies_to_the_critic(tmp_path, tiny_tokenizer):
    """TRL zeroes the policy's dropout layers with disable_dropout=True; the critic's are zeroed too."""
    from transformers import GPT2Config, GPT2ForTokenClassification

    config = GPT2Config(vocab_size=len(tiny_tokenizer), n_positions=64, n_embd=32, n_layer=1, n_head=2,
                        resid_pdrop=0.3, embd_pdrop=0.3, attn_pdrop=0.3, num_labels=1)  # fmt: skip
    critic = GPT2ForTokenClassification(config)
    kept = ppo_trainer(tmp_path / "a", tiny_tokenizer, value_model=critic, disable_dropout=False)
    assert min(m.p for m in kept.unwrapped_critic.modules() if isinstance(m, torch.nn.Dropout)) > 0.0
    trainer = ppo_trainer(tmp_path / "b", tiny_tokenizer, value_model=GPT2ForTokenClassification(config),
                          disable_dropout=True)  # fmt: skip
    assert {m.p for m in trainer.unwrapped_critic.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}


def test_fp16_gives_the_critic_its_own_gradient_scaler(tmp_path, tiny_tokenizer):
    """accelerate only scales fp16 gradients on accelerators; a CPU GradScaler stands in for it here."""
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                          steps_per_generation=8, max_steps=4)  # fmt: skip
    policy_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    trainer.accelerator.scaler = policy_scaler  # the policy's optimizer is wrapped with it when training starts
    trainer._prepare_critic_optimizer(trainer.critic_optimizer.optimizer)  # as __init__ does under fp16
    assert trainer.critic_scaler is not policy_scaler and trainer.critic_optimizer.scaler is trainer.critic_scaler
    updates = {"policy": 0, "critic": 0}
    for name, scaler in (("policy", policy_scaler), ("critic", trainer.critic_scaler)):
        original = scaler.update

        def counting(*args, _name=name, _original=original, **kwargs):
            updates[_name] += 1
            return _original(*args, **kwargs)

        scaler.update = counting
    critic_before = snapshot(trainer.critic)
    trainer.train()  # steps 2-4 hold no kept row: neither scaler may be stepped (GradScaler.step would raise)
    assert updates == {"policy": 1, "critic": 1}
    assert any(not torch.equal(critic_before[n], p) for n, p in trainer.critic.named_parameters())


def test_completions_table_shows_the_gae_advantages_the_loss_used(tmp_path, tiny_tokenizer):
    trainer = ppo_trainer(tmp_path, tiny_tokenizer)
    used = []
    original = trainer._compute_loss

    def compute_loss(model, inputs):
        mask = inputs["completion_mask"].float()
        real = trainer.micro_step.real_rows
        used.extend((((inputs["advantages"] * mask).sum(1) / mask.sum(1).clamp(min=1.0))[:real]).tolist())
        return original(model, inputs)

    trainer._compute_loss = compute_loss
    trainer.train()
    table = list(trainer._logs["advantages"])
    shown = [value for value in table if value == value]  # not NaN: the kept rows
    assert len(table) == 16 and len(shown) == 4
    assert sorted(shown) == pytest.approx(sorted(used))
