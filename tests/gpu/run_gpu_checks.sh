#!/usr/bin/env bash
# GPU checks of the cross-scorers and of the trainers' vLLM colocate path, in one go, from the repository root:
#
#   bash tests/gpu/run_gpu_checks.sh
#
# Uses the machine's Python (override with PYTHON=...). Installs what is missing from PyPI when it can (vLLM brings
# a CUDA torch); without network access the vLLM checks are skipped and the CUDA transformers checks still run.
# Nothing is downloaded from the Hugging Face Hub: the model is a tiny random Qwen2 written to a temporary folder.
# Then the real-engine tests of tests/vllm (colocate GRPO, PPO, LoRA, multi-turn, refill rounds, two processes; the
# scorer against transformers), which pick CUDA when it is there. vLLM is pinned to the range TRL 1.16 supports
# (pyproject's `vllm` extra); an unpinned install pulls a newer vLLM with its own CUDA torch. The whole script fits a
# 12-minute window: install at most 5 minutes, GPU checks 2, vLLM checks 4.5; it prints how long each part took.
set -uo pipefail
cd "$(dirname "$0")/../.."

PY=${PYTHON:-python3}
INSTALL_TIMEOUT=${INSTALL_TIMEOUT:-300}
VLLM_SPEC="vllm>=0.22.0,<=0.31.0"  # keep equal to pyproject.toml's `vllm` extra
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
export VLLM_ENABLE_V1_MULTIPROCESSING=0  # keep the engine in the test process
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # import trl_ragen2 from this checkout, no install needed

have() { "$PY" -c "import $1" >/dev/null 2>&1; }
started=$SECONDS
part() { echo "== $1 took $((SECONDS - started)) s"; started=$SECONDS; }

if ! have vllm; then
    echo "== installing $VLLM_SPEC from PyPI (timeout ${INSTALL_TIMEOUT}s)"
    timeout "$INSTALL_TIMEOUT" "$PY" -m pip install -q "$VLLM_SPEC" || echo "== vLLM not installed: its checks will be skipped"
fi
for package in torch transformers safetensors pytest; do
    have "$package" || timeout 120 "$PY" -m pip install -q "$package" || echo "== could not install $package"
done
part "installing"

"$PY" - <<'EOF'
import torch
print("torch", torch.__version__, "| CUDA", torch.cuda.is_available(), "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
try:
    import vllm
    print("vllm", vllm.__version__)
except Exception as exc:
    print("vllm unavailable:", exc)
import transformers
print("transformers", transformers.__version__)
EOF

timeout 120 "$PY" -m pytest tests/gpu -m gpu -o addopts="" -p no:cacheprovider -v -s -rs
status=$?
echo "== GPU checks finished with exit status $status"
part "the GPU checks"
if have vllm; then
    timeout 270 "$PY" -m pytest tests/vllm -m "vllm and not slow" -o addopts="" -p no:cacheprovider \
        -p no:xdist -v -rs
    vllm_status=$?
    echo "== vLLM engine checks (refill rounds included) finished with exit status $vllm_status"
    part "the vLLM engine checks"
    [ "$status" -eq 0 ] && status=$vllm_status
fi
exit $status
