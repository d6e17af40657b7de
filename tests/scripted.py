"""Scripted generation for trainer tests: completions fixed by the prompt, so rewards and variances are known.

`script_generation(trainer)` replaces the trainer's generation backend: the k-th rollout of a prompt (k = 0..G-1
in the order TRL lays out a group) is `k + 1` copies of one token followed by EOS, so completion lengths are
2, 3, ..., G + 1. `parity_reward` then pays `amplitude[prompt] * (length % 2)`, which gives every group of G = 4
rollouts the rewards [0, a, 0, a] and a sample variance of a**2 / 3, whatever order rows are shuffled into.
"""

from __future__ import annotations

from collections import Counter

from datasets import Dataset
from trl import GRPOConfig

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model


# amplitude a gives the group rewards [0, a, 0, a]: variances 0, 1/3, 100/3, 0 -> rho = 0.9 keeps only "P2:"
AMPLITUDES = {"P0:": 0.0, "P1:": 1.0, "P2:": 10.0, "P3:": 0.0}


def tiny_trainer_args(tmp_path, config_cls, **overrides):
    """A trainer config for one scripted step on the tiny model: 4 prompts x 4 rollouts, CPU, no saving."""
    values = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=16,  # one generation batch = 4 prompts x 4 rollouts
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        learning_rate=1e-2,  # large, so one step visibly moves the tiny model
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="no",
        seed=7,
    )
    values.update(overrides)
    return config_cls(**values)


def scripted_trainer(tmp_path, tokenizer, prompts=AMPLITUDES, trainer_cls=SNRFilteredGRPOTrainer, model=None, **args):
    """A trainer of `trainer_cls` (an SNR-filtered one, or plain `GRPOTrainer`) on the tiny model, with scripted
    generation and the parity reward; `args` override `tiny_trainer_args`."""
    config_cls = SNRFilteredGRPOConfig if trainer_cls is SNRFilteredGRPOTrainer else GRPOConfig
    trainer = trainer_cls(
        model=model if model is not None else make_tiny_model(tokenizer, seed=0),
        reward_funcs=parity_reward_for(AMPLITUDES),
        args=tiny_trainer_args(tmp_path, config_cls, **args),
        train_dataset=dataset(prompts),
        processing_class=tokenizer,
    )
    return script_generation(trainer)


def dataset(prompts):
    """A prompt-only dataset."""
    return Dataset.from_dict({"prompt": list(prompts)})


def snapshot(module):
    """A copy of every named parameter, to compare after training."""
    return {name: param.detach().clone() for name, param in module.named_parameters()}


def script_generation(trainer, token: str = "x"):
    tokenizer = trainer.processing_class
    token_id = tokenizer.encode(token)[0]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        seen = Counter()
        completions = []
        for ids in prompt_ids:
            key = tuple(ids)
            copy_index = seen[key] % num_generations
            seen[key] += 1
            completions.append([token_id] * (copy_index + 1) + [tokenizer.eos_token_id])
        return completions, None

    trainer._generate_single_turn = generate
    return trainer


def parity_reward_for(amplitudes: dict[str, float]):
    """A reward function paying amplitudes[prompt] on odd-length completions and 0 on even ones."""

    def parity_reward(prompts, completion_ids, **kwargs):
        return [amplitudes[p] * (len(ids) % 2) for p, ids in zip(prompts, completion_ids, strict=True)]

    return parity_reward


def alternating_reward_for(amplitudes: dict[str, float]):
    """The parity reward on even-numbered calls (batches 2, 4, ...) and 0 everywhere on odd ones: batches 1, 3, ...
    have no reward variance (the filter keeps nothing), batches 2, 4, ... keep the groups the parity reward keeps."""
    parity, calls = parity_reward_for(amplitudes), []

    def alternating_reward(prompts, completion_ids, **kwargs):
        calls.append(None)
        rewards = parity(prompts, completion_ids)
        return rewards if len(calls) % 2 == 0 else [0.0] * len(rewards)

    return alternating_reward


def record_loss_rows(trainer):
    """Wrap `_compute_loss` to record, per call, the decoded prompts of the rows that carry loss tokens."""
    calls: list[list[str]] = []
    original = trainer._compute_loss

    def compute_loss(model, inputs):
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        rows = mask.sum(dim=1) > 0
        prompts = trainer.processing_class.batch_decode(inputs["prompt_ids"][rows], skip_special_tokens=True)
        calls.append(prompts)
        return original(model, inputs)

    trainer._compute_loss = compute_loss
    return calls


def positional_reward_for(rank: int, rows_per_process: int, num_generations: int, amplitude: float = 10.0):
    """A reward giving variance only to global group `step % 3`, wherever its rows sit across processes.

    Row i of process `rank` is global row `rank * rows_per_process + i`; its group pays `amplitude * (length % 2)`
    when it is the step's chosen group, 0 otherwise (see `script_generation` for the lengths).
    """

    def positional_reward(prompts, completion_ids, trainer_state, **kwargs):
        kept_group = trainer_state.global_step % 3
        rewards = []
        for i, ids in enumerate(completion_ids):
            group = (rank * rows_per_process + i) // num_generations
            rewards.append((amplitude if group == kept_group else 0.0) * (len(ids) % 2))
        return rewards

    return positional_reward


def finish_processes() -> None:
    """End a torchrun worker cleanly: wait for every rank, then destroy the process group.

    A gloo group left to interpreter exit can abort a process that has already written its results
    ('terminate called without an active exception'), failing the launch after the test's work succeeded.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
