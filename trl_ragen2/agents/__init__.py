"""The multi-turn agent loop: RAGEN's turn protocol over the environments of `trl_ragen2_envs`.

- `rollout`: the turn loop over a batch of episodes (`RolloutEngine`, `RolloutConfig`, `EpisodeSpec`);
- `generation`: the generation backends it calls each turn (the trainer's own, a plain model, a scripted policy);
- `rollout_func`: the loop as a TRL `rollout_func` (`RagenRollout`), its reward `env_return`, per-environment
  metrics and evaluation.
"""
