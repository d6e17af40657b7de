"""math-verify's equivalence judgement under a wall-clock budget, from any thread.

math-verify (`parse`, `verify`) guards itself with `signal.alarm`, in whole seconds per operation, and only in the
main thread: elsewhere its timeouts raise, so they must be switched off, and then an answer such as
`\\binom{10^{7}}{5*10^{6}}` keeps sympy busy for minutes. [`math_verify_verdict`] bounds the whole judgement (both
parses and the comparison) by one budget in seconds:

- in the main thread, a real-time interval timer (`signal.setitimer`) interrupts the work when the budget is spent;
  the previous handler and timer are restored afterwards;
- in any other thread, the judgement runs in a worker process (`python -m trl_ragen2_envs.metamathqa.judge`, started on
  first use and reused), which applies the same timer in its own main thread; the caller waits at most the budget
  plus a margin, and a worker that does not answer is killed and replaced on the next call.

The first judgement in a process first imports math-verify and sympy and judges two easy pairs, untimed, so
imports and parser set-up never count against an answer's budget. Elsewhere than POSIX, math-verify's own timeouts
are used (whole seconds per operation). An answer math-verify cannot judge in time is not equivalent: the verdict
is `"timeout"`, and the environment scores it as wrong.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager


DEFAULT_TIMEOUT_S = 2.0
WORKER_START_S = 60.0  # the worker's first answer also waits for its warm-up (importing sympy)
WORKER_MARGIN_S = 2.0  # added to the budget when waiting for the worker
VERDICTS = ("equal", "different", "timeout")
# Judged once per process, untimed: sympy imports its simplification and number code on first use (over a second).
WARM_UP_PAIRS = (("x^2+2x+1", "(x+1)^2"), ("\\frac{1}{2}", "0.5"))


class JudgeTimeout(BaseException):
    """The budget ran out. A BaseException, so math-verify's `except Exception` blocks cannot swallow it."""


def judge(predicted: str, reference: str, own_timeout_s: int | None = None) -> bool:
    """math-verify's judgement: are the two answers equivalent? `own_timeout_s`: math-verify's own per-operation
    timeouts (None: off, as needed outside the main thread)."""
    from math_verify import parse, verify

    def parsed(text: str) -> list:
        # Bare LaTeX such as x^2+2x+1 is only found inside math delimiters.
        result = parse(text, parsing_timeout=own_timeout_s)
        return result if result or "$" in text else parse(f"${text}$", parsing_timeout=own_timeout_s)

    try:
        return bool(verify(parsed(reference), parsed(predicted), timeout_seconds=own_timeout_s))
    except Exception:  # noqa: BLE001 -- sympy raises many types; an answer it cannot handle is just not equal
        return False


@contextmanager
def _interval_timer(seconds: float):
    """Raise `JudgeTimeout` in the main thread after `seconds`; restores the previous handler and timer."""

    def expire(signum, frame):
        raise JudgeTimeout

    previous_handler = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay:  # someone else's timer (e.g. pytest-timeout): resume it with the time it had left
            left = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), previous_interval)


_warmed_up = threading.Event()


def _warm_up() -> None:
    """Import math-verify and sympy and judge `WARM_UP_PAIRS` once, untimed: the first call in a process spends
    seconds on imports and parser set-up, which must not count against an answer's budget."""
    if not _warmed_up.is_set():
        for predicted, reference in WARM_UP_PAIRS:
            judge(predicted, reference)
        _warmed_up.set()


def _judge_in_this_thread(predicted: str, reference: str, timeout_s: float) -> str:
    _warm_up()
    try:
        with _interval_timer(timeout_s):
            return "equal" if judge(predicted, reference) else "different"
    except JudgeTimeout:
        return "timeout"


class _Worker:
    """One judging process shared by the threads of this process (they take turns)."""

    command = (sys.executable, "-m", "trl_ragen2_envs.metamathqa.judge")

    def __init__(self):
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.warm = False  # the worker has answered once (sympy is imported)

    def ask(self, predicted: str, reference: str, timeout_s: float) -> str:
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self.process = subprocess.Popen(
                    list(self.command),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONIOENCODING": "utf-8"},
                )
                self.warm = False
            request = json.dumps({"predicted": predicted, "reference": reference, "timeout_s": timeout_s})
            wait = timeout_s + WORKER_MARGIN_S + (0.0 if self.warm else WORKER_START_S)
            try:
                self.process.stdin.write(request.encode("ascii") + b"\n")
                self.process.stdin.flush()
                ready, _, _ = select.select([self.process.stdout], [], [], wait)
                line = self.process.stdout.readline() if ready else b""
                verdict = json.loads(line)["verdict"] if line else None
            except (OSError, ValueError, KeyError, TypeError):
                verdict = None
            if verdict not in VERDICTS:  # no answer in time, or a broken one: replace the worker next time
                self.stop()
                return "timeout"
            self.warm = True
            return verdict

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                stream.close()
            self.process = None


_WORKER = _Worker()
atexit.register(_WORKER.stop)


def math_verify_verdict(predicted: str, reference: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """`"equal"`, `"different"` or `"timeout"`: math-verify's judgement of `predicted` against `reference`, given
    at most `timeout_s` seconds (see the module docstring)."""
    if not hasattr(signal, "setitimer"):  # not POSIX: math-verify's own timeouts (processes on Windows)
        return "equal" if judge(predicted, reference, max(1, math.ceil(timeout_s))) else "different"
    if threading.current_thread() is threading.main_thread():
        return _judge_in_this_thread(predicted, reference, timeout_s)
    return _WORKER.ask(predicted, reference, timeout_s)


def _serve() -> None:
    """The worker's loop: one JSON request per line on stdin, one `{"verdict": ...}` line per request on stdout."""
    for line in sys.stdin.buffer:
        request = json.loads(line)
        verdict = _judge_in_this_thread(request["predicted"], request["reference"], float(request["timeout_s"]))
        sys.stdout.write(json.dumps({"verdict": verdict}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
