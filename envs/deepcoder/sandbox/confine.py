"""The `unshare` isolation mode: new namespaces and a minimal root, set up by the harness before the candidate runs.

Used where user namespaces work but bubblewrap is not installed. The harness runs `confine(settings)` from this
source (standard library and `ctypes` only) and gets back control in the confined worker:

- `unshare(2)` of the user, mount, pid, network, ipc and uts namespaces: no network but a loopback that is down,
  no view of the host's processes, its own hostname;
- a new root on a small tmpfs holding read-only binds of the system directories and the interpreter, a `/proc`
  of the new pid namespace, a `/dev` with the harmless devices only, and one writable size- and inode-capped
  tmpfs at `/tmp` (`/var/tmp` points there); `/dev/shm` does not exist; the rest of the host is not there;
- three processes: this one waits outside the pid namespace and relays the exit status; pid 1 inside is a small
  init that reaps and ends the namespace (every process in it dies with pid 1, `setsid` ones too); the worker
  runs the candidate with no capabilities (bounding set emptied, `no_new_privs`), as the same uid it had outside.

Every step fails closed: an error ends the process with exit status 97 before any candidate code runs.
"""

import ctypes
import os
import signal
import sys


CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_READ, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 23, 24, 38
CAPABILITY_VERSION_3 = 0x20080522
# statvfs flags that a bind remount must keep (the kernel refuses to clear them on locked mounts)
KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
DEVICES = ("null", "zero", "full", "random", "urandom")
FAILED = 97

_libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(OSError):
    """A namespace or mount operation failed."""


def _check(result, what):
    if result != 0:
        error = ctypes.get_errno()
        raise ConfineError(error, f"{what}: {os.strerror(error)}")


def _mount(source, target, fstype, flags, data=None):
    encode = lambda text: None if text is None else os.fsencode(text)  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def _prctl(option, value):
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


# ---------------------------------------------------------------------------------------------------------------
# The new root


def _bind_read_only(source, target):
    """Bind `source` (a directory or a file) onto `target`, read-only, keeping the flags the kernel locked."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = os.statvfs(source).f_flag
    kept = sum(ms for st, ms in KEPT_FLAGS if flags & st)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def build_root(settings):
    """Mount the new root on `/tmp` of this mount namespace and switch into it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here propagates anywhere
    root = "/tmp"
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    tmp = root + "/tmp"
    os.makedirs(tmp)
    options = f"size={settings['tmp_bytes']},nr_inodes={settings['tmp_inodes']},mode=1777"
    _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, options)
    os.makedirs(root + "/var")
    os.symlink("/tmp", root + "/var/tmp")
    for path in settings["binds"]:
        if os.path.lexists(path) and not os.path.islink(path):
            _bind_read_only(path, root + path)
        elif os.path.islink(path):  # /lib -> usr/lib on merged-/usr systems
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(os.readlink(path), root + path)
    os.makedirs(root + "/dev")
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
    for name in DEVICES:
        open(f"{root}/dev/{name}", "a").close()
        _mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/proc")
    try:
        _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except ConfineError:
        pass  # a container that masks parts of /proc forbids a new one; Python runs without it
    os.chdir(root)
    _mount(root, "/", None, MS_MOVE)
    os.chroot(".")
    os.chdir("/")
    _mount(None, "/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_capabilities():
    """Empty the bounding set, then every capability set; refuse to go on if any capability is left."""
    for capability in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(capability), 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable for two 32-bit words, all zero
    _check(_libc.capset(header, data), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _check(_libc.capget(header, data), "capget")
    bounding = [c for c in range(64) if _libc.prctl(PR_CAPBSET_READ, ctypes.c_ulong(c), 0, 0, 0) == 1]
    if any(data) or bounding:
        raise ConfineError(0, f"capabilities left after dropping them: {list(data)}, bounding set {bounding}")


# ---------------------------------------------------------------------------------------------------------------
# Processes


def _init(worker, status_fd):
    """Pid 1 of the namespace: reap every orphan, and pass the worker's raw wait status on before exiting."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(FAILED)
        if pid == worker:
            os.write(status_fd, status.to_bytes(4, "big"))
            os._exit(0)  # the kernel now kills everything left in the namespace


def _outer(init_pid, status_r):
    """Outside the pid namespace: wait for init, then end as the worker ended."""
    os.waitpid(init_pid, 0)
    data = os.read(status_r, 4)
    if len(data) != 4:
        os._exit(FAILED)
    status = int.from_bytes(data, "big")
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else FAILED)


def confine(settings):
    """Enter new namespaces and the new root; returns only in the worker (see the module docstring)."""
    try:
        uid, gid = os.getuid(), os.getgid()
        flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
        _check(_libc.unshare(flags), "unshare")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        status_r, status_w = os.pipe()
        init_pid = os.fork()
        if init_pid:
            os.close(status_w)
            _outer(init_pid, status_r)
        os.close(status_r)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        build_root(settings)
        drop_capabilities()
        _prctl(PR_SET_DUMPABLE, 0)  # the worker cannot open init's /proc entries or trace it
        worker = os.fork()
        if worker:
            _init(worker, status_w)
        os.close(status_w)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(PR_SET_DUMPABLE, 1)  # init stays undumpable; the worker is an ordinary process
    except Exception as error:  # fail closed: no candidate code runs unconfined
        sys.stderr.write(f"sandbox confinement failed: {error}\n")
        sys.stderr.flush()
        os._exit(FAILED)
