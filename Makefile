# Developer shortcuts. `make test` is what CI runs (after installing `.[dev]`).
.PHONY: test vllm_tests slow_vllm_tests slow_tests gpu_tests trl_dropin_tests quality style bench

PYTEST_WORKERS ?= 2

# The vLLM tests' environment builds in the background (niced) while the main suite runs; its log is shown if it fails.
test:
	@nice -n 10 bash tests/vllm/build_vllm_venv.sh > .vllm-venv-build.log 2>&1 & build=$$!; \
	OMP_NUM_THREADS=1 python -m pytest -n $(PYTEST_WORKERS) -m "not slow and not gpu and not vllm" --timeout 900; \
	suite=$$?; \
	if ! wait $$build; then cat .vllm-venv-build.log; echo "building the vLLM test environment failed"; exit 1; fi; \
	tail -n 1 .vllm-venv-build.log; \
	if [ $$suite -ne 0 ]; then exit $$suite; fi
	bash tests/vllm/run_vllm_tests.sh
	TRL_DROPIN=filter_off OMP_NUM_THREADS=1 python -m pytest tests/trl_upstream -m slow -n $(PYTEST_WORKERS) --timeout 900 -q -p no:cacheprovider

vllm_tests:
	bash tests/vllm/run_vllm_tests.sh

slow_vllm_tests:
	bash tests/vllm/run_vllm_tests.sh -m "vllm and slow" --timeout 3600

slow_tests:
	python -m pytest -m "slow" --timeout 3600

gpu_tests:
	bash tests/gpu/run_gpu_checks.sh

# TRL's own GRPO tests with SNRFilteredGRPOTrainer swapped in: plain, filter off, filter on (tests/trl_upstream/README.md).
trl_dropin_tests:
	OMP_NUM_THREADS=1 python tests/trl_upstream/run_dropin.py

quality:
	ruff check .
	ruff format --check .

style:
	ruff check --fix .
	ruff format .

bench:
	python benchmarks/filter_step_time.py
	python benchmarks/env_throughput.py
	python benchmarks/webshop.py
	python benchmarks/cross_scoring.py
	python benchmarks/ppo_step_time.py
