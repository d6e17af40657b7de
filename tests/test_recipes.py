"""The recipes run end to end on CPU with the tiny offline model (subprocesses, as a user launches them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"


def run(command, tmp_path, timeout=600):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "TRL_RAGEN2_CACHE": str(tmp_path / "cache"),
    }
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout


def test_webshop_cpu_preset_two_steps(tmp_path):
    out = tmp_path / "webshop"
    stdout = run(
        [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", str(RECIPES / "webshop.py"),
         "--config", str(RECIPES / "configs" / "webshop_cpu.yaml"), "--max_steps", "2", "--eval_steps", "2",
         "--output_dir", str(out)],
        tmp_path,
    )  # fmt: skip
    assert "steps: 2" in stdout
    summary = json.loads((out / "run_summary.json").read_text())
    catalogue = summary["details"]["Catalogue"]
    assert catalogue.startswith(("webshop-small-1k", "procedural-"))
    metrics = summary["final_metrics"]
    assert "ragen2/filter/kept_fraction" in metrics and "eval_ragen2/env/webshop/success_rate" in metrics
    card = (out / "README.md").read_text()
    assert "2604.06268" in card and f"Catalogue: {catalogue}" in card
    assert (out / "plots" / "training_curves.png").stat().st_size > 0
    assert (out / "metrics.jsonl").exists() and (out / "model.safetensors").exists()


@pytest.mark.parametrize(
    "task, extra",
    [
        ("sokoban", []),
        ("frozen_lake", []),
        ("countdown", []),
        ("metamathqa", []),
        ("searchqa", []),
        ("deepcoder", []),
        ("sokoban", ["--algorithm", "ppo"]),
        ("frozen_lake", ["--use_peft", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"]),
    ],
    ids=[
        "sokoban",
        "frozen_lake",
        "countdown",
        "metamathqa",
        "searchqa",
        "deepcoder",
        "sokoban-ppo",
        "frozen_lake-lora",
    ],
)
def test_task_recipe_one_step(tmp_path, task, extra):
    out = tmp_path / task
    stdout = run(
        [sys.executable, str(RECIPES / f"{task}.py"), "--config", str(RECIPES / "configs" / "agent_cpu.yaml"),
         "--max_steps", "1", "--eval_strategy", "no", "--write_plots", "false", "--output_dir", str(out), *extra],
        tmp_path,
    )  # fmt: skip
    assert "steps: 1" in stdout
    summary = json.loads((out / "run_summary.json").read_text())
    assert f"ragen2/env/{task}/success_rate" in summary["final_metrics"]
    if task == "deepcoder":  # how the programs were isolated, on the model card too
        isolation = summary["details"]["Sandbox isolation"]
        assert (
            isolation.startswith(("bubblewrap", "unshare"))
            and f"Sandbox isolation: {isolation}" in (out / "README.md").read_text()
        )
    if "ppo" in extra:
        assert summary["details"]["Algorithm"] == "ppo" and "ragen2/ppo/value_loss" in summary["final_metrics"]
        assert (out / "critic" / "config.json").exists()
    if "--use_peft" in extra:
        assert (out / "adapter_config.json").exists()


def test_recipe_rejects_bad_algorithm(tmp_path):
    result = subprocess.run(
        [sys.executable, str(RECIPES / "sokoban.py"), "--algorithm", "dqn", "--output_dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    assert "algorithm must be one of ('grpo', 'ppo'), got 'dqn'" in result.stderr


@pytest.mark.parametrize("config", sorted(p.name for p in (RECIPES / "configs").glob("*.yaml")))
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_every_config_parses_for_both_algorithms(config, algorithm):
    from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, trainer_classes

    argv = ["--config", str(RECIPES / "configs" / config), "--algorithm", algorithm]
    argv += ["--bf16", "false", "--use_cpu", "true"]  # the GPU presets, checked on this CPU machine
    script_args, training_args, _ = parse_recipe_args(AgentScriptArguments, argv)
    assert isinstance(training_args, trainer_classes(algorithm)[1])
    assert script_args.algorithm == algorithm
    assert training_args.reward_variance_filtering == "top_p"
