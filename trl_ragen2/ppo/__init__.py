"""`SNRFilteredPPOTrainer` and its config: RAGEN-2's PPO, a critic and per-token GAE on top of the SNR-filtered
GRPO trainer.

- `ppo_config`: `SNRFilteredPPOConfig`, the GRPO config plus the critic, GAE and value-loss fields;
- `ppo_trainer`: the trainer (a subclass of `trl_ragen2.grpo.grpo_trainer.SNRFilteredGRPOTrainer`);
- `critic`: the value model and how per-token values are read from it;
- `gae`: reward placement, GAE over model tokens, whitening and the clipped value loss (pure torch).
"""
