"""The program that runs inside the sandbox: confinement, limits, guard, then the candidate solution.

The parent runs `python -I -B -c <this source> CONTROL_FD REPLY_FD` with an empty environment. It uses the
standard library only and imports as little as it can before the candidate runs (interpreter start-up is most of
an execution's cost). In order:

1. write `ready` on the reply pipe and read the job from the control pipe (a length-prefixed `marshal` dict,
   written by the trusted parent, which may first move this process into a memory cgroup);
2. where the job asks for it, confine the process in new namespaces (`confine.py`, whose source comes with the
   job) and change into the working directory;
3. apply the resource limits (`resource.setrlimit`, soft = hard, so the candidate cannot raise them);
4. install the guard: dangerous `os`/`posix` functions raise `PermissionError`, `subprocess`, `ctypes`, `socket`
   and friends cannot be imported, and files outside the working directory cannot be opened for writing;
5. `stdio`: execute the program as `__main__` (stdin is the test's input); `serve`: execute it, then answer call
   requests (one JSON line each) with one JSON line each: the return value encoded by `plain.py`, or the
   exception raised.

Nothing here decides a test. The judge reads replies as untrusted data, rebuilds plain values and compares them
in its own process, so a candidate that patches this harness, `json` or `exec` can only change what it claims
to return, as any program can. The guard stops accidents and naive attempts; it is not a security boundary
(nothing in Python inside the process can be). The boundary is the operating system's: namespaces, a separate
user, rlimits and a cgroup.
"""

import builtins
import io
import marshal
import os
import resource
import sys


BLOCKED_OS_FUNCTIONS = (
    "system popen fork forkpty vfork execv execve execl execle execlp execlpe execvp execvpe spawnl spawnle spawnlp "
    "spawnlpe spawnv spawnve spawnvp spawnvpe posix_spawn posix_spawnp kill killpg setsid setpgid setpgrp "
    "setuid setgid seteuid setegid setreuid setregid setresuid setresgid setgroups initgroups chroot fchdir "
    "putenv unsetenv remove unlink rmdir removedirs rename renames replace truncate chmod fchmod lchmod chown "
    "fchown lchown link symlink mkfifo mknod plock pidfd_open setns unshare"
).split()
BLOCKED_MODULES = (
    "ctypes _ctypes subprocess _posixsubprocess multiprocessing _multiprocessing socket _socket ssl pty resource "
    "psutil webbrowser"
).split()
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


# ---------------------------------------------------------------------------------------------------------------
# Limits and guard


def apply_limits(limits):
    """Set each limit as both soft and hard (CPU: hard one second above, so SIGXCPU comes first)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = limits.get("cpu_seconds")
    if cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for key, name in (
        ("memory_bytes", "RLIMIT_AS"),
        ("file_size_bytes", "RLIMIT_FSIZE"),
        ("open_files", "RLIMIT_NOFILE"),
        ("max_processes", "RLIMIT_NPROC"),
    ):
        value = limits.get(key)
        if value is not None and hasattr(resource, name):
            resource.setrlimit(getattr(resource, name), (value, value))


def _refuse(name):
    def refused(*args, **kwargs):
        raise PermissionError(f"{name} is disabled in the sandbox")

    return refused


def install_guard(workdir):
    """Disable process, signal, permission and file-removal functions; confine writes to `workdir`."""
    import posix

    os.environ.clear()  # empty already, but for LC_CTYPE, which the interpreter sets when it coerces the C locale
    for module in (os, posix):
        for name in BLOCKED_OS_FUNCTIONS:
            if hasattr(module, name):
                setattr(module, name, _refuse(f"os.{name}"))
    for name in BLOCKED_MODULES:
        sys.modules[name] = None  # `import name` now raises ImportError

    root = os.path.realpath(workdir)
    real_open, real_os_open = builtins.open, os.open

    def inside(path):
        resolved = os.path.realpath(os.fsdecode(path))
        return resolved == root or resolved.startswith(root + os.sep)

    def guarded_open(file, mode="r", *args, **kwargs):
        if not isinstance(file, int) and any(flag in mode for flag in "wax+") and not inside(file):
            raise PermissionError(f"writing {file!r} is disabled in the sandbox (only the working directory)")
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & WRITE_FLAGS and not inside(path):
            raise PermissionError(f"writing {path!r} is disabled in the sandbox (only the working directory)")
        return real_os_open(path, flags, *args, **kwargs)

    builtins.open = io.open = guarded_open
    os.open = posix.open = guarded_os_open


# ---------------------------------------------------------------------------------------------------------------
# Pipes


def read_exactly(fd, size):
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the judge closed the control pipe")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_job(fd):
    size = int.from_bytes(read_exactly(fd, 8), "big")
    return marshal.loads(read_exactly(fd, size))


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_line(stream):
    """One request line, or None at the end of the stream (the judge is done)."""
    line = stream.readline()
    return line if line.endswith(b"\n") else None


# ---------------------------------------------------------------------------------------------------------------
# Running the candidate


def _error_text(error):
    """`Type: message` plus the last lines of the traceback that fall in the solution."""
    import traceback  # only when something failed: it costs milliseconds to import

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == "solution.py"]
    where = "".join(traceback.format_list(frames[-3:]))
    return f"{where}{type(error).__name__}: {error}"[-2000:]


def _raised(error):
    if isinstance(error, SystemExit):
        return {"raised": {"type": "SystemExit", "message": f"the solution exited ({error.code})", "traceback": ""}}
    message = str(error)[-2000:] if not isinstance(error, RecursionError) else "maximum recursion depth exceeded"
    return {"raised": {"type": type(error).__name__, "message": message, "traceback": _error_text(error)}}


def _solution_namespace(source, name):
    namespace = {"__name__": name, "__builtins__": builtins}
    exec(compile(source, "solution.py", "exec"), namespace)
    return namespace


def _resolve(namespace, fn_name):
    if callable(namespace.get(fn_name)):
        return namespace[fn_name]
    solution_class = namespace.get("Solution")
    if isinstance(solution_class, type) and hasattr(solution_class, fn_name):
        return getattr(solution_class(), fn_name)
    raise NameError(f"the solution defines no function {fn_name!r} (nor a Solution class with that method)")


def run_stdio(source):
    """Execute the program as a script; a failure is reported on stderr with exit code 1."""
    sys.argv = ["solution.py"]
    try:
        _solution_namespace(source, "__main__")
    except SystemExit:
        raise
    except BaseException as error:  # report any failure of the candidate as a runtime error
        sys.stderr.write(_error_text(error) + "\n")
        try:
            sys.stdout.flush()
        finally:
            os._exit(1)


def serve(job, control, replies, codec):
    """Load the program, then answer each call request until the judge closes the control pipe."""
    import json  # before the candidate's functions run (it may plant its own `json` later; that changes nothing)

    dumps, loads = json.dumps, json.loads
    requests = os.fdopen(control, "rb", buffering=1 << 16)

    def reply(payload):
        try:
            text = dumps(payload)
        except (ValueError, RecursionError, OverflowError) as error:
            text = dumps(_raised(error))
        write_all(replies, text.encode("utf-8", "surrogatepass") + b"\n")

    try:
        function = _resolve(_solution_namespace(job["source"], "__solution__"), job["fn_name"])
    except BaseException as error:
        reply(_raised(error))
        return
    while True:
        line = read_line(requests)
        if line is None:
            return
        try:
            request = codec["decode"](loads(line))
            value = function(*request[0], **request[1])
            payload = {"value": codec["encode"](value)}
        except BaseException as error:  # the candidate's failure, reported to the judge
            payload = _raised(error)
        reply(payload)


def probe_report(job):
    """What the sandbox looks like from inside (used once, to check an isolation mode works)."""
    status = {}
    try:
        with open("/proc/self/status") as f:
            status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        pass
    return {
        "prefixes": [sys.prefix, sys.base_prefix, sys.exec_prefix],
        "uid": os.getuid(),
        "cap_eff": status.get("CapEff", "").strip(),
        "host_visible": [path for path in job.get("hidden", ()) if os.path.exists(path)],
    }


def main():
    """Handshake, read the job, confine, limit, guard, run."""
    control, replies = int(sys.argv[1]), int(sys.argv[2])
    write_all(replies, b"ready\n")
    job = read_job(control)
    if job.get("confine"):
        namespace = {"__name__": "confine"}
        exec(compile(job["confine"]["source"], "confine.py", "exec"), namespace)
        namespace["confine"](job["confine"])  # returns in the confined worker only
    if job.get("workdir"):
        os.chdir(job["workdir"])
    if job["mode"] == "probe":
        import json

        write_all(replies, json.dumps(probe_report(job)).encode() + b"\n")
        return
    codec = {}
    if job["mode"] == "serve":
        exec(compile(job["codec"], "plain.py", "exec"), codec)
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)  # big integers print in full, as on judges (CPU time is limited anyway)
    apply_limits(job.get("limits", {}))
    if job.get("guard", True):
        install_guard(os.getcwd())
    if job["mode"] == "stdio":
        os.close(control)
        os.close(replies)
        run_stdio(job["source"])
    else:
        serve(job, control, replies, codec)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
