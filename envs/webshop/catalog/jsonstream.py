"""Incremental readers for very large JSON files (WebShop's `items_shuffle.json` is a multi-GB array).

`iter_json_array(path)` yields the elements of a top-level JSON array one at a time and `iter_json_object(path)`
yields the `(key, value)` pairs of a top-level object, each reading the file in fixed-size chunks with
`json.JSONDecoder.raw_decode`. Only one element (plus one chunk of text) is held at a time, so a 5 GB catalogue
never exists twice in memory. Gzipped files (`.gz`) are read transparently.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO


CHUNK_CHARS = 1 << 20  # 1 Mi characters per read
_WHITESPACE = " \t\n\r"
_NUMBER_CONTINUATION = "0123456789.eE+-"


def open_text(path: str | Path) -> TextIO:
    """Open a UTF-8 text file, gunzipping it on the fly when its name ends in `.gz`."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


class _ChunkedText:
    """A growing window over a text stream: `buffer[pos:]` is unread text; `fill()` appends one more chunk."""

    def __init__(self, handle: TextIO, path: Path, chunk_chars: int):
        self.handle, self.path, self.chunk_chars = handle, path, chunk_chars
        self.buffer, self.pos, self.eof = "", 0, False
        self.consumed = 0  # characters dropped from the front of the buffer, for error positions

    def fill(self) -> bool:
        """Read one more chunk; False at end of file. Drops the consumed prefix first so memory stays bounded."""
        if self.eof:
            return False
        if self.pos:
            self.consumed += self.pos
            self.buffer, self.pos = self.buffer[self.pos :], 0
        chunk = self.handle.read(self.chunk_chars)
        if not chunk:
            self.eof = True
            return False
        self.buffer += chunk
        return True

    def skip_whitespace(self) -> None:
        while True:
            while self.pos < len(self.buffer) and self.buffer[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.buffer) or not self.fill():
                return

    def peek(self) -> str:
        """The next non-whitespace character, or "" at end of file."""
        self.skip_whitespace()
        return self.buffer[self.pos] if self.pos < len(self.buffer) else ""

    def expect(self, char: str, what: str) -> None:
        found = self.peek()
        if found != char:
            where = self.consumed + self.pos
            raise ValueError(
                f"{self.path}: expected {what} ({char!r}) at character {where}, found {found or 'end of file'!r}"
            )
        self.pos += 1

    def decode_value(self, decoder: json.JSONDecoder) -> Any:
        """Decode one JSON value starting at the cursor, reading more text until it is complete."""
        self.skip_whitespace()
        while True:
            try:
                value, end = decoder.raw_decode(self.buffer, self.pos)
            except json.JSONDecodeError as error:
                if self.fill():
                    continue
                where = self.consumed + error.pos
                raise ValueError(f"{self.path}: invalid JSON at character {where}: {error.msg}") from None
            # A number cut by the chunk boundary parses as a shorter one ("12" of "125", "-0" of "-0.5"): when the
            # value ends at the buffer's end or before a character that could continue a number, read on first.
            if (end == len(self.buffer) or self.buffer[end] in _NUMBER_CONTINUATION) and self.fill():
                continue
            self.pos = end
            return value


def _members(path: str | Path, open_char: str, close_char: str, with_keys: bool, chunk_chars: int) -> Iterator[Any]:
    path = Path(path)
    decoder = json.JSONDecoder()
    with open_text(path) as handle:
        text = _ChunkedText(handle, path, chunk_chars)
        kind = "array" if open_char == "[" else "object"
        text.expect(open_char, f"a top-level JSON {kind}")
        if text.peek() == close_char:
            text.pos += 1
            return
        while True:
            if with_keys:
                key = text.decode_value(decoder)
                if not isinstance(key, str):
                    raise ValueError(f"{path}: object keys must be strings, found {key!r}")
                text.expect(":", "a colon after an object key")
                yield key, text.decode_value(decoder)
            else:
                yield text.decode_value(decoder)
            separator = text.peek()
            if separator == close_char:
                text.pos += 1
                break
            text.expect(",", f"a comma or {close_char!r} between {kind} members")
        if text.peek():
            raise ValueError(f"{path}: unexpected text after the top-level JSON {kind}")


def iter_json_array(path: str | Path, chunk_chars: int = CHUNK_CHARS) -> Iterator[Any]:
    """Yield the elements of the top-level JSON array in `path`, one at a time."""
    yield from _members(path, "[", "]", with_keys=False, chunk_chars=chunk_chars)


def iter_json_object(path: str | Path, chunk_chars: int = CHUNK_CHARS) -> Iterator[tuple[str, Any]]:
    """Yield the `(key, value)` pairs of the top-level JSON object in `path`, one at a time."""
    yield from _members(path, "{", "}", with_keys=True, chunk_chars=chunk_chars)


def iter_jsonl(path: str | Path) -> Iterator[Any]:
    """Yield the records of a JSON Lines file (blank lines skipped)."""
    path = Path(path)
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}: line {line_number} is not valid JSON: {error.msg}") from None
