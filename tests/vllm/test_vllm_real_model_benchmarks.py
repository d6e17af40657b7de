"""The real-model benchmarks end to end through vLLM on SmolLM2, at their quick sizes (slow: each starts several
engines, a few minutes apiece on 2 cores; `make slow_vllm_tests`).

- `benchmarks/learning_cpu.py --quick --generation vllm`: base and warm-start evaluations through a standalone engine,
  GRPO filtered and unfiltered through TRL's colocate engine, their evaluations through it.
- `benchmarks/paper_settings_cpu.py --quick --generation vllm`: the paper's settings, PPO with its critic and the
  entropy bonus, GRPO with the entropy bonus and KL, each filtered and unfiltered, every stage its own process; a
  rerun skips the finished stages, rebuilds missing warm-start weights (refusing any that differ from the recorded
  ones); the report over the seed.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest


pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}


def run(*args, cwd):
    done = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def test_learning_benchmark_runs_through_vllm(tmp_path):
    out = tmp_path / "quick.json"
    run(ROOT / "benchmarks" / "learning_cpu.py", "--quick", "--generation", "vllm", "--out", out, cwd=ROOT)
    results = json.loads(out.read_text())
    assert results["settings"]["generation"] == "vllm"
    assert sorted(results["eval"]) == ["base", "grpo_filtered", "grpo_unfiltered", "warm_start"]
    assert all(e["episodes"] == 4 and 0 <= e["success"] <= 1 for e in results["eval"].values())
    (filtered,) = results["logs"]["grpo_filtered"]
    assert "ragen2/filter/kept_fraction" in filtered


def test_paper_settings_benchmark_runs_every_stage_through_vllm_and_resumes(tmp_path):
    script = ROOT / "benchmarks" / "paper_settings_cpu.py"
    common = ["--quick", "--generation", "vllm", "--run_dir", tmp_path / "runs", "--seed", "0"]
    run(script, *common, cwd=ROOT)
    seed_dir = tmp_path / "runs" / "seed0"
    stages = ["warm", "ppo_filtered", "ppo_unfiltered", "grpo_filtered", "grpo_unfiltered"]
    assert sorted(p.stem for p in seed_dir.glob("*.json")) == sorted(["settings", *stages])
    results = {name: json.loads((seed_dir / f"{name}.json").read_text()) for name in stages}
    for name in stages[1:]:
        logs = results[name]["logs"]
        assert len(logs) == 2 and all(math.isfinite(entry["loss"]) for entry in logs)
        outcomes = results[name]["eval"]["outcomes"]  # one per held-out map, for the report's McNemar test
        assert len(outcomes) == 4 and sum(outcomes) == round(4 * results[name]["eval"]["success"])
        assert ("ragen2/filter/kept_fraction" in logs[0]) == name.endswith("_filtered")
        assert "ragen2/mi/first_turn/retrieval_acc" in logs[0]
    assert results["ppo_filtered"]["fields"] == {"algorithm": "ppo", "entropy_coef": 0.001, "beta": 0.0,
                                                 "loss_type": "dapo", "critic_learning_rate": 1e-4}  # fmt: skip
    assert "ragen2/ppo/value_loss" in results["ppo_unfiltered"]["logs"][0]
    assert results["grpo_filtered"]["fields"]["beta"] == 0.001
    assert "kl" in results["grpo_unfiltered"]["logs"][0]
    # a rerun finds every stage done and starts nothing
    assert run(script, *common, cwd=ROOT).count("done already") == len(stages)
    # only the stage files kept (another machine): the warm start is rebuilt bit for bit, the missing arm runs again
    subprocess.run(["rm", "-r", seed_dir / "warm_start", seed_dir / "ppo_unfiltered.json"], check=True)
    rerun = run(script, *common, cwd=ROOT)
    assert "warm start weights missing, rebuilding them" in rerun and (seed_dir / "ppo_unfiltered.json").exists()
    assert json.loads((seed_dir / "warm.json").read_text()) == results["warm"]
    # weights that do not reproduce the recorded ones are refused before any arm runs
    subprocess.run(["rm", "-r", seed_dir / "warm_start", seed_dir / "ppo_unfiltered.json"], check=True)
    (seed_dir / "warm.json").write_text(json.dumps({**results["warm"], "warm_start_sha256": "0" * 64}))
    refused = subprocess.run([sys.executable, script, *map(str, common)], cwd=ROOT, env=ENV, capture_output=True,
                             text=True)  # fmt: skip
    assert refused.returncode != 0 and "differ from the recorded ones" in refused.stderr
    assert not (seed_dir / "ppo_unfiltered.json").exists()
    (seed_dir / "warm.json").write_text(json.dumps(results["warm"]))
    report = run(script, "--report", tmp_path / "runs", "--figures", tmp_path / "figures", cwd=ROOT)
    # the refused rerun left PPO without its unfiltered arm: only GRPO pairs, every arm against the warm start
    assert "grpo: filtered − unfiltered, paired by seed (0)" in report and "ppo: filtered" not in report
    assert "ppo_filtered − warm start, paired by seed (0)" in report
    assert (tmp_path / "figures" / "paper_settings_curves.png").stat().st_size > 0
