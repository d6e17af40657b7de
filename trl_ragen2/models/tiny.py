"""Offline tiny-model kit: a tiny Qwen2 causal LM and a ChatML tokenizer, built in-process in seconds.

Nothing is downloaded. Tests, notebooks and the recipes' CPU presets use it; recipes accept the model name
``"tiny"`` besides any Hub id or local path (see `trl_ragen2.models.loader.load_model_and_tokenizer`).

The tokenizer is a `Qwen2Tokenizer` over a small byte-level BPE trained on a fixed corpus (so any text
round-trips), with Qwen2.5's ChatML special tokens and TRL's bundled ``qwen2_5`` chat template, which TRL accepts for conversational prompts and for
tool calling. ``<think>``, ``</think>``, ``<answer>`` and ``</answer>`` are single (non-special) tokens, so
decoding with ``skip_special_tokens=True`` keeps them, as with Qwen2.5.

```python
from trl_ragen2.models.tiny import make_tiny_model, make_tiny_tokenizer

tokenizer = make_tiny_tokenizer()
model = make_tiny_model(tokenizer, seed=0)
```
"""

from __future__ import annotations

import json
import os
import shutil
import string
from functools import lru_cache
from pathlib import Path

import torch

from trl_ragen2_envs.cache import cache_root
from trl_ragen2_envs.prompts import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN


TINY_MODEL_NAME = "tiny"

# TRL config keywords for a CPU run: TRL configs default to bf16 and gradient checkpointing, which CPU runs of the
# tiny model neither need nor (bf16) support. `GRPOConfig(output_dir="out", **CPU_TRAINING_KWARGS)`.
CPU_TRAINING_KWARGS = {"bf16": False, "use_cpu": True, "gradient_checkpointing": False, "report_to": "none"}

CHATML_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
# Plain (non-special) tokens: kept by `skip_special_tokens=True`, as in Qwen2.5's tokenizer.
REASONING_TOKENS = [THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE]

# Words the tiny BPE learns as whole tokens, so prompts of the bundled environments stay short.
_CORPUS_WORDS = (
    "system user assistant tool You're a helpful assistant. Turn State: You have actions left. Always output: "
    "Your thoughts your answer with no extra text. Strictly follow this format. Max response length: words tokens "
    "Reward: Up Down Left Right box target wall player goal hole frozen lake sokoban countdown numbers target "
    "search click buy now back to search next prev description features reviews instruction price size color "
    'the answer is: {"name": "move", "arguments": {"direction": "up"}} search[ click[ ] || 0 1 2 3 4 5 6 7 8 9'
)


def _chat_template(name: str) -> str:
    import trl

    path = Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja"
    if not path.exists():
        available = sorted(p.stem for p in path.parent.glob("*.jinja"))
        raise ValueError(f"chat_template={name!r} is not bundled with TRL; choose one of {available}")
    return path.read_text()


@lru_cache(maxsize=8)
def _trained_bpe(vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE with Qwen2's exact normaliser and pre-tokeniser; returns (vocab, merges)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=CHATML_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([string.printable * 4, _CORPUS_WORDS] * 50, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    return model["vocab"], [tuple(merge) for merge in model["merges"]]


def make_tiny_tokenizer(vocab_size: int = 1024, chat_template: str | None = "qwen2_5"):
    """Build a small `Qwen2Tokenizer` with ChatML special tokens, offline and deterministic.

    It tokenises exactly as it does after `save_pretrained` / `AutoTokenizer.from_pretrained` (same class, same
    pre-tokeniser as Qwen2.5), so a saved tiny model reloads with an identical tokenizer.

    Args:
        vocab_size (`int`, defaults to `1024`):
            Target size of the BPE vocabulary (the trained vocabulary may be smaller on this small corpus).
        chat_template (`str` or `None`, defaults to `"qwen2_5"`):
            Name of a chat template bundled with TRL (`trl/chat_templates/{name}.jinja`). `"qwen2_5"` passes TRL's
            tool-calling checks. `None` leaves the template unset (plain-text prompts only).

    Returns:
        `Qwen2Tokenizer` with `eos_token="<|im_end|>"`, `pad_token="<|endoftext|>"` and left padding.
    """
    from tokenizers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    if vocab_size < 300:
        raise ValueError(f"vocab_size must be >= 300 (256 bytes + special tokens), got {vocab_size}")
    vocab, merges = _trained_bpe(vocab_size)
    tokenizer = Qwen2Tokenizer(
        vocab=dict(vocab),
        merges=list(merges),
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=[t for t in CHATML_SPECIAL_TOKENS if t not in ("<|im_end|>", "<|endoftext|>")],
        padding_side="left",
        truncation_side="left",
    )
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in CHATML_SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in REASONING_TOKENS])
    if chat_template is not None:
        tokenizer.chat_template = _chat_template(chat_template)
    return tokenizer


def make_tiny_model(
    tokenizer=None,
    *,
    seed: int = 0,
    vocab_size: int | None = None,
    hidden_size: int = 32,
    intermediate_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 2,
    num_key_value_heads: int = 1,
    max_position_embeddings: int = 4096,
    dtype: torch.dtype = torch.float32,
):
    """Build a randomly initialised tiny `Qwen2ForCausalLM`, deterministic for `seed`, without touching global RNG.

    Args:
        tokenizer (*optional*):
            The tokenizer the model pairs with; sets the vocabulary size and the EOS/pad ids. Built with
            [`make_tiny_tokenizer`] when omitted.
        seed (`int`, defaults to `0`):
            Seed of the weight initialisation.
        vocab_size (`int`, *optional*):
            Override the embedding size (e.g. 32000 to benchmark a realistic LM head); at least `len(tokenizer)`.
        hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
        max_position_embeddings:
            Qwen2 architecture sizes.
        dtype (`torch.dtype`, defaults to `torch.float32`):
            Parameter dtype.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if tokenizer is None:
        tokenizer = make_tiny_tokenizer()
    vocab = len(tokenizer) if vocab_size is None else vocab_size
    if vocab < len(tokenizer):
        raise ValueError(f"vocab_size ({vocab}) must be >= len(tokenizer) ({len(tokenizer)})")
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(dtype)


# vLLM's CPU attention supports head sizes 32, 64, 80, ... (not the default's 16): these sizes give 2 heads of 32.
VLLM_CPU_SIZES = {"hidden_size": 64, "intermediate_size": 128}


def is_tiny_model_name(name_or_path: str | None) -> bool:
    """Whether a model name asks for the offline tiny model (`"tiny"`)."""
    return name_or_path is not None and name_or_path.strip().lower() == TINY_MODEL_NAME


def save_tiny_model(output_dir: str | os.PathLike, *, seed: int = 0, **sizes) -> str:
    """Build the tiny model and tokenizer and save both to `output_dir` (a regular `from_pretrained` folder).

    A saved copy has a `name_or_path`, which TRL needs wherever it reloads the model by name, e.g. to build the
    reference model when `beta > 0`, or to start a vLLM engine. `sizes` go to [`make_tiny_model`].
    """
    tokenizer = make_tiny_tokenizer()
    make_tiny_model(tokenizer, seed=seed, **sizes).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return str(output_dir)


def tiny_model_path(*, seed: int = 0, cache_dir: str | os.PathLike | None = None, **sizes) -> str:
    """Folder holding the tiny model for `seed` (and `sizes`, e.g. `VLLM_CPU_SIZES`), saved on first use under the
    cache directory and reused after."""
    suffix = "".join(f"-{name}{value}" for name, value in sorted(sizes.items()))
    folder = Path(cache_dir or cache_root()) / f"tiny-qwen2-seed{seed}{suffix}"
    if not (folder / "config.json").exists() or not (folder / "tokenizer_config.json").exists():
        # Save to a private folder, then rename: concurrent processes never read a half-written model.
        tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
        save_tiny_model(tmp, seed=seed, **sizes)
        try:
            tmp.replace(folder)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)
