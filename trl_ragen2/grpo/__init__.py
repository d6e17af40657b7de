"""`SNRFilteredGRPOTrainer` and its config: TRL's `GRPOTrainer` with SNR-aware filtering and the MI diagnostics.

- `grpo_config`: `SNRFilteredGRPOConfig`, `GRPOConfig` plus the `reward_variance_*`, `mi_*`, `grad_report_*`, vLLM
  engine and run-folder fields;
- `grpo_trainer`: the trainer, a few narrow overrides that wire `trl_ragen2.filtering` and
  `trl_ragen2.collapse` into TRL;
- `config_types`: type checks of config values after YAML parsing.
- `algorithms`: the paper's Table 4 algorithms (PPO, DAPO, GRPO, Dr.GRPO) as settings of the GRPO and PPO configs
  (`PAPER_ALGORITHMS`), and which of them train a critic.
"""
