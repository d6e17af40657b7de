"""The original WebShop data files, where they are published, and a resumable, checksum-verified download.

**Sources.** princeton-nlp/WebShop's `setup.sh` (commit 64fa2a5) fetches its data from Google Drive with `gdown`:
`-d small` gets `items_shuffle_1000.json` and `items_ins_v2_1000.json`, `-d all` gets `items_shuffle.json` and
`items_ins_v2.json`, and both get `items_human_ins.json`. `GOOGLE_DRIVE_IDS` holds the file ids of those commands;
`google_drive_url` turns one into Drive's direct-download address. `--mirror URL` (any server holding the same
files as `URL/<file name>`) replaces Drive; the checksums below still apply.

**Sizes and checksums** (`PUBLISHED_FILES`): the byte counts and SHA-256 digests that several independent public
projects pin for these files after downloading them. For `items_ins_v2_1000.json` they also match the copy
committed to ZihanWang314/webshop-minimal (RAGEN's WebShop package), hashed for this table. None of them was
fetched from Google Drive while writing it, so a file Drive serves today could differ; a mismatch fails the
download and says so. A file without a known digest (`sha256=None`) is accepted, and its digest is recorded.

**Resuming.** Bytes arrive in `<name>.part`. A later attempt asks for the rest with an HTTP `Range` header; a
server that ignores it (status 200) sends the whole file again and the part is restarted. The digest covers the
part already on disk plus the new bytes, and the file gets its final name only once size and digest match.
"""

from __future__ import annotations

import hashlib
import http.client
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


GOOGLE_DRIVE_IDS = {
    "items_shuffle_1000.json": "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
    "items_ins_v2_1000.json": "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
    "items_shuffle.json": "1A2whVgOO0euk5O13n2iYDM0bQRkkRduB",
    "items_ins_v2.json": "1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi",
    "items_human_ins.json": "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O",
}
# name -> (bytes, SHA-256)
PUBLISHED_FILES: dict[str, tuple[int | None, str | None]] = {
    "items_shuffle_1000.json": (4_467_013, "30a4765c3a327af72d9a9a95a6b2486d516f0fa1d3ecd83681901ce82a21b269"),
    "items_ins_v2_1000.json": (147_099, "f88a36314a397b53b3d9c3fa5878e5f7b26d35019a51ec83fbedeca61a948f6f"),
    "items_shuffle.json": (5_479_720_229, "2ef591d65df3af89e972ab72468eb82cbf124d876552d9f3678667edd620a6c8"),
    "items_ins_v2.json": (186_295_270, "1d36af476bdb8f82a5da62bd8acdabe54cd8de2fa84010d37da5c4890feb447e"),
    "items_human_ins.json": (5_137_548, "cf78667548a71786e1d9049c24b802e48e1084ad4bb021cae56ce1f6d96954a3"),
}
# the files of each `setup.sh -d` choice: (products, attributes and synthetic instructions, human instructions)
DATASET_FILES = {
    "small": ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json"),
    "all": ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json"),
}
CHUNK_BYTES = 1 << 20
PART_SUFFIX = ".part"

Progress = Callable[[str, int, "int | None"], None]  # (file name, bytes on disk, total bytes or None)


class DownloadError(OSError):
    """A file could not be downloaded completely; the message says why and what to do."""


class ChecksumError(DownloadError):
    """A downloaded file is complete but its size or SHA-256 differs from the published one."""


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch: its name on disk, its address, and its published size and SHA-256 when known."""

    name: str
    url: str
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Downloaded:
    """A file on disk after `download`: its digest, whether that digest was checked, and how it got there."""

    path: Path
    size: int
    sha256: str
    verified: bool  # False: no published digest to compare with (recorded, not checked)
    resumed_from: int  # bytes already on disk when this attempt started (0: a fresh download)
    fetched: bool  # False: the complete file was already there


def google_drive_url(file_id: str) -> str:
    """Drive's direct-download address of a file id (no confirmation page for files over Drive's scan limit)."""
    return f"https://drive.usercontent.google.com/download?id={file_id}&export=download&confirm=t"


def remote_files(dataset: str, mirror: str | None = None) -> list[RemoteFile]:
    """The files of `dataset` (`"small"` or `"all"`), from Google Drive or from `mirror` (`<mirror>/<name>`)."""
    if dataset not in DATASET_FILES:
        raise ValueError(f"dataset={dataset!r} is not a WebShop data set; choose one of {sorted(DATASET_FILES)}")
    files = []
    for name in DATASET_FILES[dataset]:
        url = f"{mirror.rstrip('/')}/{name}" if mirror else google_drive_url(GOOGLE_DRIVE_IDS[name])
        size, sha256 = PUBLISHED_FILES[name]
        files.append(RemoteFile(name, url, size, sha256))
    return files


def file_sha256(path: Path, hasher=None) -> str:
    """SHA-256 of a file, read in chunks (`hasher` continues an existing digest)."""
    hasher = hasher or hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


def check_published(remote: RemoteFile, size: int, sha256: str) -> None:
    """Raise `ChecksumError` when a complete file's size or digest differs from the published one."""
    if remote.size is not None and size != remote.size:
        raise ChecksumError(f"{remote.name} has {size:,} bytes, but the published file has {remote.size:,}")
    if remote.sha256 is not None and sha256 != remote.sha256:
        raise ChecksumError(f"{remote.name} has SHA-256 {sha256}, but the published file has {remote.sha256}")


def download(remote: RemoteFile, folder: str | Path, *, progress: Progress | None = None, timeout: float = 60.0):
    """Fetch `remote` into `folder/remote.name`, resuming a `.part` left by an earlier attempt; returns `Downloaded`.

    Raises `DownloadError` when the transfer fails or stops early (the part is kept: call again to resume), and
    `ChecksumError` when the finished file does not match the published size or digest (the part is deleted, so
    the next attempt starts afresh). A complete file already in `folder` is checked instead of fetched.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    final, part = folder / remote.name, folder / (remote.name + PART_SUFFIX)
    if final.exists():
        size, digest = final.stat().st_size, file_sha256(final)
        try:
            check_published(remote, size, digest)
        except ChecksumError as error:
            raise ChecksumError(
                f"{final} is already there but differs: {error}; delete it to download again"
            ) from None
        return Downloaded(final, size, digest, remote.sha256 is not None, size, fetched=False)

    offset = part.stat().st_size if part.exists() else 0
    if remote.size is not None and offset > remote.size:
        part.unlink()  # longer than the published file: not a prefix of it
        offset = 0
    resumed_from = offset
    hasher = hashlib.sha256()
    if offset:
        file_sha256(part, hasher)
    if remote.size is None or offset < remote.size:
        hasher = _transfer(remote, part, offset, hasher, progress, timeout)
    size = part.stat().st_size
    if remote.size is not None and size < remote.size:
        raise DownloadError(
            f"{remote.name}: the transfer stopped after {size:,} of {remote.size:,} bytes; run the command again "
            "to resume it"
        )
    digest = hasher.hexdigest()
    try:
        check_published(remote, size, digest)
    except ChecksumError as error:
        part.unlink()
        raise ChecksumError(
            f"{error} (downloaded from {remote.url}); the download was deleted. Run the command again, use "
            "--mirror with another copy, or import a copy you trust with --from DIR"
        ) from None
    part.replace(final)
    return Downloaded(final, size, digest, remote.sha256 is not None, resumed_from, fetched=True)


def _transfer(remote: RemoteFile, part: Path, offset: int, hasher, progress: Progress | None, timeout: float):
    """Append the bytes after `offset` to `part`; returns the digest of the whole part (`hasher` continued, or a
    new one when the server sent the file from its start)."""
    headers = {"User-Agent": "trl-ragen2"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(remote.url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset and remote.size in (None, offset):
            return hasher  # the part already holds the whole file
        raise DownloadError(f"{remote.url} answered HTTP {error.code} {error.reason} for {remote.name}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(
            f"could not reach {remote.url} for {remote.name} ({reason}); check the connection, or download the "
            "files yourself and import them with --from DIR"
        ) from None
    with response:
        if response.status != 206 and offset:  # the server ignored the Range header: start over
            offset, hasher = 0, hashlib.sha256()
        elif response.status == 206 and not (response.headers.get("Content-Range") or "").startswith(
            f"bytes {offset}-"
        ):
            raise DownloadError(
                f"{remote.url} answered a request for bytes {offset}- of {remote.name} with the range "
                f"{response.headers.get('Content-Range')!r}; delete {part} and run the command again"
            )
        if "text/html" in (response.headers.get("Content-Type") or ""):
            raise DownloadError(
                f"{remote.url} sent a web page instead of {remote.name} (Google Drive does this when a file's "
                "download quota is used up); try again later, use --mirror, or download the file in a browser and "
                "import it with --from DIR"
            )
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else remote.size
        if remote.size is not None and total is not None and total != remote.size:
            raise ChecksumError(
                f"{remote.url} serves {total:,} bytes for {remote.name}, but the published file has "
                f"{remote.size:,}; use --mirror with another copy, or import a copy you trust with --from DIR"
            )
        done = offset
        with open(part, "ab" if offset else "wb") as out:
            if progress:
                progress(remote.name, done, total)
            try:
                while chunk := response.read(CHUNK_BYTES):
                    out.write(chunk)
                    hasher.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress(remote.name, done, total)
            except (OSError, http.client.HTTPException) as error:
                raise DownloadError(
                    f"{remote.name}: the transfer broke after {done:,} bytes ({error}); run the command again to "
                    "resume it"
                ) from None
    return hasher
