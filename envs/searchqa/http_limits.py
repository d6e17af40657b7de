"""Limits on untrusted HTTP input, as pure functions: the body length header and the JSON body.

The retrieval server (`server.py`) and its client (`retrieval.py`) read bytes from the network; these functions
turn them into values or into an error sentence, and never raise on what they are given:

- [`content_length`] accepts exactly one header value made of ASCII digits (so `-1`, `+5`, `1e3`, `0x10`, `5, 5`
  and non-ASCII digits are errors, not a 50 MiB read);
- [`json_too_deep`] finds nesting beyond a limit in linear time before the (recursive) decoder sees the text, so a
  body of a million `[` is answered with an error, not a `RecursionError`;
- [`decode_json`] combines the depth check with strict UTF-8 decoding and `json.loads`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np


MAX_JSON_DEPTH = 16  # a retrieval request is one flat object (depth 1); results are depth 3

_DIGITS = re.compile(r"[0-9]{1,18}")
# A JSON string literal, or an unterminated one with the rest of the text: every match consumes what it tried, so
# substituting is linear even for bodies made of quotes and backslashes.
_STRING_OR_REST = re.compile(r'"(?:[^"\\]|\\.)*"|".*', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = str.maketrans({"[": "\x02", "{": "\x02", "]": "\x00", "}": "\x00"})


def content_length(values: Sequence[str] | None) -> int | str:
    """The body length that `Content-Length` header values announce, or why they are not acceptable.

    Missing: 0. One value of 1 to 18 ASCII digits (surrounding spaces allowed): that number. Anything else (a
    sign, a unit, hex, several different values) is an error sentence.
    """
    if not values:
        return 0
    distinct = {value.strip() for value in values}
    if len(distinct) != 1:
        return f"Content-Length is given {len(values)} times with different values; send it once"
    (value,) = distinct
    if not _DIGITS.fullmatch(value):
        return f"Content-Length must be a non-negative integer of ASCII digits, got {value[:40]!r}"
    return int(value)


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text nests arrays and objects deeper than `limit` (brackets inside strings do not count).

    Linear in the text and done by `re` and numpy, not a Python loop per character. Text after an unterminated
    string is ignored: the decoder stops there with an error. Malformed text is otherwise not judged here.
    """
    brackets = _NOT_BRACKET.sub("", _STRING_OR_REST.sub("", text))
    if len(brackets) <= limit:
        return False
    steps = np.frombuffer(brackets.translate(_DEPTH_STEP).encode("ascii"), dtype=np.uint8).astype(np.int64) - 1
    return bool(np.cumsum(steps).max() > limit)  # +1 per opening bracket, -1 per closing one


def decode_json(body: bytes, limit: int = MAX_JSON_DEPTH) -> tuple[Any, str | None]:
    """`(value, None)` for a UTF-8 JSON body nested at most `limit` deep, else `(None, why not)`."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"the body is not UTF-8 ({error.reason} at byte {error.start})"
    if json_too_deep(text, limit):
        return None, f"the JSON body nests deeper than {limit} levels"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        return None, f"the body is not JSON: {error}"
    except RecursionError:  # unreachable after the depth check; kept so no input can escape as an exception
        return None, f"the JSON body nests deeper than {limit} levels"
