"""The program that runs inside the sandbox: limits, guard, then one test of the candidate solution.

The parent copies this file into a fresh working directory and runs `python -I -B harness.py spec.bin` with
an empty environment. It uses the standard library only, imports nothing from the package, and imports as
little as it can before the candidate runs (interpreter start-up is most of an execution's cost). In order:

1. read the spec (`spec.bin`, written by the parent with `marshal`) and, for function and assertion tests, a
   one-time token from stdin (the harness echoes it in its result, which a forged result file would lack);
2. apply the resource limits (`resource.setrlimit`, soft = hard, so the candidate cannot raise them);
3. install the guard: dangerous `os`/`posix` functions raise `PermissionError` (so do the `shutil` helpers
   built on them), `subprocess`,
   `ctypes`, `socket`, `multiprocessing`, `resource` and friends cannot be imported, and files outside the
   working directory cannot be opened for writing;
4. run the test: `stdio` executes the program as `__main__` with the test's stdin; `function` executes it,
   calls `fn_name(*args, **kwargs)` (or `Solution().fn_name` for LeetCode-style classes) and writes the return
   value as JSON to `result.json`; `assertion` executes it, then the test code in the same namespace.

The guard stops accidents and naive attempts; it is not a security boundary on its own (nothing written in
Python inside the process can be). The boundary is the operating system's: a separate unprivileged user,
rlimits, a new session killed as a whole, and bubblewrap namespaces when available.
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


############################################################
# Limits and guard
############################################################


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


############################################################
# Running one test
############################################################


def to_json(value, depth=0):
    """A JSON-safe copy: tuples become lists, sets sorted lists, other objects `{"__repr__": repr(obj)}`."""
    if depth > 100:
        return {"__repr__": "<nested too deeply>"}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(item, depth + 1) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [to_json(item, depth + 1) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, dict):
        return {str(key): to_json(item, depth + 1) for key, item in value.items()}
    return {"__repr__": repr(value)[:1000]}


def _error_text(error):
    """`Type: message` plus the last lines of the traceback that fall in the solution or the test."""
    import traceback  # only when something failed: it costs milliseconds to import

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename in ("solution.py", "test.py")]
    where = "".join(traceback.format_list(frames[-3:]))
    return f"{where}{type(error).__name__}: {error}"[-2000:]


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


def run_test(spec, source, token):
    """Run one test; returns the result payload (function and assertion modes) or None (stdio)."""
    mode = spec["mode"]
    if mode == "stdio":
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
        return None
    try:
        namespace = _solution_namespace(source, "__solution__")
        if mode == "function":
            value = _resolve(namespace, spec["fn_name"])(*spec.get("args", []), **spec.get("kwargs", {}))
            return {"token": token, "status": "ok", "value": to_json(value)}
        exec(compile(spec["assertion"], "test.py", "exec"), namespace)
        return {"token": token, "status": "ok"}
    except SystemExit as error:
        return {"token": token, "status": "error", "error": f"SystemExit: the solution exited ({error.code})"}
    except BaseException as error:
        return {"token": token, "status": "error", "exception": type(error).__name__, "error": _error_text(error)}


def main():
    """Read the spec, apply the limits and the guard, run the test; function and assertion modes write a result."""
    with open(sys.argv[1], "rb") as f:
        spec = marshal.load(f)
    with open(spec["solution"], encoding="utf-8") as f:
        source = f.read()
    token, dumps = "", None
    if spec["mode"] != "stdio":
        import json  # before the candidate runs, so it cannot plant its own `json`

        token, dumps = sys.stdin.readline().strip(), json.dumps
    write_result = open  # the real `open`, kept before the guard replaces it
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)  # big integers print in full, as on judges (CPU time is limited anyway)
    apply_limits(spec.get("limits", {}))
    if spec.get("guard", True):
        install_guard(os.getcwd())
    payload = run_test(spec, source, token)
    if payload is not None:
        text = dumps(payload)
        with write_result(spec["result"], "w", encoding="utf-8") as f:
            f.write(text)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
