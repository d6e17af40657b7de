"""Plain values across the sandbox boundary: the only things a candidate program can hand the judge.

A value crosses as JSON: `None`, `bool`, `int`, `float` and `str` as themselves, a `list` as an array, and the
other containers as one-key objects, `{"tuple": [...]}`, `{"set": [...]}`, `{"frozenset": [...]}` and
`{"dict": [[key, value], ...]}` (so keys keep their types). Types are checked exactly (`type(x) is int`, never
`isinstance`): a subclass of `int` or `str` could redefine `==`, so it does not cross; neither does anything else.

`encode` runs on both sides (the harness encodes return values, the judge encodes call arguments) and `decode`
rebuilds built-in objects only, so whatever the judge compares afterwards uses Python's own `==`. This module
uses the standard library only: the sandbox harness runs its source (it cannot import the package).
"""

MAX_DEPTH = 64
SCALARS = (type(None), bool, int, float, str)
CONTAINER_TAGS = ("tuple", "set", "frozenset", "dict")


class PlainValueError(ValueError):
    """A value that cannot cross the sandbox boundary (wrong type, too deep, malformed)."""


def encode(value, depth=0):
    """`value` as JSON-ready data (see the module docstring); raises `PlainValueError` for anything else."""
    kind = type(value)
    if kind in SCALARS:
        return value
    if depth >= MAX_DEPTH:
        raise PlainValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
    if kind is list:
        return [encode(item, depth + 1) for item in value]
    if kind is tuple or kind is set or kind is frozenset:
        return {kind.__name__: [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[encode(key, depth + 1), encode(item, depth + 1)] for key, item in value.items()]}
    raise PlainValueError(
        f"a {kind.__module__}.{kind.__qualname__} cannot be compared by the judge; return plain values "
        "(None, bool, int, float, str, list, tuple, dict, set)"
    )


def decode(data, depth=0):
    """The built-in value that `encode` made `data` from; raises `PlainValueError` when `data` is not such data."""
    kind = type(data)
    if kind in SCALARS:
        return data
    if depth >= MAX_DEPTH:
        raise PlainValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
    if kind is list:
        return [decode(item, depth + 1) for item in data]
    if kind is not dict or len(data) != 1:
        raise PlainValueError("malformed value")
    ((tag, items),) = data.items()
    if tag not in CONTAINER_TAGS or type(items) is not list:
        raise PlainValueError(f"malformed value (tag {str(tag)[:40]!r})")
    try:
        if tag == "tuple":
            return tuple(decode(item, depth + 1) for item in items)
        if tag == "set":
            return {decode(item, depth + 1) for item in items}
        if tag == "frozenset":
            return frozenset(decode(item, depth + 1) for item in items)
        pairs = []
        for pair in items:
            if type(pair) is not list or len(pair) != 2:
                raise PlainValueError("malformed dict item")
            pairs.append((decode(pair[0], depth + 1), decode(pair[1], depth + 1)))
        return dict(pairs)
    except TypeError:  # an unhashable key or set member (a list)
        raise PlainValueError(f"malformed {tag}: unhashable member") from None
