"""Generation backends for the rollout engine: the trainer's own path, a plain model, a vLLM engine, or a scripted
policy.

A backend is called once per turn with the token ids of every active episode and returns one reply per episode
(token ids, ending with EOS unless cut at `max_new_tokens`) and, when the backend has them, per-token log-probs:

    backend(prompt_ids, max_new_tokens, *, episodes, group_size, pad_to) -> (replies, logprobs or None)

[`TrainerGeneration`] goes through `GRPOTrainer._generate_single_turn`, i.e. whatever the trainer is configured
with (transformers, transformers continuous batching, vLLM colocate or vLLM server): there is never a second copy
of the model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch


@contextlib.contextmanager
def generation_overrides(trainer, **overrides: Any):
    """Temporarily change the trainer's sampling settings (`max_new_tokens`, `temperature`, ...) for one call.

    TRL keeps them in `trainer.generation_config` / `trainer.generation_kwargs` (transformers paths) and on
    `trainer.vllm_generation` (vLLM, where the token limit is `max_completion_length`).
    """
    saved: list[tuple[Any, str, Any, bool]] = []

    def set_value(obj, name, value, is_dict=False):
        present = (name in obj) if is_dict else hasattr(obj, name)
        old = (obj.get(name) if is_dict else getattr(obj, name)) if present else None
        saved.append((obj, name, (present, old), is_dict))
        if is_dict:
            obj[name] = value
        else:
            setattr(obj, name, value)

    try:
        for name, value in overrides.items():
            if value is None:
                continue
            if getattr(trainer, "use_vllm", False):
                vllm_name = "max_completion_length" if name == "max_new_tokens" else name
                set_value(trainer.vllm_generation, vllm_name, value)
            else:
                set_value(trainer.generation_config, name, value)
                if isinstance(getattr(trainer, "generation_kwargs", None), dict):
                    set_value(trainer.generation_kwargs, name, value, is_dict=True)
        yield
    finally:
        for obj, name, (present, old), is_dict in reversed(saved):
            if is_dict:
                if present:
                    obj[name] = old
                else:
                    obj.pop(name, None)
            else:
                setattr(obj, name, old)


class TrainerGeneration:
    """Generate with the trainer's own generation path (`GRPOTrainer._generate_single_turn`).

    Every process must call it the same number of times. With vLLM (server mode gathers the prompts of all
    processes and slices the results back evenly) each process pads its batch to `pad_to` rows; otherwise a process
    with no active episode still generates one placeholder row, so ZeRO-3 / FSDP collectives stay matched.

    Args:
        trainer: A `GRPOTrainer` (or subclass).
        temperature (`float`, *optional*): Overrides the trainer's sampling temperature (e.g. 0.5 for evaluation).
    """

    def __init__(self, trainer, temperature: float | None = None):
        self.trainer = trainer
        self.temperature = temperature

    def __call__(self, prompt_ids, max_new_tokens, *, episodes=None, group_size=1, pad_to=None):
        trainer = self.trainer
        count = len(prompt_ids)
        target = max(pad_to or count, count) if getattr(trainer, "use_vllm", False) else max(count, 1)
        placeholder = list(prompt_ids[0]) if count else trainer.processing_class.encode("Hi", add_special_tokens=False)
        batch = [list(ids) for ids in prompt_ids] + [placeholder] * (target - count)
        if target != count:
            group_size = 1  # padding breaks the contiguous groups vLLM server mode deduplicates
        with generation_overrides(trainer, max_new_tokens=max_new_tokens, temperature=self.temperature):
            replies, logprobs = trainer._generate_single_turn(batch, None, {}, group_size)
        replies = [list(reply) for reply in replies[:count]]
        if logprobs is not None:
            logprobs = [list(values) for values in logprobs[:count]]
        return replies, logprobs


class ModelGeneration:
    """Sample with a plain transformers model (notebooks, evaluation outside a trainer). Single process.

    Args:
        model: A causal LM.
        tokenizer: Its tokenizer (pad token set).
        temperature (`float`, defaults to `1.0`): Sampling temperature; `0` decodes greedily.
        top_p (`float`, defaults to `1.0`): Nucleus sampling.
        batch_size (`int`, defaults to `16`): Rows per `generate` call.
    """

    def __init__(self, model, tokenizer, *, temperature: float = 1.0, top_p: float = 1.0, batch_size: int = 16):
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.batch_size = temperature, top_p, batch_size

    @torch.no_grad()
    def __call__(self, prompt_ids, max_new_tokens, *, episodes=None, group_size=1, pad_to=None):
        replies = []
        device = next(self.model.parameters()).device
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        was_training = self.model.training
        self.model.eval()
        for start in range(0, len(prompt_ids), self.batch_size):
            chunk = prompt_ids[start : start + self.batch_size]
            width = max(len(ids) for ids in chunk)
            input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in chunk], device=device)
            attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in chunk], device=device)
            sample = self.temperature > 0
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new_tokens,
                do_sample=sample,
                temperature=self.temperature if sample else None,
                top_p=self.top_p if sample else None,
                top_k=0 if sample else None,
                eos_token_id=eos,
                pad_token_id=pad,
            )
            for row in output[:, width:].tolist():
                replies.append(row[: row.index(eos) + 1] if eos in row else row)
        self.model.train(was_training)
        return replies, None


class EngineGeneration:
    """Sample with a `vllm.LLM` outside a trainer (evaluation, benchmarks). Single process.

    The engine holds whatever weights were loaded into it: build it on a checkpoint, or load a policy's weights into
    an in-process engine with [`~trl_ragen2.models.vllm_cpu.load_policy_weights`] (vLLM's CPU build).

    Args:
        llm: A `vllm.LLM`.
        temperature (`float`, defaults to `1.0`): Sampling temperature; `0` decodes greedily.
        top_p (`float`, defaults to `1.0`): Nucleus sampling.
        seed (`int`, *optional*): Seeds each call (the seed + the call's index), so an evaluation draws the same
            samples whatever else the engine ran before: through each request's `SamplingParams.seed`, or, on vLLM's
            CPU build, through torch's global generator, which the sampler of an in-process engine draws from (vLLM
            0.31 rewinds a request's own generator when it splits a prefill over several steps, and a CPU generator
            cannot be rewound: `CPU Generator does not use offset`).
    """

    def __init__(self, llm, *, temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None):
        self.llm, self.temperature, self.top_p, self.seed = llm, temperature, top_p, seed
        self.calls = 0

    def __call__(self, prompt_ids, max_new_tokens, *, episodes=None, group_size=1, pad_to=None):
        from vllm import SamplingParams
        from vllm.platforms import current_platform

        seed = None if self.seed is None else self.seed + self.calls
        self.calls += 1
        if seed is not None and current_platform.is_cpu():
            torch.manual_seed(seed)  # the in-process engine's sampler draws from torch's global generator
            seed = None
        params = SamplingParams(
            max_tokens=max_new_tokens, temperature=self.temperature, top_p=self.top_p, top_k=-1, seed=seed
        )
        outputs = self.llm.generate([{"prompt_token_ids": list(ids)} for ids in prompt_ids], params, use_tqdm=False)
        # vLLM keeps the EOS that stopped a reply in `token_ids`, as the other backends do
        return [list(output.outputs[0].token_ids) for output in outputs], None


class ScriptedPolicy:
    """A policy written in Python: `policy(episode) -> reply text`, tokenised and closed with EOS.

    The episode gives access to its environment (`episode.env`), the last observation and the chat so far, so a
    solver can play (e.g. Sokoban's BFS solver) as a baseline, and tests can script exact replies.
    """

    def __init__(self, policy: Callable[[Any], str], tokenizer):
        self.policy, self.tokenizer = policy, tokenizer

    def __call__(self, prompt_ids, max_new_tokens, *, episodes: Sequence[Any], group_size=1, pad_to=None):
        replies = []
        for episode in episodes:
            ids = self.tokenizer.encode(self.policy(episode), add_special_tokens=False) + [self.tokenizer.eos_token_id]
            replies.append(ids)
        return replies, None
