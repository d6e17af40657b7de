"""The slow tier's CPU smoke versions of docs/reproduction.md: each table's command, read from the page, one step on
the in-process tiny model, asserting that the table's setting took effect.

A smoke run keeps the command's own flags (algorithm, filter rule and its values, grouping, metric) and swaps the
paper config for the CPU preset (`agent_cpu.yaml`, without its `loss_type`, so `--algorithm` sets it as in the paper
configs), then shrinks the run: one step of 8 rollouts, 2 turns of 16 tokens, no diagnostics or evaluation. The
recipe's `main` runs in this process (no interpreter start, no second import of torch and TRL).

The tiny model earns the same return in every rollout of a group, so the assertions hold whatever the rewards are:
RAGEN's softmax rule with zero groups kept trains on every group of such a batch (the paper configs' linear rule
would skip the step), a percentile band keeps its share of the ranked groups, `within_group` keeps k rollouts of
every group.
"""

import json
import math

import pytest

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredPPOConfig
from trl_ragen2.grpo.algorithms import PAPER_ALGORITHMS

from .reproduction_commands import CONFIGS, command, load_recipe


pytestmark = pytest.mark.slow

# one optimizer step on one generation of 8 rollouts; later flags win, so a test's own overrides go after these
SMOKE = ["--max_steps", "1", "--eval_strategy", "no", "--write_plots", "false", "--mi_diagnostics", "false",
         "--num_train_prompts", "8", "--max_turns", "2", "--max_tokens_per_turn", "16",
         "--per_device_train_batch_size", "8", "--steps_per_generation", "1",
         "--gradient_accumulation_steps", "1"]  # fmt: skip
DROPPED = ("--config", "--output_dir", "--model_name_or_path")  # the paper config, its folder, its model


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """The CPU preset without `loss_type: grpo`, so that `--algorithm` sets the loss as in the paper configs."""
    text = (CONFIGS / "agent_cpu.yaml").read_text(encoding="utf-8")
    assert "\nloss_type: grpo\n" in text
    path = tmp_path_factory.mktemp("preset") / "agent_cpu_paper_loss.yaml"
    path.write_text(text.replace("\nloss_type: grpo\n", "\n"), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def offline_cache(tmp_path_factory, monkeypatch):
    """The tiny model is saved once, in a cache of this module's own (never the user's)."""
    monkeypatch.setenv("TRL_RAGEN2_CACHE", str(tmp_path_factory.getbasetemp() / "reproduction-cache"))


def smoke(name: str, preset, tmp_path, *overrides: str):
    """Run the page's command `outputs/<name>` at CPU size: `(script args, trainer config, log history, summary)`."""
    page = command(name)
    args, skip = [], False
    for arg in page.args:
        if skip or arg in DROPPED:
            skip = not skip
            continue
        args.append(arg)
    out = tmp_path / name.replace("/", "-")
    argv = ["--config", str(preset), *args, *SMOKE, *overrides, "--output_dir", str(out)]
    recipe = load_recipe(page.recipe)
    script_args, training_args, model_args = recipe.parse_args(argv)
    recipe.main(script_args, training_args, model_args)
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    summary = json.loads((out / "run_summary.json").read_text())
    return script_args, training_args, history, summary


def train_log(history: list[dict]) -> dict:
    """The training step's log record (the one holding the filter's keys)."""
    (record,) = [entry for entry in history if {"ragen2/filter/num_groups", "ragen2/ppo/value_loss"} & set(entry)]
    return record


# ---------------------------------------------------------------------------------------------------------------
# Table 4: the four algorithms with RAGEN's main-table filter


@pytest.mark.parametrize("algorithm", ["ppo", "dapo", "grpo", "drgrpo"])
def test_table_4_algorithm_with_ragens_filter(algorithm, preset, tmp_path):
    script_args, training_args, history, summary = smoke(f"table4/sokoban-{algorithm}-filter", preset, tmp_path)
    critic = algorithm in ("ppo", "dapo")
    assert type(training_args) is (SNRFilteredPPOConfig if critic else SNRFilteredGRPOConfig)
    assert all(getattr(training_args, key) == value for key, value in PAPER_ALGORITHMS[algorithm].items())
    assert (training_args.reward_variance_metric, training_args.reward_variance_top_p_mode) == ("std", "softmax")
    assert training_args.reward_variance_include_zero and training_args.reward_variance_top_p == 0.9
    assert summary["details"]["Algorithm"] == algorithm
    log = train_log(history)
    assert log["ragen2/filter/num_groups"] == 2 and log["ragen2/filter/empty"] == 0  # 8 rollouts, G = 4
    if log["ragen2/filter/zero_variance_groups"] == log["ragen2/filter/num_groups"]:
        assert log["ragen2/filter/kept_fraction"] == 1.0  # softmax with zero groups kept: every group trains
    assert ("ragen2/ppo/value_loss" in log) is critic


# ---------------------------------------------------------------------------------------------------------------
# Table 5: grouping layouts (PPO)


@pytest.mark.parametrize("name, groups", [("table5/64x2-filter", 4), ("table5/32x4-filter", 2),
                                          ("table5/128x1-nofilter", None)])  # fmt: skip
def test_table_5_layout(name, groups, preset, tmp_path):
    """8 rollouts in P = 8 / G prompt groups; one rollout per prompt turns the filter off (no groups)."""
    _, training_args, history, _ = smoke(name, preset, tmp_path)
    log = train_log(history)
    assert type(training_args) is SNRFilteredPPOConfig and "ragen2/ppo/value_loss" in log
    if groups is None:
        assert training_args.num_generations == 1 and training_args.reward_variance_filtering is None
        assert not any(key.startswith("ragen2/filter/") for entry in history for key in entry)
    else:
        assert training_args.num_generations == 8 // groups
        assert (log["ragen2/filter/num_groups"], log["ragen2/filter/kept_rows"]) == (groups, 8)


# ---------------------------------------------------------------------------------------------------------------
# Table 6: one reward-variance quartile


@pytest.mark.parametrize("quartile", ["q1", "q4"])
def test_table_6_quartile_keeps_a_quarter_of_the_groups(quartile, preset, tmp_path):
    """4 groups of 2 (zero groups are candidates), so each quartile band is one group of the ranking."""
    _, training_args, history, _ = smoke(f"table6/{quartile}", preset, tmp_path, "--num_generations", "2")
    assert training_args.reward_variance_filtering == "percentile_range"
    band = (training_args.reward_variance_percentile_low, training_args.reward_variance_percentile_high)
    assert band == {"q1": (0.0, 0.25), "q4": (0.75, 1.0)}[quartile]
    log = train_log(history)
    assert log["ragen2/filter/num_groups"] == 4 and log["ragen2/filter/kept_groups"] == 1
    assert log["ragen2/filter/kept_fraction"] == log["ragen2/filter/kept_rollout_fraction"] == 0.25
    assert log["ragen2/filter/rollouts_per_group"] == 2 and log["ragen2/filter/kept_rows"] == 2


# ---------------------------------------------------------------------------------------------------------------
# Table 7: trajectory-level filtering


def test_table_7_within_group_keeps_half_of_every_group(preset, tmp_path):
    _, training_args, history, _ = smoke("table7/trajectory-level", preset, tmp_path)
    assert training_args.reward_variance_filtering == "within_group"
    log = train_log(history)
    assert log["ragen2/filter/kept_fraction"] == 1.0  # every prompt
    assert log["ragen2/filter/rollouts_per_group"] == 2 and log["ragen2/filter/kept_rollout_fraction"] == 0.5
    assert (log["ragen2/filter/num_groups"], log["ragen2/filter/kept_rows"]) == (2, 4)


# ---------------------------------------------------------------------------------------------------------------
# Table 8: FrozenLake, GRPO, several updates per iteration


def test_table_8_frozen_lake_grpo_layout(preset, tmp_path):
    """G = 8 as on the page; one generation of 4 x 4 = 16 rollouts (2 groups) feeds 4 optimizer steps of 4, as the
    page's 4 x 64 feeds 8 steps of 32. The Std/Mean indicator is logged (NaN, logged as None, when no group varies)."""
    overrides = ("--per_device_train_batch_size", "4", "--steps_per_generation", "4", "--max_steps", "4")
    _, training_args, history, summary = smoke("table8/frozen_lake-32x8-filter", preset, tmp_path, *overrides)
    assert type(training_args) is SNRFilteredGRPOConfig and training_args.num_generations == 8
    assert summary["details"] == {"Environment": "frozen_lake", "Algorithm": "grpo"}
    steps = [entry for entry in history if "loss" in entry]
    assert [entry["step"] for entry in steps] == [1, 2, 3, 4]
    filtered = [entry for entry in steps if "ragen2/filter/num_groups" in entry]
    assert [entry["ragen2/filter/num_groups"] for entry in filtered][:1] == [2]
    indicator = [entry.get("ragen2/filter/std_over_mean", "absent") for entry in filtered]
    assert indicator and "absent" not in indicator
    assert all(value is None or math.isfinite(value) for value in indicator)
