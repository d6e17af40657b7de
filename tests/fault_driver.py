"""Run a recipe in this process with one fault injected at a chosen moment (for `tests/test_faults.py`).

    python -m tests.fault_driver FAULT recipes/sokoban.py --config ... --output_dir ...

FAULT is `none`, or `KIND:FILE:STEP`, acting on the file named FILE (or its temporary name, `FILE.tmp-<pid>`)
inside `checkpoint-STEP`:

- `kill-open`: SIGKILL this process when the file is opened for writing (before a byte is written);
- `kill-torn`: write half of the first chunk written to the file, flush it, then SIGKILL (a torn file);
- `pause-open`: when the file is opened for writing, wait until a file named `release` appears beside the
  output_dir (at most 5 minutes), then go on: a run held in the middle of training;
- `kill-after`: SIGKILL right after `TrainerState.save_to_json` has written the file (FILE is `trainer_state.json`:
  transformers' own files are complete, the library's state not yet written).

SIGKILL is a real kill -9: no `finally`, no `atexit`, no flush of Python buffers.
"""

import builtins
import importlib.util
import os
import runpy
import signal
import sys
import time
from pathlib import Path


RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def recipe_module(name: str):
    """A recipe file as a module (its `__main__` block does not run), to call its `parse_args` and `main`."""
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _matches(path, name: str, step: int) -> bool:
    path = Path(os.fspath(path))
    return path.name.split(".tmp-")[0] == name and f"checkpoint-{step}" in path.parts


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _TornFile:
    """A file whose first write stops half way, followed by a kill."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        os.fsync(self._f.fileno())
        _kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


def install(fault: str) -> None:
    if fault == "none":
        return
    kind, name, step = fault.split(":")
    step = int(step)
    if kind == "kill-after":
        from transformers import TrainerState

        save_to_json = TrainerState.save_to_json

        def save_then_kill(self, json_path):
            save_to_json(self, json_path)
            if _matches(json_path, name, step):
                _kill()

        TrainerState.save_to_json = save_then_kill
        return
    real_open = builtins.open

    def open_with_fault(file, mode="r", *args, **kwargs):
        writing = isinstance(file, str | os.PathLike) and any(flag in mode for flag in "wax")
        if writing and _matches(file, name, step):
            if kind == "pause-open":
                release = Path(os.fspath(file)).parents[2] / "release"
                deadline = time.time() + 300
                while not release.exists() and time.time() < deadline:
                    time.sleep(0.1)
                return real_open(file, mode, *args, **kwargs)
            if kind == "kill-open":
                _kill()
            return _TornFile(real_open(file, mode, *args, **kwargs))
        return real_open(file, mode, *args, **kwargs)

    if kind not in ("kill-open", "kill-torn", "pause-open"):
        raise SystemExit(f"unknown fault kind {kind!r}")
    builtins.open = open_with_fault


if __name__ == "__main__":
    fault, recipe, *recipe_args = sys.argv[1:]
    install(fault)
    sys.argv = [recipe, *recipe_args]
    runpy.run_path(recipe, run_name="__main__")
