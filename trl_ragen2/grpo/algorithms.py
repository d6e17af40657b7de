"""The paper's Table 4 algorithms (PPO, DAPO, GRPO, Dr.GRPO) as settings of this library's trainer configs.

RAGEN's algorithm comparison (branch `feature/loss_scaling`, `scripts/runs/run_main_table_diff_algo.sh`) differs
between the four algorithms only in the advantage, the loss aggregation and DAPO's clip and KL flags. In TRL's terms:

- loss aggregation, TRL's `loss_type` against RAGEN's `loss_agg_mode`:
    token-mean          -> "dapo"    (token mean over the mini-batch)
    seq-mean-token-mean -> "grpo"    (token mean per rollout, then the mean over rollouts)
    seq-mean-token-sum  -> "dr_grpo" (token sum per rollout, mean over rollouts, divided by max_completion_length:
                                      RAGEN's rule times the constant 1 / max_completion_length)
- advantage: GAE (a critic: `SNRFilteredPPOTrainer`) for PPO and DAPO; the group advantage for GRPO
  (`norm_adv_by_std_in_grpo=True`: `scale_rewards="group"`) and Dr.GRPO (False: `"none"`).

The recipes' `--algorithm` picks the trainer config (`CRITIC_ALGORITHMS` take `SNRFilteredPPOConfig`) and applies the
algorithm's settings as defaults, below the `--config` YAML and the command line (`trl_ragen2.recipe_utils`).
"""

from __future__ import annotations


PAPER_ALGORITHMS = {
    "grpo": {"loss_type": "grpo", "scale_rewards": "group"},
    "drgrpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
    "ppo": {"loss_type": "dapo"},
    # DAPO's flags in RAGEN's script: clip 0.2 / 0.28, no KL loss, no KL in the reward
    "dapo": {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28, "beta": 0.0, "kl_in_reward": False},
}
ALGORITHMS = tuple(PAPER_ALGORITHMS)
CRITIC_ALGORITHMS = ("ppo", "dapo")  # trained by SNRFilteredPPOTrainer (a critic and GAE)
