"""A training run's files: the live metrics file, its logs read back, checkpoints.

- `tracking`: `MetricsJSONLCallback`, which appends each log call to `metrics.jsonl` as it happens;
- `logs`: reading a run's logs back (`metrics.jsonl`, `trainer_state.json`, checkpoints), and the summary;
- `checkpoints`: atomic state files, the completeness marker, the latest complete checkpoint, resume checks and
  the run lock.

`logs` needs the standard library only, so a run can be read where torch is not installed.
"""
