"""Assertion tests (HumanEval's `check(candidate)`), run by the judge with the candidate kept in the sandbox.

The test code and the problem's own helper code (HumanEval's prompt: `poly`, `encode_cyclic`, ...) come with the
problem, so they are trusted and run here, in the judge's process. The candidate's function is replaced by a
sandbox [`Session`]: each `candidate(...)` call sends the arguments to the sandboxed program and returns the
plain value it sent back, built here. So the asserts compare built-in objects with Python's own `==`, and
nothing the program does in its process (patching `exec`, `json` or the harness, objects whose `__eq__` is always
true, reading the harness's frames) can make an assert pass: the program never sees the test or its expected
values, only the arguments.

`random` imported by test code is a private generator seeded per test, so judging is deterministic and leaves
the trainer's global `random` state alone.
"""

from __future__ import annotations

import builtins
import inspect
import random
import types
from functools import lru_cache


@lru_cache(maxsize=4096)
def _compiled(source: str, filename: str):
    return compile(source, filename, "exec")


def private_random(seed: int) -> types.ModuleType:
    """A stand-in for the `random` module whose functions draw from its own `random.Random(seed)`."""
    module = types.ModuleType("random", "random functions of a private generator (judge)")
    generator = random.Random(seed)
    for name in dir(random):
        if name.startswith("_"):
            continue
        bound = getattr(generator, name, None)
        setattr(module, name, bound if inspect.ismethod(bound) else getattr(random, name))
    return module


def judge_builtins(seed: int = 0) -> dict:
    """The built-ins of test code: the real ones, with `import random` giving `private_random(seed)`."""
    names = dict(vars(builtins))
    real_import = builtins.__import__
    generator = private_random(seed)

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "random" and level == 0:
            return generator
        return real_import(name, globals, locals, fromlist, level)

    names["__import__"] = import_
    return names


def run_assertion_test(candidate, fn_name: str, code: str, context: str = "", seed: int = 0) -> None:
    """Run the test `code` after `context`, with `fn_name` bound to `candidate`; raises what the test raises
    (`AssertionError` when an assert fails)."""
    namespace = {"__name__": "__judge__", "__builtins__": judge_builtins(seed)}
    if context:
        exec(_compiled(context, "prompt.py"), namespace)
    namespace[fn_name] = candidate
    exec(_compiled(code, "test.py"), namespace)
