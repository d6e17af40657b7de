#!/usr/bin/env bash
# GPU checks of the cross-scorers and of the trainers' vLLM colocate path, in one go, from the repository root:
#
#   bash tests/gpu/run_gpu_checks.sh
#
# Uses the machine's Python (override with PYTHON=...). Installs what is missing from PyPI when it can (vLLM brings
# a CUDA torch); without network access the vLLM checks are skipped and the CUDA transformers checks still run.
# Nothing is downloaded from the Hugging Face Hub: the model is a tiny random Qwen2 written to a temporary folder.
# Then the real-engine tests of tests/vllm (colocate GRPO, PPO, LoRA, multi-turn, two processes; the scorer against
# transformers), which pick CUDA when it is there. Budget: about 5 minutes once vLLM is installed; the vLLM install
# itself can take several minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."

PY=${PYTHON:-python3}
INSTALL_TIMEOUT=${INSTALL_TIMEOUT:-480}
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
export VLLM_ENABLE_V1_MULTIPROCESSING=0  # keep the engine in the test process
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # import trl_ragen2 from this checkout, no install needed

have() { "$PY" -c "import $1" >/dev/null 2>&1; }

if ! have vllm; then
    echo "== installing vLLM from PyPI (timeout ${INSTALL_TIMEOUT}s)"
    timeout "$INSTALL_TIMEOUT" "$PY" -m pip install -q "vllm" || echo "== vLLM not installed: its checks will be skipped"
fi
for package in torch transformers safetensors pytest; do
    have "$package" || timeout 300 "$PY" -m pip install -q "$package" || echo "== could not install $package"
done

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

timeout 600 "$PY" -m pytest tests/gpu -m gpu -o addopts="" -p no:cacheprovider -v -s -rs
status=$?
echo "== GPU checks finished with exit status $status"
if have vllm; then
    timeout 480 "$PY" -m pytest tests/vllm -m vllm -o addopts="" -p no:cacheprovider \
        -p no:xdist -v -rs
    vllm_status=$?
    echo "== vLLM engine checks finished with exit status $vllm_status"
    [ "$status" -eq 0 ] && status=$vllm_status
fi
exit $status
