"""Exact-update runs on the tiny model: the loss settings every exactness test sweeps, and plain `GRPOTrainer`'s
gradient on a set of prompt groups alone (the reference a filtered or refilled step is held to)."""

from __future__ import annotations

from trl import GRPOConfig, GRPOTrainer

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.models.tiny import make_tiny_model

from .exactness import record_gradients
from .scripted import AMPLITUDES, dataset, parity_reward_for, script_generation, tiny_trainer_args


LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
EXACT = dict(optim="sgd", max_grad_norm=0.0, learning_rate=1e-2)


def loss_settings(loss_type, entropy_coef=0.0, **extra):
    settings = dict(loss_type=loss_type, entropy_coef=entropy_coef, **extra)
    if loss_type == "luspo":
        settings["importance_sampling_level"] = "sequence"  # what TRL recommends for luspo
    return settings


def make_trainer(tmp_path, tokenizer, trainer_cls, prompts, reward_funcs=None, model=None, **args):
    config_cls = SNRFilteredGRPOConfig if trainer_cls is SNRFilteredGRPOTrainer else GRPOConfig
    if config_cls is SNRFilteredGRPOConfig:
        args.setdefault("mi_diagnostics", False)
    trainer = trainer_cls(
        model=model if model is not None else make_tiny_model(tokenizer, seed=0),
        reward_funcs=reward_funcs or parity_reward_for(AMPLITUDES),
        args=tiny_trainer_args(tmp_path, config_cls, **args),
        train_dataset=dataset(prompts),
        processing_class=tokenizer,
    )
    return script_generation(trainer)


def plain_gradient_on(tmp_path, tokenizer, prompts, reward_funcs=None, model=None, **settings):
    """Gradient of one plain GRPOTrainer step on `prompts` alone, in one micro-batch."""
    plain = make_trainer(
        tmp_path / "plain",
        tokenizer,
        GRPOTrainer,
        prompts,
        reward_funcs=reward_funcs,
        model=model,
        per_device_train_batch_size=4 * len(prompts),
        **EXACT,
        **settings,
    )
    grads = record_gradients(plain)
    plain.train()
    return grads.steps[0]
