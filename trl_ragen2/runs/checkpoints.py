"""Checkpoints that are complete or not chosen, resumes that are exact or refused, and one run per output_dir.

transformers writes `checkpoint-N` file by file, straight under its final names, and counts any `checkpoint-N`
folder as a checkpoint. A kill, a full disk or Ctrl-C during a save therefore leaves a folder that looks like a
checkpoint, and a resume from it silently starts whatever state is missing from scratch. This module adds:

- **Atomic state files.** [`atomic_write_json`] and [`atomic_torch_save`] write to a temporary name in the same
  folder and rename it, so a state file is either absent or whole.
- **A completeness marker.** After every file of a checkpoint (transformers', TRL's and this library's) is
  written, [`mark_complete`] writes `ragen2_checkpoint.json` (atomically): the step and the size of every file.
  Only a checkpoint holding it, with every listed file at its listed size, is complete
  ([`checkpoint_problems`]); [`latest_complete_checkpoint`] never picks another one.
- **Resume checks.** [`check_resume_checkpoint`] refuses a checkpoint that is incomplete, or lacks a file the
  resuming run needs, with an error naming the file and the previous complete checkpoint.
- **The run lock.** [`RunLock`] holds an exclusive `fcntl.flock` on `<output_dir>/_ragen2_run.lock` for as long as a
  run trains. The kernel drops it when the process dies, so a crashed run never leaves it stuck.
  [`previous_run_files`] finds what an earlier run left in a folder, for the trainer to refuse or overwrite.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import zipfile
from pathlib import Path

from .keys import SAMPLES_FILE


logger = logging.getLogger(__name__)

COMPLETE_FILE = "ragen2_checkpoint.json"  # written last: the checkpoint is complete
LOCK_FILE = "_ragen2_run.lock"  # a leading underscore: push_to_hub leaves it out
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
RUN_LOG_FILES = ("trainer_state.json", "metrics.jsonl")  # what the log readers take for a run (`runs.logs`)
TEMP_MARK = ".tmp-"  # temporary names: <name>.tmp-<pid>
LATEST = ("true", "latest")  # resume_from_checkpoint values meaning "the latest complete checkpoint"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be resumed from, or written; the message names the file and what to do."""


class OutputDirInUseError(RuntimeError):
    """Another run trains in the output_dir, or an earlier run's files are there; the message says what to do."""


# ---------------------------------------------------------------------------------------------------------------
# Atomic files


def _atomic_write(path: str | os.PathLike, write) -> None:
    """`write(file object)` into a temporary file beside `path`, flushed to disk, then renamed onto `path`."""
    path = os.fspath(path)
    temp = f"{path}{TEMP_MARK}{os.getpid()}"
    try:
        with open(temp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        _replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


def _replace(temp: str, path: str) -> None:
    os.replace(temp, path)


def atomic_write_json(path: str | os.PathLike, data, **kwargs) -> None:
    """`json.dump(data)` into `path` through a temporary name and a rename."""
    text = json.dumps(data, **kwargs).encode("utf-8")
    _atomic_write(path, lambda f: f.write(text))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` into `path` through a temporary name and a rename."""
    _atomic_write(path, lambda f: f.write(data))


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """`torch.save(obj)` into `path` through a temporary name and a rename."""
    import torch

    _atomic_write(path, lambda f: torch.save(obj, f))


def read_json_state(path: str | os.PathLike, checkpoint_dir: str | os.PathLike | None = None):
    """A JSON state file of a checkpoint; a file that does not parse raises [`CheckpointError`] naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise corrupted_file_error(path, checkpoint_dir or os.path.dirname(path), error) from error


# ---------------------------------------------------------------------------------------------------------------
# Completeness


def checkpoint_step(path: str | os.PathLike) -> int | None:
    match = CHECKPOINT_PATTERN.match(Path(path).name)
    return int(match.group(1)) if match else None


def _files(checkpoint_dir: Path) -> dict[str, int]:
    """`{relative path: size}` of every regular file under the folder, temporary files and the marker excluded."""
    files = {}
    for root, _, names in os.walk(checkpoint_dir):
        for name in names:
            path = Path(root) / name
            relative = path.relative_to(checkpoint_dir).as_posix()
            if TEMP_MARK in name or relative == COMPLETE_FILE or not path.is_file():
                continue
            files[relative] = path.stat().st_size
    return files


def start_checkpoint(checkpoint_dir: str | os.PathLike) -> None:
    """Before a save: an existing folder of the same step (an interrupted save, or a checkpoint of a run resumed
    from an earlier step) is removed, so no file of it is taken for part of the new one."""
    checkpoint_dir = Path(checkpoint_dir)
    if checkpoint_dir.exists():
        logger.info("removing %s before saving this step's checkpoint into it", checkpoint_dir)
        (checkpoint_dir / COMPLETE_FILE).unlink(missing_ok=True)  # first: never complete while half removed
        shutil.rmtree(checkpoint_dir)


def mark_complete(checkpoint_dir: str | os.PathLike, step: int) -> None:
    """Write the completeness marker: the step and the size of every file the checkpoint holds."""
    checkpoint_dir = Path(checkpoint_dir)
    atomic_write_json(checkpoint_dir / COMPLETE_FILE, {"step": step, "files": _files(checkpoint_dir)}, indent=1)


def checkpoint_problems(checkpoint_dir: str | os.PathLike) -> list[str]:
    """Why a checkpoint is not complete (empty when it is): no marker, or a listed file missing or cut short."""
    checkpoint_dir = Path(checkpoint_dir)
    marker = checkpoint_dir / COMPLETE_FILE
    if not marker.is_file():
        return [f"{marker} is missing: the save of this checkpoint did not finish"]
    try:
        files = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return [f"{marker} is not a valid completeness marker"]
    problems = []
    for name, size in sorted(files.items()):
        path = checkpoint_dir / name
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif path.stat().st_size != size:
            problems.append(f"{path} has {path.stat().st_size:,} bytes, {size:,} when it was saved")
    return problems


def checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """The `checkpoint-N` folders of a run, by step."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [child for child in output_dir.iterdir() if child.is_dir() and checkpoint_step(child) is not None]
    return sorted(found, key=checkpoint_step)


def latest_complete_checkpoint(output_dir: str | os.PathLike, before: int | None = None) -> Path | None:
    """The complete checkpoint of the highest step (below `before`, when given); incomplete ones are skipped with
    a warning naming them and why."""
    for checkpoint in reversed(checkpoints(output_dir)):
        if before is not None and checkpoint_step(checkpoint) >= before:
            continue
        problems = checkpoint_problems(checkpoint)
        if not problems:
            return checkpoint
        if before is None:
            logger.warning("skipping incomplete checkpoint %s: %s", checkpoint, "; ".join(problems))
    return None


def _previous_hint(checkpoint_dir: Path) -> str:
    step = checkpoint_step(checkpoint_dir)
    previous = latest_complete_checkpoint(checkpoint_dir.parent, before=step) if step is not None else None
    if previous is None:
        return "there is no earlier complete checkpoint: start the run over"
    return f"resume from the previous complete checkpoint, {previous}"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def corrupted_file_error(path, checkpoint_dir, error: BaseException) -> CheckpointError:
    """The error for a checkpoint file that exists but cannot be read."""
    return CheckpointError(
        f"{path} could not be read ({type(error).__name__}: {error}); the file is damaged. "
        f"{_sentence(_previous_hint(Path(checkpoint_dir)))}"
    )


def _readable(path: Path) -> bool:
    """A cheap whole-file check by format: JSON parses, a zip (torch.save) passes its CRCs, a safetensors header
    parses and fits the file."""
    try:
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return archive.testzip() is None
        elif path.suffix == ".safetensors":
            with open(path, "rb") as f:
                length = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(length))
            end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
            return 8 + length + end == path.stat().st_size
        elif path.suffix in (".pt", ".pth", ".bin"):
            return False  # torch.save writes zip files: one that is not a zip is damaged
    except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile, UnicodeDecodeError):
        return False
    return True


def damaged_files(checkpoint_dir: str | os.PathLike) -> list[Path]:
    """The files of a checkpoint that fail [`_readable`]; called when loading it failed, to name the file."""
    checkpoint_dir = Path(checkpoint_dir)
    return [checkpoint_dir / name for name in sorted(_files(checkpoint_dir)) if not _readable(checkpoint_dir / name)]


@contextlib.contextmanager
def load_errors_named(checkpoint_dir: str | os.PathLike, what: str):
    """Turn an error while loading `what` from a checkpoint (a bare `SafetensorError`, `JSONDecodeError`, torch's
    `PytorchStreamReader failed`) into a [`CheckpointError`] naming the damaged file and the previous checkpoint."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:  # noqa: BLE001 - every loader error is re-raised, with the file named
        checkpoint_dir = Path(checkpoint_dir)
        damaged = damaged_files(checkpoint_dir)
        if damaged:
            raise corrupted_file_error(", ".join(str(p) for p in damaged), checkpoint_dir, error) from error
        raise CheckpointError(
            f"loading {what} from {checkpoint_dir} failed ({type(error).__name__}: {error}); "
            f"{_previous_hint(checkpoint_dir)}"
        ) from error


def resolve_resume(resume_from_checkpoint, output_dir: str | os.PathLike):
    """`True`, `"true"` or `"latest"` become the latest complete checkpoint of `output_dir` (an error when there is
    none); other values are returned as given."""
    wants_latest = resume_from_checkpoint is True or (
        isinstance(resume_from_checkpoint, str)
        and resume_from_checkpoint.lower() in LATEST
        and not os.path.isdir(resume_from_checkpoint)
    )
    if not wants_latest:
        return resume_from_checkpoint
    latest = latest_complete_checkpoint(output_dir)
    if latest is None:
        found = checkpoints(output_dir)
        detail = (
            f"its checkpoints ({', '.join(p.name for p in found)}) are all incomplete (no {COMPLETE_FILE})"
            if found
            else "it holds no checkpoint-<step> folder"
        )
        raise CheckpointError(
            f"resume_from_checkpoint={resume_from_checkpoint!r}: no complete checkpoint in {output_dir}: {detail}; "
            "pass a checkpoint folder explicitly, or start without resume_from_checkpoint"
        )
    logger.info("resuming from the latest complete checkpoint, %s", latest)
    return str(latest)


def check_resume_checkpoint(checkpoint_dir, required: list[str], allow_missing: bool) -> None:
    """Refuse (or, with `allow_missing`, warn about) a checkpoint that is incomplete or lacks a required file.

    `required` are paths relative to the checkpoint: the state the resuming run uses.
    """
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        raise CheckpointError(f"resume_from_checkpoint={str(checkpoint_dir)!r} is not a folder")
    problems = checkpoint_problems(checkpoint_dir)
    marker_missing = not (checkpoint_dir / COMPLETE_FILE).is_file()
    missing = [name for name in required if not (checkpoint_dir / name).exists()]
    problems += [f"{checkpoint_dir / name} is missing" for name in missing]
    problems = list(dict.fromkeys(problems))  # a file both listed by the marker and required: once
    for name in required:  # JSON state is small: a damaged file is named here, before any loading
        if name.endswith(".json") and (checkpoint_dir / name).is_file():
            read_json_state(checkpoint_dir / name, checkpoint_dir)
    if marker_missing and not missing:
        # A checkpoint written before the marker existed, or by plain transformers: every file the run needs is
        # there, so only the files' contents are left unchecked.
        logger.warning(
            "%s has no %s (written by an older trl-ragen2, or an interrupted save); it holds every state file this "
            "run uses, so it is resumed from",
            checkpoint_dir,
            COMPLETE_FILE,
        )
        return
    if not problems:
        return
    if allow_missing:
        logger.warning(
            "resuming from the incomplete checkpoint %s (resume_allow_missing_state=True); what is missing starts "
            "from scratch: %s",
            checkpoint_dir,
            "; ".join(problems),
        )
        return
    raise CheckpointError(
        f"cannot resume exactly from {checkpoint_dir}: {'; '.join(problems)}. "
        f"{_sentence(_previous_hint(checkpoint_dir))}, "
        "or set resume_allow_missing_state=True to resume with the missing state started from scratch"
    )


# ---------------------------------------------------------------------------------------------------------------
# Save errors


def _last_written(checkpoint_dir: Path) -> str | None:
    if not checkpoint_dir.is_dir():
        return None
    newest = None
    for root, _, names in os.walk(checkpoint_dir):
        for name in names:
            path = Path(root) / name
            with contextlib.suppress(OSError):
                mtime = path.stat().st_mtime_ns
                if newest is None or mtime > newest[0]:
                    newest = (mtime, path)
    return None if newest is None else f"{newest[1]} ({newest[1].stat().st_size:,} bytes)"


# How a Rust library (the `tokenizers` package, saving tokenizer.json) reports a full disk: a plain `Exception`
# carrying the OS error, not an OSError
RUST_NO_SPACE = f"(os error {errno.ENOSPC})"


def _is_write_error(error: Exception) -> bool:
    """An error of writing a file: Python's and torch's (`OSError`, `RuntimeError`), or a Rust library's I/O error."""
    return isinstance(error, (OSError, RuntimeError)) or (type(error) is Exception and "(os error " in str(error))


@contextlib.contextmanager
def save_errors_named(checkpoint_dir: str | os.PathLike):
    """Turn a failed checkpoint write (often a full disk that torch reports as `unexpected pos`) into a
    [`CheckpointError`] naming the checkpoint, the last file written and the free space."""
    checkpoint_dir = Path(checkpoint_dir)
    try:
        yield
    except Exception as error:
        if isinstance(error, CheckpointError) or not _is_write_error(error):
            raise
        try:
            free = f"{shutil.disk_usage(checkpoint_dir.parent).free:,} bytes free"
        except OSError:
            free = "free space unknown"
        full = (isinstance(error, OSError) and error.errno == errno.ENOSPC) or RUST_NO_SPACE in str(error)
        last = _last_written(checkpoint_dir)
        raise CheckpointError(
            f"writing checkpoint {checkpoint_dir} failed ({type(error).__name__}: {error})"
            + (f"; the last file written was {last}" if last else "")
            + f"; the disk holding it has {free}"
            + (" (no space left)" if full else "")
            + f". The checkpoint is incomplete (no {COMPLETE_FILE}) and will not be resumed from"
        ) from error


# ---------------------------------------------------------------------------------------------------------------
# One run per output_dir


def previous_run_files(output_dir: str | os.PathLike) -> list[str]:
    """What an earlier run left in `output_dir`: its checkpoints and log files (names relative to the folder)."""
    output_dir = Path(output_dir)
    found = [p.name for p in checkpoints(output_dir)]
    found += [name for name in RUN_LOG_FILES if (output_dir / name).is_file()]
    return found


def remove_previous_run(output_dir: str | os.PathLike) -> None:
    """`overwrite_output_dir=True`: remove the earlier run's checkpoints, logs and sample log (the rest of the folder
    stays)."""
    output_dir = Path(output_dir)
    samples = output_dir / SAMPLES_FILE  # the sample log goes with the run (it never marks one: a resume appends)
    for name in previous_run_files(output_dir) + ([SAMPLES_FILE] if samples.is_file() else []):
        path = output_dir / name
        logger.warning("overwrite_output_dir=True: removing %s of an earlier run", path)
        if path.is_dir():
            (path / COMPLETE_FILE).unlink(missing_ok=True)
            shutil.rmtree(path)
        else:
            path.unlink()


class RunLock:
    """An exclusive, non-blocking `fcntl.flock` on `<output_dir>/_ragen2_run.lock`, held while a run trains.

    The lock belongs to the open file: it is released by [`release`], or by the kernel when the process ends
    (a crash or kill -9 included), so it never outlives its run. The file keeps the holder's PID for the message.
    """

    def __init__(self, output_dir: str | os.PathLike):
        self.path = Path(output_dir) / LOCK_FILE
        self._file = None

    def acquire(self) -> None:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")  # noqa: SIM115 - held open for the length of the run
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise OutputDirInUseError(
                f"another run is training in {self.path.parent} (process {holder} holds {self.path}); "
                "wait for it to finish or use another output_dir"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None
