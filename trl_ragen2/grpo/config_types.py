"""Check a config dataclass's values against its field types, naming the field; standard library only.

`TrlParser` applies a field's type to strings only: a YAML value that is already a number or a list reaches the
config as it is, so `mi_every_n_steps: 1.5` would be taken as given and `reward_variance_top_p: [0.9]` would fail
later with a bare `TypeError`. [`check_field_types`] runs first in the configs' `__post_init__`.

Checked: `bool`, `int` (a bool is not one), `float` (an int is one), `str`, `list[...]` (each item), `Literal`,
and unions of these. A field with any other type in its annotation (an enum, a dict, a class), and a `None`
value, are left to the code that reads them, and so are the fields of the parent config (TRL's `GRPOConfig`): the
library holds only its own fields to their declared types, and accepts whatever TRL accepts for TRL's.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing


_UNKNOWN = object()  # a type this module does not check


def _describe(tp) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", type(None): "None"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp) or (typing.Any,)
        return "a list" if item is typing.Any else f"a list of {_plural(item)}"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _plural(tp) -> str:
    return {bool: "booleans", int: "integers", float: "numbers", str: "strings"}.get(tp, _describe(tp))


def _accepts(tp, value):
    """True or False, or `_UNKNOWN` for a type that is not checked."""
    if tp is typing.Any:
        return True
    if tp is type(None) or tp is None:
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin is list or tp is list:
        if not isinstance(value, list | tuple):
            return False
        args = typing.get_args(tp)
        if not args:
            return True
        results = [_accepts(args[0], item) for item in value]
        return _UNKNOWN if _UNKNOWN in results else all(results)
    return _UNKNOWN


def _members(tp) -> tuple:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


@functools.cache
def _hints(cls) -> dict:
    """The resolved field types of a dataclass and its bases (string annotations included)."""
    hints = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        namespace = vars(sys.modules.get(klass.__module__, None) or object())
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if isinstance(annotation, str):
                try:
                    annotation = eval(annotation, dict(namespace), {"typing": typing})  # noqa: S307 - the module's own annotation
                except Exception:  # noqa: BLE001 - an annotation that cannot be resolved is not checked
                    annotation = _UNKNOWN
            hints[name] = annotation
    return hints


def _checkable(tp) -> bool:
    if tp in (bool, int, float, str, type(None), None, typing.Any, list):
        return True
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return True
    if origin is list or origin in (typing.Union, types.UnionType):
        return all(_checkable(arg) for arg in typing.get_args(tp))
    return False


def field_type_error(name: str, tp, value) -> str | None:
    """The message for a value its field's type does not accept, or None (accepted, or a type not checked).

    `None` is left to the code reading the field (transformers' parser gives it to some fields typed without it).
    """
    if tp is _UNKNOWN or value is None or not _checkable(tp):
        return None
    members = _members(tp)
    results = [_accepts(member, value) for member in members]
    if any(result is True for result in results) or _UNKNOWN in results:
        return None
    expected = " or ".join(_describe(member) for member in members)
    return f"{name} must be {expected}, got {value!r} ({type(value).__name__})"


def check_field_types(config, parent: type | None = None) -> None:
    """Raise a `ValueError` naming the first field of `config` whose value its annotation does not accept.

    Fields that the dataclass `parent` declares are skipped: the parent's own `__post_init__` reads them, and it may
    accept more than their annotation says (TRL's `scale_rewards: str` also takes `True` and `False`). A subclass
    that redeclares such a field (to change its default) does not narrow what it accepts.
    """
    hints = _hints(type(config))
    inherited = {field.name for field in dataclasses.fields(parent)} if parent is not None else set()
    for field in dataclasses.fields(config):
        if not field.init or field.name not in hints or field.name in inherited:
            continue
        message = field_type_error(field.name, hints[field.name], getattr(config, field.name))
        if message:
            raise ValueError(f"{message}; check the value in the config file or on the command line")
