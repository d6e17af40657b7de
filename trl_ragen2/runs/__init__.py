"""A training run's files: the names of its metrics, the live metrics file, its logs read back, checkpoints.

- `keys`: every `ragen2/...` metric name and the MI scopes, the one definition the writers, the readers and the
  docs test share;
- `tracking`: `MetricsJSONLCallback`, which appends each log call to `metrics.jsonl` as it happens;
- `logs`: reading a run's logs back (`metrics.jsonl`, `trainer_state.json`, checkpoints), and the summary;
- `checkpoints`: atomic state files, the completeness marker, the latest complete checkpoint, resume checks and
  the run lock.

`keys` and `logs` need the standard library only, so a run can be read where torch is not installed.
"""
