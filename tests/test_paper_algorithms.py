"""The paper's Table 4 algorithms in the recipes: `--algorithm` sets RAGEN's loss aggregation and advantage.

The expected settings are written out by hand from RAGEN's algorithm comparison (branch `feature/loss_scaling`,
`scripts/runs/run_main_table_diff_algo.sh`):
  PPO:    adv_estimator=gae,  loss_agg_mode=token-mean
  DAPO:   as PPO, plus clip_ratio_low=0.2, clip_ratio_high=0.28, no KL loss, no KL in the reward
  GRPO:   adv_estimator=grpo, norm_adv_by_std_in_grpo=True,  loss_agg_mode=seq-mean-token-mean
  DrGRPO: adv_estimator=grpo, norm_adv_by_std_in_grpo=False, loss_agg_mode=seq-mean-token-sum
and TRL's names for them: token-mean = "dapo", seq-mean-token-mean = "grpo", seq-mean-token-sum = "dr_grpo" (up
to the constant 1 / max_completion_length), GAE = SNRFilteredPPOConfig, norm_adv_by_std_in_grpo = scale_rewards
"group" (True) or "none" (False).
"""

from pathlib import Path

import pytest

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredPPOConfig
from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args


CONFIGS = Path(__file__).resolve().parent.parent / "recipes" / "configs"
CPU = ["--bf16", "false", "--use_cpu", "true"]  # the GPU presets, parsed on this CPU machine

EXPECTED = {
    "ppo": (SNRFilteredPPOConfig, "dapo", "none"),
    "dapo": (SNRFilteredPPOConfig, "dapo", "none"),
    "grpo": (SNRFilteredGRPOConfig, "grpo", "group"),
    "drgrpo": (SNRFilteredGRPOConfig, "dr_grpo", "none"),
}


def parse(*args, config="sokoban.yaml"):
    return parse_recipe_args(
        AgentScriptArguments, CONFIGS / "sokoban.yaml", ["--config", str(CONFIGS / config), *CPU, *args]
    )


@pytest.mark.parametrize("algorithm", list(EXPECTED))
def test_each_algorithm_gets_ragens_aggregation_and_advantage(algorithm):
    script_args, training_args, _ = parse("--algorithm", algorithm)
    config_class, loss_type, scale_rewards = EXPECTED[algorithm]
    assert type(training_args) is config_class
    assert (training_args.loss_type, training_args.scale_rewards) == (loss_type, scale_rewards)
    assert script_args.uses_critic == (config_class is SNRFilteredPPOConfig)
    # the paper's clip and no KL, for every algorithm (RAGEN's base config; DAPO's script flags repeat them)
    assert (training_args.epsilon, training_args.epsilon_high, training_args.beta) == (0.2, 0.28, 0.0)
    if config_class is SNRFilteredPPOConfig:
        assert training_args.kl_in_reward is False


def test_the_yaml_and_the_command_line_override_the_algorithm(tmp_path):
    _, training_args, _ = parse("--algorithm", "drgrpo", "--loss_type", "bnpo")
    assert (training_args.loss_type, training_args.scale_rewards) == ("bnpo", "none")
    _, training_args, _ = parse("--algorithm", "drgrpo", config="agent_cpu.yaml")  # the preset sets loss_type: grpo
    assert (training_args.loss_type, training_args.scale_rewards) == ("grpo", "none")


def test_an_unknown_algorithm_lists_the_four():
    with pytest.raises(ValueError, match=r"algorithm must be one of \('grpo', 'drgrpo', 'ppo', 'dapo'\), got 'sac'"):
        AgentScriptArguments(algorithm="sac")


# ---------------------------------------------------------------------------------------------------------------
# Grouping layouts (Tables 5 and 8; recipes/README.md): 128 trajectories as P prompts x G rollouts


@pytest.mark.parametrize("prompts, generations", [(8, 16), (16, 8), (32, 4), (64, 2), (128, 1)])
def test_grouping_layouts_keep_128_trajectories_and_4_updates_on_one_gpu(prompts, generations):
    algorithm = "ppo" if generations == 1 else "grpo"  # one rollout per prompt: classic PPO, no groups to filter
    _, args, _ = parse("--algorithm", algorithm, "--num_generations", str(generations))
    assert args.generation_batch_size == 128  # per_device_train_batch_size x steps_per_generation x 1 process
    assert args.generation_batch_size // args.num_generations == prompts
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == 32  # the paper's mini-batch
    assert args.steps_per_generation // args.gradient_accumulation_steps == 4  # updates per generation
    assert (args.reward_variance_filtering is None) == (generations == 1)
