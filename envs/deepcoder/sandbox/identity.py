"""Who a sandboxed program runs as, and cleaning up after it: uid leases, killing by uid, leftover files.

Run as root, each execution gets its own unprivileged uid/gid (`SANDBOX_UID_BASE` + a slot locked in a lock file,
so concurrent executions, even in other processes, never share one). Then `RLIMIT_NPROC` applies (root is exempt
from it), the host's files are protected by ordinary permissions, and every process and file left behind can be
found by its owner. Run as a normal user, programs run as that user and `RLIMIT_NPROC` is set to the user's
current task count plus the allowance.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import tempfile
import threading
import time


SANDBOX_UID_BASE = 0x70000000
UID_SLOTS = 1 << 16
# world-writable places a program without a private /tmp can leave files in
SHARED_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


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
                UidLease._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
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


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes owned by `uid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid and not _is_zombie(entry):
                found.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
    return found


def kill_processes_of(uid: int, passes: int = 6) -> int:
    """SIGKILL every live process owned by `uid` (repeated, in case one forked meanwhile); returns how many.

    Zombies are skipped: they are already dead and only wait for their new parent to reap them.
    """
    killed = 0
    for attempt in range(passes):
        found = 0
        for pid in processes_of(uid):
            try:
                os.kill(pid, signal.SIGKILL)
                found += 1
            except ProcessLookupError:
                continue
        killed += found
        if not found:
            break
        time.sleep(0.001 * 2**attempt)  # give the killed a moment to die (and any fork of theirs to show up)
    return killed


def remove_files_of(uid: int, roots: tuple[str, ...] = SHARED_TEMP_DIRS, max_entries: int = 100_000) -> int:
    """Delete what `uid` left in the shared temporary directories (and in world-writable folders there);
    returns how many entries went. Only for uids that belong to one execution (never the trainer's own)."""
    removed, seen = 0, 0
    stack = [root for root in dict.fromkeys((*roots, tempfile.gettempdir())) if os.path.isdir(root)]
    while stack and seen < max_entries:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == uid:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    try:
                        os.unlink(entry.path)
                    except OSError:
                        continue
                removed += 1
            elif entry.is_dir(follow_symlinks=False) and info.st_mode & 0o002:  # others may write in it
                stack.append(entry.path)
    return removed


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
