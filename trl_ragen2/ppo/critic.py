"""The PPO critic: a separate value model with a scalar head, and how to read per-token values from it.

The critic is a token-classification model with one label (`AutoModelForTokenClassification`, `num_labels=1`):
a backbone of the policy's architecture plus a linear `score` head that maps every hidden state to V(s). By
default it starts from the policy's own weights (the backbone is copied; the head is freshly initialised), as in
RAGEN-2 / veRL, where the critic is initialised from the actor checkpoint. It is a separate module with its own
optimizer: it never shares parameters with the policy, so it can be neither synced into vLLM nor merged into the
policy's weights.

```python
critic = build_value_model(policy_model)                         # from a policy object (backbone copied)
critic = build_value_model("Qwen/Qwen2.5-3B-Instruct", seed=0)   # from a path / Hub id
values = completion_values(critic, prompt_ids, prompt_mask, completion_ids, completion_mask)  # (B, Lc)
```
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForTokenClassification, PreTrainedModel


# Names transformers uses for the linear head of token-classification models.
VALUE_HEAD_NAMES = ("score", "classifier")


def _value_config(config):
    config = copy.deepcopy(config)
    config.num_labels = 1
    config.classifier_dropout = 0.0  # a value estimate must not be noisy in train mode
    config.use_cache = False
    return config


def build_value_model(
    source: str | PreTrainedModel,
    *,
    seed: int = 0,
    model_init_kwargs: dict | None = None,
) -> PreTrainedModel:
    """Build a critic with a scalar head.

    Args:
        source (`str` or `PreTrainedModel`):
            A path or Hub id (loaded with `AutoModelForTokenClassification.from_pretrained(num_labels=1)`: the
            backbone weights load, the head is new), or a causal-LM policy object whose backbone weights are
            copied into a new token-classification model of the same configuration and dtype. A PEFT-wrapped
            policy object is rejected: pass its base model, or a critic of your own.
        seed (`int`, defaults to `0`):
            Seed of the head's initialisation (the global RNG is left untouched).
        model_init_kwargs (`dict`, *optional*):
            Extra `from_pretrained` arguments for a path (e.g. `dtype`, `attn_implementation`, `revision`).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if isinstance(source, str):
            kwargs = dict(model_init_kwargs or {})
            kwargs.pop("quantization_config", None)  # the critic is trained in full
            kwargs.pop("device_map", None)  # accelerate places it
            dtype = kwargs.pop("dtype", "float32")
            dtype = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
            config_kwargs = {key: kwargs[key] for key in ("revision", "trust_remote_code") if key in kwargs}
            config = _value_config(AutoConfig.from_pretrained(source, **config_kwargs))
            return AutoModelForTokenClassification.from_pretrained(source, config=config, dtype=dtype, **kwargs)
        return _from_policy(source)


def _from_policy(policy: PreTrainedModel) -> PreTrainedModel:
    if hasattr(policy, "peft_config"):
        raise ValueError(
            "cannot build the critic from a PEFT-wrapped policy object; pass the base model and a peft_config to "
            "the trainer instead, or give the critic explicitly with value_model= or critic_model_name_or_path"
        )
    try:
        critic = AutoModelForTokenClassification.from_config(_value_config(policy.config), dtype=policy.dtype)
    except ValueError as error:
        raise ValueError(
            f"transformers has no token-classification head for {type(policy.config).__name__}, so no critic can be "
            "built from the policy; pass value_model= (any model whose forward returns `.logits` of shape "
            "(B, L, 1)) or critic_model_name_or_path"
        ) from error
    backbone = getattr(policy, policy.base_model_prefix)
    getattr(critic, critic.base_model_prefix).load_state_dict(backbone.state_dict())
    return critic.to(next(policy.parameters()).device)


def value_head_name(critic: nn.Module) -> str | None:
    """Attribute name of the critic's scalar head (`"score"` for most decoder models), if it has a known one."""
    for name in VALUE_HEAD_NAMES:
        if isinstance(getattr(critic, name, None), nn.Linear):
            return name
    return None


def check_value_model(critic: nn.Module) -> None:
    """Raise if `critic` is clearly not a scalar value model."""
    config = getattr(critic, "config", None)
    num_labels = getattr(config, "num_labels", 1)
    if num_labels != 1:
        raise ValueError(
            f"the value model must output one value per token (num_labels=1), got num_labels={num_labels}; build "
            "it with AutoModelForTokenClassification.from_pretrained(path, num_labels=1)"
        )


def completion_values(
    critic: nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    batch_size: int | None = None,
) -> torch.Tensor:
    """Value of the state before each completion token, (B, Lc) float32.

    The value of completion token t is read from the hidden state that predicts it: position `Lp + t - 1` of the
    concatenated (left-padded prompt, right-padded completion) sequence. Rows are processed `batch_size` at a time.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    prompt_width, completion_width = prompt_ids.size(1), completion_ids.size(1)
    if prompt_width == 0:
        raise ValueError("completion_values needs at least one prompt token: V(s) of the first completion token")
    batch_size = batch_size or input_ids.size(0)
    chunks = []
    for start in range(0, input_ids.size(0), batch_size):
        output = critic(
            input_ids=input_ids[start : start + batch_size],
            attention_mask=attention_mask[start : start + batch_size],
            use_cache=False,
        )
        logits = output.logits if hasattr(output, "logits") else output[0]  # (b, Lp + Lc, 1)
        chunks.append(logits[:, prompt_width - 1 : prompt_width - 1 + completion_width, 0].float())
    return torch.cat(chunks, dim=0)


# ---------------------------------------------------------------------------------------------------------------
# Saving and restoring (the trainer writes these files into `checkpoint-N/critic/` and `output_dir/critic/`)

CRITIC_DIR = "critic"
CRITIC_OPTIMIZER_FILE = "optimizer.pt"
CRITIC_SCHEDULER_FILE = "scheduler.pt"


def load_value_model_weights(critic: nn.Module, directory: str) -> None:
    """Load weights written by `critic.save_pretrained(directory)` into `critic` in place (adapter weights for PEFT).

    Every `*.safetensors` file of the folder is read (sharded checkpoints included); a missing or unexpected key
    raises, so a resumed critic is exactly the saved one.
    """
    from pathlib import Path

    from safetensors.torch import load_file

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {directory}; was the critic saved with save_pretrained?")
    state = {}
    for path in files:
        state.update(load_file(str(path)))
    if hasattr(critic, "peft_config"):
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(critic, state)
        unexpected = list(result.unexpected_keys)
        missing = []
    else:
        result = critic.load_state_dict(state, strict=False)
        unexpected, missing = list(result.unexpected_keys), list(result.missing_keys)
    if unexpected or missing:
        raise ValueError(
            f"the critic saved in {directory} does not match the trainer's critic (missing {missing[:5]}, unexpected "
            f"{unexpected[:5]}); resume with the same critic_model_name_or_path / value_model / critic_peft_config"
        )
