"""`MetricsJSONLCallback`: append every log call of a transformers `Trainer` to a JSON Lines file, as it happens.

A finished run keeps its logs in `trainer_state.json`, but a running one only in its newest checkpoint, which can
be many steps old. This callback writes one line per log call (`{"step": global_step, **logs}`) and flushes it, so
`trl-ragen2 plot` / `trl_ragen2.plots.figures.plot_run` can draw a run while it trains:

```python
from trl_ragen2.runs.tracking import MetricsJSONLCallback

trainer = SNRFilteredGRPOTrainer(..., callbacks=[MetricsJSONLCallback()])  # writes <output_dir>/metrics.jsonl
```

Lines are strict JSON: NaN and infinities (a diagnostic that could not be computed) are written as `null`, which
every reader skips when plotting. Only the main process writes.

The file is a convenience, so it never stops training: a failed write (a full disk) is a warning, and what it
left of the line is cut off again. When training starts, a last line left unfinished by a killed run is cut off
too, so a resumed run never appends to half a record.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import numbers
import os
from pathlib import Path

from transformers import TrainerCallback

from .logs import METRICS_FILE


logger = logging.getLogger(__name__)


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
            The file is appended to, never truncated (but for an unfinished last line): a resumed run continues it, and readers
            (`trl_ragen2.runs.logs.read_log_file`) drop the records that a resume replays.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self.failed_writes = 0

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
            path = self._resolve(args)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                cut_unfinished_line(path)
            except OSError as error:
                self._warn(path, error)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        path = self._resolve(args)
        record = {"step": state.global_step, **{key: _json_value(value) for key, value in logs.items()}}
        line = (json.dumps(record, allow_nan=False) + "\n").encode("utf-8")
        size = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            size = path.stat().st_size if path.exists() else 0
            # Opened per call: each line is complete and flushed on close, and nothing is held open across a crash.
            with open(path, "ab") as f:
                f.write(line)
        except OSError as error:
            if size is not None:
                with contextlib.suppress(OSError):
                    os.truncate(path, size)  # drop the part of the line that was written
            self._warn(path, error)

    def _warn(self, path: Path, error: OSError) -> None:
        self.failed_writes += 1
        if self.failed_writes == 1:
            logger.warning(
                "could not write %s (%s); training goes on, and the log lines that cannot be written are lost "
                "(trainer_state.json in each checkpoint keeps the full history)",
                path,
                error,
            )


def cut_unfinished_line(path: str | os.PathLike) -> bool:
    """Cut a JSON Lines file back to its last complete line (one ending in a newline); True if it cut anything."""
    path = Path(path)
    if not path.is_file():
        return False
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return False
        end = size
        while end > 0:  # read back in blocks until the last newline
            start = max(0, end - 65536)
            f.seek(start)
            block = f.read(end - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            end = start
        else:
            keep = 0
        if keep == size:
            return False
        f.truncate(keep)
    logger.warning(
        "%s ended in an unfinished line (%d bytes, a killed run's last write); it was cut off", path, size - keep
    )
    return True
