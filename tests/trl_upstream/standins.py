"""Local stand-ins for the Hub repositories TRL's GRPO tests load (`trl-internal-testing/...`), built in-process.

Each model stand-in is a randomly initialised model of the same architecture, a few thousand parameters large, saved
with a tokenizer over the project's offline byte-level BPE (`trl_ragen2.models.tiny`), the special tokens of the
model family and the chat template TRL bundles for it, so TRL's template-matching code (tool calling, training
templates) sees the template it expects. The datasets (`zen`, `zen-image`, `zen-multi-image`) are folders of
parquet files with the configs, splits and columns of the Hub ones; their prompts are stand-ins too.

Everything is saved under `root/trl-internal-testing/<name>`; a test that runs with `root` as its working directory
reaches them by their Hub ids, since `from_pretrained` and `load_dataset` read a local folder of that name first.
Stand-ins the installed transformers cannot build (vision-language models, for now) are left out: the tests that
load them fail in every mode and belong to the baseline (see README.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch


ORG = "trl-internal-testing"
# Bumped whenever a stand-in changes, so a cached folder of an older layout is never reused.
STANDIN_VERSION = 1

# A small model: 2 layers, width 32 (MoE: 4 experts, 2 per token).
SMALL = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
}

# ---------------------------------------------------------------------------------------------------------------
# Tokenizers: the family's special tokens and TRL's bundled chat template over the tiny BPE.

# Per family: chat template (TRL's `trl/chat_templates/<name>.jinja`), bos/eos/pad, other special tokens, the
# generation config's eos ids (as tokens), and plain added tokens.
FAMILIES = {
    "qwen2_5": {"template": "qwen2_5"},  # the project's tiny tokenizer as is
    "qwen3": {
        "template": "qwen3",
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "plain": ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
        "generation_eos": ["<|im_end|>", "<|endoftext|>"],
    },
    "llama3_2": {
        "template": "llama3_2",
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        "special": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "special_from_template": True,
        "generation_eos": ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
    },
    "mistral": {
        "template_text": (
            "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
            "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}"
            "{% endfor %}"
        ),
        "bos": "<s>",
        "eos": "</s>",
        "special": ["<s>", "</s>", "<unk>"],
    },
    "gemma": {
        "template": "gemma",
        "bos": "<bos>",
        "eos": "<eos>",
        "pad": "<pad>",
        "special": ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
        "generation_eos": ["<eos>", "<end_of_turn>"],
    },
    "cohere2": {
        "template": "cohere2",
        "bos": "<BOS_TOKEN>",
        "eos": "<|END_OF_TURN_TOKEN|>",
        "pad": "<PAD>",
        "special": ["<PAD>", "<BOS_TOKEN>", "<EOS_TOKEN>"],
        "special_from_template": True,
    },
    "glm4moe": {
        "template": "glm4moe",
        "eos": "<|endoftext|>",
        "pad": "<|endoftext|>",
        "special": ["<|endoftext|>", "[gMASK]", "<sop>", "<eop>"],
        "special_from_template": True,
        "plain": ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>"],
        "generation_eos": ["<|endoftext|>", "<|user|>", "<|observation|>"],
    },
    "gptoss": {
        "template": "gptoss",
        "bos": "<|startoftext|>",
        "eos": "<|return|>",
        "pad": "<|endoftext|>",
        "special": ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|call|>"],
        "special_from_template": True,
        "generation_eos": ["<|return|>", "<|endoftext|>", "<|call|>"],
    },
    "nemotron_h": {
        "template": "nemotron_3_nano",
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "plain": ["<think>", "</think>", "<tool_call>", "</tool_call>", "<toolcall>", "</toolcall>"],
    },
}


def _chat_template_text(family: dict) -> str:
    if "template_text" in family:
        return family["template_text"]
    from trl_ragen2.models.tiny import _chat_template

    return _chat_template(family["template"])


def make_family_tokenizer(name: str):
    """The tiny BPE with the special tokens and chat template of the model family `name` (a key of FAMILIES)."""
    from tokenizers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    from trl_ragen2.models.tiny import _trained_bpe, make_tiny_tokenizer

    family = FAMILIES[name]
    if name == "qwen2_5":
        return make_tiny_tokenizer()
    template = _chat_template_text(family)
    special = list(family.get("special", []))
    if family.get("special_from_template"):
        special += [t for t in re.findall(r"<\|[A-Za-z0-9_]+\|>", template) if t not in special]
    plain = [t for t in family.get("plain", []) if t not in special]
    vocab, merges = _trained_bpe(1024)
    tokens = {key: family.get(key) for key in ("bos", "eos", "pad")}
    tokenizer = Qwen2Tokenizer(
        vocab=dict(vocab),
        merges=list(merges),
        unk_token=None,
        bos_token=tokens["bos"],
        eos_token=tokens["eos"],
        pad_token=tokens["pad"],
        padding_side="left",
    )
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in special], special_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    tokenizer.chat_template = template
    return tokenizer


# ---------------------------------------------------------------------------------------------------------------
# Models


def _ids(tokenizer, tokens):
    return [tokenizer.convert_tokens_to_ids(t) for t in tokens]


def _config(kind: str, tokenizer, **overrides):
    import transformers

    config_class = getattr(transformers, kind)
    kwargs = {**SMALL, "vocab_size": len(tokenizer), **overrides}
    for key, token in (("bos_token_id", tokenizer.bos_token), ("eos_token_id", tokenizer.eos_token)):
        kwargs.setdefault(key, tokenizer.convert_tokens_to_ids(token) if token else None)
    kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
    return config_class(**kwargs)


MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}

# Hub name -> (family, config class, model class, config overrides)
MODELS: dict[str, tuple[str, str, str, dict]] = {
    "tiny-Qwen2ForCausalLM-2.5": ("qwen2_5", "Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    "tiny-Qwen2ForSequenceClassification-2.5": (
        "qwen2_5",
        "Qwen2Config",
        "Qwen2ForSequenceClassification",
        {"num_labels": 1},
    ),
    "tiny-Qwen3ForCausalLM": ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", {"tie_word_embeddings": False}),
    "tiny-Qwen3ForSequenceClassification": (
        "qwen3",
        "Qwen3Config",
        "Qwen3ForSequenceClassification",
        {"num_labels": 1},
    ),
    "tiny-Qwen3MoeForCausalLM": ("qwen3", "Qwen3MoeConfig", "Qwen3MoeForCausalLM", MOE),
    "tiny-LlamaForCausalLM-3.2": ("llama3_2", "LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": True}),
    "tiny-LlamaForSequenceClassification-3.2": (
        "llama3_2",
        "LlamaConfig",
        "LlamaForSequenceClassification",
        {"num_labels": 1},
    ),
    "tiny-MistralForCausalLM-0.2": ("mistral", "MistralConfig", "MistralForCausalLM", {}),
    "tiny-Gemma2ForCausalLM": (
        "gemma",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"head_dim": 8, "tie_word_embeddings": True, "sliding_window": 64},
    ),
    "tiny-Cohere2ForCausalLM": ("cohere2", "Cohere2Config", "Cohere2ForCausalLM", {"sliding_window": 64}),
    "tiny-Glm4MoeForCausalLM": (
        "glm4moe",
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        {
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "head_dim": 8,
        },
    ),
    "tiny-GptOssForCausalLM": (
        "gptoss",
        "GptOssConfig",
        "GptOssForCausalLM",
        {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 8, "sliding_window": 64},
    ),
    "tiny-NemotronHForCausalLM-nano": (
        "nemotron_h",
        "NemotronHConfig",
        "NemotronHForCausalLM",
        {
            "head_dim": 8,
            "ssm_state_size": 16,
            "mamba_num_heads": 4,
            "mamba_head_dim": 16,
            "n_groups": 2,
            "chunk_size": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 32,
        },
    ),
}

# tiny-RemoteForCausalLM: a Qwen2 model whose classes live in the repository (`auto_map`), so loading it needs
# `trust_remote_code=True`, like the Hub one.
REMOTE_CODE = """\
from transformers import Qwen2Config, Qwen2ForCausalLM


class RemoteConfig(Qwen2Config):
    model_type = "remote"


class RemoteForCausalLM(Qwen2ForCausalLM):
    config_class = RemoteConfig
"""


def _save_model(name: str, folder: Path) -> None:
    import transformers

    family, config_kind, model_kind, overrides = MODELS[name]
    tokenizer = make_family_tokenizer(family)
    config = _config(config_kind, tokenizer, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = getattr(transformers, model_kind)(config)
    eos_tokens = FAMILIES[family].get("generation_eos")
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = _ids(tokenizer, eos_tokens) if eos_tokens else tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.bos_token_id = config.bos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _save_remote_model(folder: Path) -> None:
    _save_model("tiny-Qwen2ForCausalLM-2.5", folder)
    (folder / "modeling_remote.py").write_text(REMOTE_CODE)
    config = json.loads((folder / "config.json").read_text())
    config.update(
        model_type="remote",
        architectures=["RemoteForCausalLM"],
        auto_map={
            "AutoConfig": "modeling_remote.RemoteConfig",
            "AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM",
        },
    )
    (folder / "config.json").write_text(json.dumps(config, indent=2))


# ---------------------------------------------------------------------------------------------------------------
# Datasets

# Prompt stand-ins: 17 train and 2 test prompts, as many as the Hub's `zen` has.
PROMPTS = [
    "Beautiful is better than",
    "Explicit is",
    "Simple is better",
    "Complex",
    "Flat is better than",
    "Sparse is better",
    "Readability",
    "Special cases aren't special",
    "Although practicality beats",
    "Errors should never",
    "Unless explicitly",
    "In the face of ambiguity, refuse",
    "There should be one--",
    "Although that way may not be obvious at first",
    "Now is better",
    "Although never is often better than",
    "If the implementation is hard to explain, it's",
]
TEST_PROMPTS = ["If the implementation is easy to explain, it", "Namespaces are one"]


def _image(seed: int, size: int = 16):
    from PIL import Image

    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (size, size, 3), generator=generator, dtype=torch.uint8)
    return Image.fromarray(pixels.numpy())


def _dataset_rows(dataset: str, config: str, prompts: list[str], offset: int) -> dict[str, list]:
    if config == "standard_prompt_only":
        return {"prompt": prompts}
    messages = [[{"role": "user", "content": p}] for p in prompts]
    if dataset == "zen":
        return {"prompt": messages}
    if dataset == "zen-image":
        return {"prompt": messages, "image": [_image(offset + i) for i in range(len(prompts))]}
    return {
        "prompt": messages,
        "images": [[_image(offset + i), _image(offset + i + 100)] for i in range(len(prompts))],
    }


DATASETS = {
    "zen": ["standard_prompt_only", "conversational_prompt_only"],
    "zen-image": ["conversational_prompt_only"],
    "zen-multi-image": ["conversational_prompt_only"],
}


def _save_dataset(name: str, folder: Path) -> None:
    from datasets import Dataset

    configs = []
    for config in DATASETS[name]:
        files = []
        for split, prompts, offset in (("train", PROMPTS, 0), ("test", TEST_PROMPTS, len(PROMPTS))):
            path = folder / config / f"{split}-00000-of-00001.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            data = _dataset_rows(name, config, prompts, offset)
            if "image" in data or "images" in data:
                from datasets import Image, Sequence

                ds = Dataset.from_dict(data)
                column = "image" if "image" in data else "images"
                feature = Image() if column == "image" else Sequence(Image())
                ds = ds.cast_column(column, feature)
            else:
                ds = Dataset.from_dict(data)
            ds.to_parquet(str(path))
            files.append(f"    - split: {split}\n      path: {config}/{split}-*.parquet\n")
        configs.append(f"- config_name: {config}\n  data_files:\n{''.join(files)}")
    (folder / "README.md").write_text(f"---\nconfigs:\n{''.join(configs)}---\n\nStand-in for {ORG}/{name}.\n")


# ---------------------------------------------------------------------------------------------------------------
# The folder


def builders() -> dict[str, Callable[[Path], None]]:
    """Hub name (under `trl-internal-testing/`) -> function saving its stand-in to a folder."""
    out: dict[str, Callable[[Path], None]] = {name: (lambda f, n=name: _save_model(n, f)) for name in MODELS}
    out["tiny-RemoteForCausalLM"] = _save_remote_model
    out.update({name: (lambda f, n=name: _save_dataset(n, f)) for name in DATASETS})
    return out


def build_standins(root: str | os.PathLike) -> dict[str, str]:
    """Save every stand-in under `root/trl-internal-testing/` (skipping those already there) and return the ones
    that could not be built, name -> error. Safe when several processes build at once (each saves to a private
    folder, then renames it into place)."""
    org = Path(root) / ORG
    org.mkdir(parents=True, exist_ok=True)
    errors = {}
    for name, build in builders().items():
        folder = org / name
        if folder.exists():
            continue
        tmp = org / f".{name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            build(tmp)
        except Exception as error:  # reported by the harness; the tests that load it fail in every mode
            errors[name] = f"{type(error).__name__}: {error}"
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    return errors


def default_root() -> Path:
    """`<trl_ragen2 cache>/trl-dropin-standins-v<N>`: built once per machine, reused by later runs."""
    from trl_ragen2_envs.cache import cache_root

    return Path(cache_root()) / f"trl-dropin-standins-v{STANDIN_VERSION}"
