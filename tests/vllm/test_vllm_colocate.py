"""The trainers with TRL's vLLM colocate engine on vLLM's CPU build: the engine samples from the current policy.

Each case is one short run of `tests/vllm/colocate_run.py` in its own process (vLLM keeps one engine per process). A
stale engine would be off by what training moved the policy (`engine_vs_initial_max`, 0.2 to 1.5 nats here), and
TRL's own importance-sampling metric would show it at every step after the first. Both engines run float32, so the
tolerance is float32's: 1e-4 nats per token (measured: at most 2e-6).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

WORKER = Path(__file__).with_name("colocate_run.py")
FLOAT32_TOLERANCE = 1e-4


def run(tmp_path, *flags):
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(WORKER), *flags, "--steps", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("flags", [("--trainer", "grpo"), ("--trainer", "ppo"), ("--trainer", "grpo", "--lora")])
def test_engine_samples_from_the_current_policy(tmp_path, flags):
    result = run(tmp_path, *flags)
    assert result["steps"] == 3
    # every step: vLLM's sampling log-probs against the training model's on the same tokens (TRL's IS metric)
    assert len(result["sampling_logp_difference_max"]) == 3
    assert max(result["sampling_logp_difference_max"]) < FLOAT32_TOLERANCE
    assert min(result["importance_sampling_ratio_min"]) > 1 - FLOAT32_TOLERANCE
    # after the run: fixed sequences, engine against the trained weights and against the initial ones
    assert result["engine_vs_policy_max"] < FLOAT32_TOLERANCE
    assert result["engine_vs_initial_max"] > 100 * FLOAT32_TOLERANCE  # training moved the policy: a stale engine fails
    # the MI diagnostics scored through the engine (mi_engine='vllm'), never NaN, as the transformers scorer does
    assert result["scorer_vs_transformers_max"] < FLOAT32_TOLERANCE
    assert result["mi_num_pairs"] == [8.0, 8.0, 8.0]
    assert not result["nan_in_history"]


def test_refill_rounds_generate_through_the_engine_with_the_current_weights(tmp_path):
    result = run(tmp_path, "--trainer", "grpo", "--refill")
    assert result["steps"] == 3
    # every step: a round keeps at most its "Go left or right?" group, so the target of two groups takes at least a
    # second round (a third when a group's lengths happen not to vary); every round sampled from the current
    # weights (TRL's importance-sampling metric covers every round's rows)
    assert [rounds >= 2 for rounds in result["generation_rounds"]] == [True] * 3 and max(result["kept_rows"]) > 0
    assert max(result["sampling_logp_difference_max"]) < FLOAT32_TOLERANCE
    assert result["engine_vs_policy_max"] < FLOAT32_TOLERANCE


def test_multi_turn_rollout_generates_through_the_engine(tmp_path):
    result = run(tmp_path, "--trainer", "ppo", "--multi_turn", "--lora")
    assert result["steps"] == 3
    assert len(result["sampling_logp_difference_max"]) == 3
    assert max(result["sampling_logp_difference_max"]) < FLOAT32_TOLERANCE
    assert result["engine_vs_policy_max"] < FLOAT32_TOLERANCE
    assert result["scorer_vs_transformers_max"] < FLOAT32_TOLERANCE
    assert result["mi_num_pairs"] == [8.0, 8.0, 8.0]
    assert not result["nan_in_history"]


def test_auto_engine_probes_each_scope_on_the_real_engine(tmp_path):
    """mi_engine='auto' on a vLLM run: both engines score a slice of each scope's first diagnostic, timed, and the
    faster one (which one depends on the machine) scores that scope from then on; every diagnostic gives numbers."""
    result = run(tmp_path, "--trainer", "grpo", "--multi_turn", "--mi_engine", "auto")
    rates = result["mi_engine_rates"]
    assert set(rates["first_turn"]) == {"transformers", "vllm"} and min(rates["first_turn"].values()) > 0
    chosen = float(rates["first_turn"]["vllm"] < rates["first_turn"]["transformers"])
    assert result["mi_vllm_engine"]["first_turn"] == [chosen] * 3
    # the trajectory scope is probed on the first diagnostic where it scores pairs of its own (not those whose every
    # pair was a first-turn pair, already scored); until then transformers scores it, after that its choice holds
    trajectory = result["mi_vllm_engine"]["trajectory"]
    if "trajectory" in rates:
        chosen = float(rates["trajectory"]["vllm"] < rates["trajectory"]["transformers"])
        assert trajectory in ([0.0] * k + [chosen] * (3 - k) for k in range(3)), (trajectory, rates)
    else:
        assert trajectory == [0.0, 0.0, 0.0], (trajectory, rates)
    assert result["mi_num_pairs"] == [8.0, 8.0, 8.0]
    assert not result["nan_in_history"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_each_with_its_own_engine(tmp_path):
    """Colocate under torchrun with 2 CPU processes (gloo): each process holds an engine, generates its own shard of
    the prompts and syncs its own replica's weights."""
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), str(WORKER), "--trainer", "grpo", "--steps", "2", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    ranks = [json.loads((tmp_path / f"result.json.rank{rank}").read_text()) for rank in range(2)]
    for result in ranks:
        assert result["world_size"] == 2 and result["steps"] == 2
        assert max(result["sampling_logp_difference_max"]) < FLOAT32_TOLERANCE
        assert result["engine_vs_policy_max"] < FLOAT32_TOLERANCE
        assert result["engine_vs_initial_max"] > 100 * FLOAT32_TOLERANCE
        assert result["scorer_vs_transformers_max"] < FLOAT32_TOLERANCE
        # 2 prompts x 4 rollouts per process: the filter ranks the 4 groups of both processes together
        assert result["num_groups"] == [4.0, 4.0]
    first, second = (result["trained_logps"] for result in ranks)
    pairs = [(a, b) for row_a, row_b in zip(first, second, strict=True) for a, b in zip(row_a, row_b, strict=True)]
    assert max(abs(a - b) for a, b in pairs) < FLOAT32_TOLERANCE
