"""A memory (and process-count) bound for the whole of one sandboxed program: a cgroup per execution.

`RLIMIT_AS` bounds each process, so a program of N processes could use N times `memory_mb`. Where this process
may create cgroups below its own (root on cgroup v1, the usual case in containers; a delegated or root cgroup on
cgroup v2), each execution gets one, limited to `memory_mb` in all (anonymous memory, page cache and the tmpfs
pages it writes) and to its process allowance (the `pids` controller, where mounted). The sandbox moves the
program's processes in before any candidate code runs; their children inherit it. When memory runs out the
kernel kills a process in that cgroup only, and `oom_kills()` says so.

Without a usable cgroup the bound is the documented one: `max_processes` x `memory_mb` plus the capped `/tmp`.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass
from functools import lru_cache


PREFIX = "trl-ragen2-sandbox-"


@dataclass(frozen=True)
class CgroupRoots:
    """Where this process may create execution cgroups: `(memory dir, pids dir or None)` and the version."""

    memory: str
    pids: str | None
    version: int  # 1 or 2


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """`(mount root, mount point, fs type, super options)` of every cgroup mount, from /proc/self/mountinfo."""
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                    found.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    except OSError:
        pass
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller name, and under "" for cgroup v2 (/proc/self/cgroup)."""
    paths = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for name in controllers.split(",") if controllers else [""]:
                    paths[name] = path
    except (OSError, ValueError):
        pass
    return paths


def _directory(mount_root: str, mount_point: str, path: str) -> str | None:
    if not (path + "/").startswith(mount_root.rstrip("/") + "/"):
        return None
    return os.path.join(mount_point, path[len(mount_root.rstrip("/")) :].lstrip("/"))


def _writable_parent(directory: str | None) -> bool:
    if not directory or not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        return False
    probe = os.path.join(directory, f"{PREFIX}probe-{secrets.token_hex(4)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    os.rmdir(probe)
    return True


@lru_cache(maxsize=1)
def find_roots() -> CgroupRoots | None:
    """The cgroup directories below which executions can be bounded here, or None (probed once)."""
    own = _own_paths()
    mounts = _mounts()
    v1 = {}
    for root, point, fstype, options in mounts:
        for controller in ("memory", "pids"):
            if fstype == "cgroup" and controller in options and controller in own:
                v1[controller] = _directory(root, point, own[controller])
    if _writable_parent(v1.get("memory")) and os.path.exists(os.path.join(v1["memory"], "memory.limit_in_bytes")):
        pids = v1.get("pids") if _writable_parent(v1.get("pids")) else None
        return CgroupRoots(v1["memory"], pids, 1)
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            directory = _directory(root, point, own[""])
            try:
                with open(os.path.join(directory, "cgroup.subtree_control")) as f:
                    enabled = f.read().split()
            except (OSError, TypeError):
                continue
            if "memory" in enabled and _writable_parent(directory):
                return CgroupRoots(directory, directory if "pids" in enabled else None, 2)
    return None


class ExecutionCgroup:
    """The cgroup(s) of one execution: created limited, filled with `add`, read, then `remove`d."""

    def __init__(self, roots: CgroupRoots, memory_bytes: int, max_processes: int | None):
        self.roots = roots
        name = PREFIX + secrets.token_hex(8)
        self.memory = os.path.join(roots.memory, name)
        self.pids = os.path.join(roots.pids, name) if roots.pids else None
        directories = [self.memory] + ([self.pids] if self.pids and self.pids != self.memory else [])
        self.directories = []
        try:
            for directory in directories:
                os.mkdir(directory, 0o755)
                self.directories.append(directory)
            if roots.version == 1:
                self._write(self.memory, "memory.limit_in_bytes", memory_bytes)
                try:  # swap too, where swap accounting is on
                    self._write(self.memory, "memory.memsw.limit_in_bytes", memory_bytes)
                except OSError:
                    pass
            else:
                self._write(self.memory, "memory.max", memory_bytes)
                self._write(self.memory, "memory.swap.max", 0)
            if self.pids and max_processes is not None:
                self._write(self.pids, "pids.max", max_processes)
        except OSError:
            self.remove()
            raise

    @staticmethod
    def _write(directory: str, name: str, value) -> None:
        with open(os.path.join(directory, name), "w") as f:
            f.write(str(value))

    def add(self, pids: list[int]) -> None:
        """Move these processes in (each thread group as a whole)."""
        for directory in self.directories:
            for pid in pids:
                try:
                    self._write(directory, "cgroup.procs", pid)
                except ProcessLookupError:
                    continue  # it exited meanwhile

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for want of memory."""
        name = "memory.oom_control" if self.roots.version == 1 else "memory.events"
        try:
            with open(os.path.join(self.memory, name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def members(self) -> list[int]:
        found = set()
        for directory in self.directories:
            try:
                with open(os.path.join(directory, "cgroup.procs")) as f:
                    found.update(int(line) for line in f if line.strip())
            except (OSError, ValueError):
                continue
        return sorted(found)

    def remove(self) -> None:
        """Kill whatever is left inside, then delete the cgroup(s)."""
        for attempt in range(50):
            left = self.members()
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                for directory in list(self.directories):
                    os.rmdir(directory)
                    self.directories.remove(directory)
                return
            except OSError:  # processes still dying
                time.sleep(0.001 * min(2**attempt, 20))


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc/<pid>/task/<tid>/children (empty when /proc cannot tell)."""
    seen, stack = [], [pid]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    stack.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return seen
