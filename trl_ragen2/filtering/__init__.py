"""SNR-aware filtering (RAGEN-2 §3.3): which prompt groups a policy update trains on, and how the kept rows train.

- `selection`: group scores (reward variance or std), the selection rules (top-p, top-k, min-p, percentile band),
  the filter statistics;
- `ablations`: the paper's ablation filters (Table 6's percentile band, Table 7's within-group trajectories);
- `group_metrics`: RAGEN's other ranking metrics (mean or summed reward, entropy, its spread, length);
- `keep_rate`: the keep rate in force at each generation (rho schedules, warm-up, the auto switch, the guard);
- `reward_checks`: checks on the rewards a trainer receives, and why a generation kept nothing;
- `advantages`: advantages TRL defines over the whole batch, recomputed on the kept rows;
- `batch_utils`: row operations on TRL generation batches (select, trim, cut, placeholders);
- `micro_steps`: where the kept rows go over the micro-steps, and each micro-step's loss factors;
- `batch_adjust`: RAGEN's batch-adjust modes (copy, delete, pad) beside this library's layout, for comparison;
- `generation_state`: one generation's trip through the filter, the object the trainer's overrides share;
- `empty_steps`: the filter's counters, and the callback that makes an optimizer step without a kept row a no-op;
- `arguments`: the filter's settings (`reward_variance_*`) and their validation; `rule`: what the configured filter
  keeps of a batch; `controls`: the random-matched and skip-matched control arms; `step_metrics`: the values logged;
- `grad_snr`, `grad_report`: the gradient SNR report (the paper's Figure 3, the §3 argument for filtering): its
  reward-variance buckets and loss terms, and the report on a trainer.

Everything here but `empty_steps` (a transformers `TrainerCallback`) and `grad_report` (a trainer's forwards) needs
torch at most. The trainers that use it
live in `trl_ragen2.grpo` and `trl_ragen2.ppo`.
"""
