"""`MetricsJSONLCallback`: append every log call of a transformers `Trainer` to a JSON Lines file, as it happens.

A finished run keeps its logs in `trainer_state.json`, but a running one only in its newest checkpoint, which can
be many steps old. This callback writes one line per log call (`{"step": global_step, **logs}`) and flushes it, so
`trl-ragen2 plot` / `trl_ragen2.plots.plot_run` can draw a run while it trains:

```python
from trl_ragen2.tracking import MetricsJSONLCallback

trainer = SNRFilteredGRPOTrainer(..., callbacks=[MetricsJSONLCallback()])  # writes <output_dir>/metrics.jsonl
```

Lines are strict JSON: NaN and infinities (a diagnostic that could not be computed) are written as `null`, which
every reader skips when plotting. Only the main process writes.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path

from transformers import TrainerCallback

from .run_logs import METRICS_FILE


def _json_value(value):
    """A log value as strict JSON: finite numbers stay, non-finite floats become None, tensors become numbers."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # 0-d torch / numpy values
        value = value.item()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    return str(value)


class MetricsJSONLCallback(TrainerCallback):
    """Append `{"step": ..., **logs}` to a JSON Lines file on every `on_log`, on the main process only.

    Args:
        path (`str` or `os.PathLike`, *optional*):
            The file to append to. Defaults to `<args.output_dir>/metrics.jsonl`, resolved when training starts.
            The file is appended to, never truncated: a resumed run continues it, and readers
            (`trl_ragen2.run_logs.read_log_file`) drop the records that a resume replays.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None

    def _resolve(self, args) -> Path:
        if self.path is None:
            if not getattr(args, "output_dir", None):
                raise ValueError(
                    "MetricsJSONLCallback has no path and the training arguments have no output_dir; "
                    "pass MetricsJSONLCallback(path=...) or set output_dir"
                )
            self.path = Path(args.output_dir) / METRICS_FILE
        return self.path

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._resolve(args).parent.mkdir(parents=True, exist_ok=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        path = self._resolve(args)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"step": state.global_step, **{key: _json_value(value) for key, value in logs.items()}}
        line = json.dumps(record, allow_nan=False)
        # Opened per call: each line is complete and flushed on close, and nothing is held open across a crash.
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
