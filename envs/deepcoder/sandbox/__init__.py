"""A sandbox for untrusted Python programs, for the environments that judge code (DeepCoder; any future code task).

Each execution is a fresh `python -I -B` process with an empty environment: isolated from the host by the
strongest mode that works on this machine (bubblewrap, else new namespaces set up by the harness; the weak modes
only on request), limited by rlimits and, where possible, a memory cgroup, and killed with everything it started
at its wall-clock timeout. A program can hand back plain values only (`None`, `bool`, `int`, `float`, `str` and
the built-in containers), rebuilt in the caller's process, so every comparison a judge makes uses Python's own
`==` on built-in objects. The modes, what each contains and the attacks tested against them:
`docs/sandbox.md`.

The interface, all an environment imports:

- `Sandbox(config)` or `Sandbox(**config_fields)`: decides the isolation once per configuration and process
  (`Sandbox.isolation`; weak modes raise `IsolationUnavailable` unless `allow_weak_isolation=True`), then
  - `run(program, stdin=...) -> Execution`: the program as a script, fed `stdin`;
  - `run(program, mode="function", fn_name=..., args=..., kwargs=...) -> Execution`: one call, its value or
    exception in `Execution.result`;
  - `serve(program, fn_name)`: a context manager yielding a `Session`; `session(*args, **kwargs)` calls the
    function inside the sandbox and returns the plain value it sent back, or raises its exception as the
    built-in one (`CandidateError` when there is none); `session.execution` is set when the block ends.
- `SandboxConfig`: the limits of one execution (`timeout_s`, `memory_mb`, `max_processes`, ...) and the isolation
  choices (`use_bubblewrap`, `use_unshare`, `drop_privileges`, `allow_weak_isolation`).
- `Execution`: what one execution did (`returncode`, `stdout`, `stderr`, `timed_out`, `memory_exceeded`, ...).
- `CandidateFailure`: a call that could not complete (timeout, death, a reply that is not plain data); a
  `BaseException`, so code that catches `Exception` cannot swallow it.
- `Isolation` (`mode`, `level`, `strong`, `describe()`), `resolve_isolation`, `IsolationUnavailable`: the mode
  this machine gives, for logs, metrics and model cards.

```python
from trl_ragen2_envs.deepcoder.sandbox import Sandbox

sandbox = Sandbox(timeout_s=2.0)
sandbox.run("print(int(input()) * 2)", stdin="21\\n").stdout  # "42\\n"
with sandbox.serve("def double(x):\\n    return (x, x)", "double") as double:
    double(21)  # (21, 21), a tuple built here
```

Inside the package (internal): `runner.py` (the sandbox, sessions, results), `isolation.py` (the modes, probed
once), `cgroup.py` (memory and process bounds of a whole program), `identity.py` (a fresh uid per execution and
the cleanup after it), `shared_copy.py` (root's verified copy of bubblewrap), `channel.py` (the pipes to the
child, replies read as bounded untrusted data), and the three modules whose source is sent into the sandboxed
process: `harness.py` (limits, guard, running the program), `confine.py` (the `unshare` mode) and `plain.py`
(the value codec, used on both sides). The package uses the standard library only.
"""

from .isolation import Isolation, IsolationUnavailable, resolve_isolation
from .runner import CandidateError, CandidateFailure, Execution, Sandbox, SandboxConfig, Session


__all__ = [
    "CandidateError",
    "CandidateFailure",
    "Execution",
    "Isolation",
    "IsolationUnavailable",
    "Sandbox",
    "SandboxConfig",
    "Session",
    "resolve_isolation",
]
