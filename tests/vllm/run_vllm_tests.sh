#!/usr/bin/env bash
# The real-engine vLLM tests (marker `vllm`), on vLLM's CPU build, in a virtual environment of their own
# (`tests/vllm/build_vllm_venv.sh` builds it when missing):
#
#   bash tests/vllm/run_vllm_tests.sh                                      (`make test` runs it after the main suite)
#   bash tests/vllm/run_vllm_tests.sh -m "vllm and slow" --timeout 3600    (`make slow_vllm_tests`: the real-model
#                                                                           benchmarks on SmolLM2)
set -euo pipefail
cd "$(dirname "$0")/../.."

bash tests/vllm/build_vllm_venv.sh
VENV=${VLLM_VENV:-.venv-vllm}
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$VENV/bin/python" -m pytest tests/vllm -m "vllm and not slow" -o addopts="-p no:cacheprovider" \
    -p no:xdist --timeout 900 -q "$@"
