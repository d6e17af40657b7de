"""Local problem files: the record files (.jsonl, .json, .parquet) that the file-backed environments read.

`read_records` reads a file into dicts. `load_problem_file` turns them into an environment's problems with the
environment's record parser, optionally keeps the first records and filters the problems, and caches the result
per file version (path and modification time), so environments built from the same file share one parsed copy and
an edited file is read again. Countdown and MetaMathQA load their `data_path` through it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar


Problem = TypeVar("Problem")


def read_records(path: str | Path, *, what: str = "records") -> list[dict[str, Any]]:
    """Records (dicts) from a .jsonl (one object per line), .json (a list of objects) or .parquet file.

    `what` names the data in error messages ("Countdown problems").
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = []
        with path.open(encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}: line {line_number} is not valid JSON ({error})") from None
    elif suffix == ".json":
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
        if not isinstance(records, list):
            raise ValueError(
                f"{path}: a .json file of {what} must hold a list of objects, got {type(records).__name__}"
            )
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    else:
        raise ValueError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .json or .parquet")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise TypeError(f"{path}: record {index} must be an object, got {type(record).__name__}")
    if not records:
        raise ValueError(f"{path}: holds no {what}")
    return records


def load_problem_file(
    path: str | Path,
    parse: Callable[..., Problem],
    *,
    what: str,
    expected: str,
    max_records: int | None = None,
    keep: Callable[[Problem], bool] | None = None,
) -> tuple[Problem, ...]:
    """The problems of a local record file, cached per file version.

    Args:
        path: The file (the environment's `data_path`).
        parse: `parse(record, where=...)` turns one record into a problem; `where` ("file: record 3") locates it in
            the errors it raises.
        what: The data in error messages ("Countdown problems").
        expected: The file format a missing `data_path` should have been ("a Countdown-Tasks-3to4 file").
        max_records: Keep only the first records (before `keep` filters them).
        keep: Keep only the problems it accepts; a `ValueError` when it accepts none.
    """
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise FileNotFoundError(f"data_path={str(path)!r} does not exist; pass {expected}")
    return _load_cached(str(resolved), resolved.stat().st_mtime_ns, parse, what, max_records, keep)


@lru_cache(maxsize=16)
def _load_cached(
    path: str, mtime_ns: int, parse: Callable, what: str, max_records: int | None, keep: Callable | None
) -> tuple:
    records = read_records(path, what=what)
    if max_records is not None:
        records = records[:max_records]
    problems = [parse(record, where=f"{path}: record {index}") for index, record in enumerate(records)]
    if keep is not None:
        problems = [problem for problem in problems if keep(problem)]
        if not problems:
            raise ValueError(f"{path}: none of its {len(records)} {what} is left after the filter {keep.__name__}")
    return tuple(problems)


__all__ = ["load_problem_file", "read_records"]
