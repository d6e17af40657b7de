"""The one loader of a causal LM and its tokenizer by name: an offline model of this package, a Hub id or a path.

Two names need no download: `"tiny"` (the tiny Qwen2 of `trl_ragen2.models.tiny`, saved once under the cache
folder) and `"smollm2-135m"` (SmolLM2-135M-Instruct, `trl_ragen2.models.smollm2`). [`resolve_local_model`] turns
either into its folder and leaves any other name alone; [`load_model_and_tokenizer`] loads the result.

```python
from trl_ragen2 import load_model_and_tokenizer

model, tokenizer = load_model_and_tokenizer("tiny")  # or "smollm2-135m", a Hub id, a local path
```
"""

from __future__ import annotations

import torch

from .smollm2 import is_smollm2_name, smollm2_path
from .tiny import is_tiny_model_name, tiny_model_path


def resolve_local_model(model_name_or_path: str, *, seed: int = 0) -> str:
    """The folder behind an offline model name (`"tiny"`, `"smollm2-135m"`); any other name is returned unchanged."""
    if is_tiny_model_name(model_name_or_path):
        return tiny_model_path(seed=seed)
    if is_smollm2_name(model_name_or_path):
        return smollm2_path()
    return model_name_or_path


def load_model_and_tokenizer(
    model_name_or_path: str, *, seed: int = 0, dtype: str | torch.dtype | None = None, **kwargs
):
    """Load a causal LM and its tokenizer from a Hub id or a local path, or an offline model by name.

    Args:
        model_name_or_path (`str`):
            `"tiny"` for the offline tiny model (saved once under the cache folder, `trl_ragen2_envs.cache`, and
            loaded from there, so it has a path TRL can reload it from), `"smollm2-135m"` for the offline
            SmolLM2-135M-Instruct (see `trl_ragen2.models.smollm2`), otherwise anything `from_pretrained` accepts.
        seed (`int`, defaults to `0`):
            Weight seed of the tiny model (ignored for pretrained models).
        dtype (`str` or `torch.dtype`, *optional*):
            Parameter dtype (`"float32"`, `"bfloat16"`, ...); `"auto"` or `None` keeps the checkpoint's.
        **kwargs:
            Passed to `AutoModelForCausalLM.from_pretrained` (e.g. `attn_implementation`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_name_or_path = resolve_local_model(model_name_or_path, seed=seed)  # "tiny", "smollm2-135m"

    tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_name_or_path, dtype=dtype or "auto", **kwargs)
    return model, tokenizer
