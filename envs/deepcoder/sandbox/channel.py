"""The judge's end of a running harness: spawn it, send the job, read its replies as bounded, untrusted data.

A harness process gets two pipes besides stdin/stdout/stderr: the control pipe (job, then call requests) and the
reply pipe (`ready`, then one JSON line per request). Everything read from the reply pipe is read with a deadline
(`poll`, non-blocking), a size cap, and parsed by `parse_reply`: a JSON text whose nesting is measured before it
is parsed (so 200,000 `[` are refused, not recursed into), with integers of at most `MAX_INT_DIGITS` digits.
stdout and stderr go to files the parent created and reads back through its own descriptors, so a program
cannot swap them for a FIFO or a link. Nothing the program writes is ever opened by path.
"""

from __future__ import annotations

import itertools
import json
import marshal
import os
import re
import select
import signal
import subprocess
import time
from typing import Any


MAX_INT_DIGITS = 4300  # Python's own default `sys.int_max_str_digits`: int() of longer text is slow
MAX_JSON_DEPTH = 70  # plain values nest at most 64 levels, plus the reply envelope
# a JSON string, or an unterminated one running to the end (possessive: never backtracks, so linear time)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\Z)', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class ReplyError(Exception):
    """The program's reply was missing, late, too large or malformed; `kind` says which."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "timeout", "closed", "too_large", "malformed"


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets inside strings do not count)."""
    brackets = _NOT_BRACKETS.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(_DEPTH_STEP[c] for c in brackets), default=0)


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def parse_reply(line: bytes) -> Any:
    """A reply line as JSON data, or `ReplyError("malformed")`; never raises anything else."""
    try:
        text = line.decode("utf-8", errors="strict")
        if json_depth(text) > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
        return json.loads(text, parse_int=_bounded_int)
    except (ValueError, RecursionError, MemoryError) as error:
        raise ReplyError("malformed", f"a reply that is not valid plain data ({str(error)[:200]})") from None


def _poll(fd: int, events: int, timeout_s: float) -> bool:
    """Wait until `fd` is ready for `events` (or hung up); False after `timeout_s` (poll has no fd-number limit)."""
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(max(timeout_s, 0.0) * 1000))


class HarnessProcess:
    """One spawned harness: `send_job`, `read_line`, `send_line`, then `close` (which kills what is left)."""

    def __init__(self, command: list[str], *, stdin, stdout, stderr, identity: dict[str, Any], cwd: str):
        control_read, self.control = os.pipe()
        self.replies, reply_write = os.pipe()
        os.set_blocking(self.replies, False)
        self._buffer = b""
        try:
            self.process = subprocess.Popen(
                [*command, str(control_read), str(reply_write)],
                cwd=cwd,
                env={},
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                pass_fds=(control_read, reply_write),
                start_new_session=True,
                **identity,
            )
        except BaseException:
            for fd in (self.control, self.replies):
                os.close(fd)
            raise
        finally:
            os.close(control_read)
            os.close(reply_write)
        self.pid = self.process.pid

    def _write(self, data: bytes, deadline: float) -> None:
        os.set_blocking(self.control, False)
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplyError("timeout", "the program did not take its input in time")
            _poll(self.control, select.POLLOUT, remaining)
            try:
                view = view[os.write(self.control, view) :]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise ReplyError("closed", "the program ended before it read its input") from None

    def send_job(self, job: dict[str, Any], deadline: float) -> None:
        data = marshal.dumps(job)
        self._write(len(data).to_bytes(8, "big") + data, deadline)

    def send_line(self, data: bytes, deadline: float) -> None:
        self._write(data + b"\n", deadline)

    def read_line(self, deadline: float, limit: int) -> bytes:
        """The next reply line (without its newline), read before `deadline` and at most `limit` bytes long."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > limit:
                raise ReplyError("too_large", f"a reply longer than {limit} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplyError("timeout", "no reply in time")
            if not _poll(self.replies, select.POLLIN, remaining):
                continue
            try:
                chunk = os.read(self.replies, min(limit + 1 - len(self._buffer), 1 << 20) or 1)
            except BlockingIOError:
                continue
            if not chunk:
                raise ReplyError("closed", "the program ended without replying")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        if len(line) > limit:
            raise ReplyError("too_large", f"a reply longer than {limit} bytes")
        return line

    def wait(self, deadline: float) -> bool:
        """Wait for the harness to exit; True when `deadline` passed first."""
        remaining = max(deadline - time.monotonic(), 0.0)
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3: fall back to polling
            try:
                self.process.wait(timeout=remaining)
                return False
            except subprocess.TimeoutExpired:
                return True
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            return not poller.poll(remaining * 1000)
        finally:
            os.close(pidfd)

    def close(self, grace_s: float = 0.0) -> bool:
        """Close the pipes, give the harness `grace_s` to exit on its own (it does once the control pipe is
        closed), then kill its process group (the program and anything it started in its session) and reap it.
        Returns True when the harness was still running, i.e. killed here."""
        for fd in (self.control, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        if grace_s > 0 and self.process.poll() is None:
            self.wait(time.monotonic() + grace_s)
        killed = self.process.poll() is None
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        return killed
