"""The bytes behind a record's blobs, collected on this host, and a record's rendering.

A record is planned as a document plus one BlobSource per blob it names (an evidence file, a
cache file, bytes in memory); the blobs go up first, the record last.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from lifecycle.archive.store import READ_CHUNK, ArchiveError, open_regular
from lifecycle.fingerprint import Entry


@dataclass(frozen=True)
class BlobSource:
    """The bytes of one blob on this host: in memory, an evidence file, or a cache file."""

    sha256: str
    size: int
    what: str  # for messages: "cache file a/b.so", "evidence of boot b-…"
    data: bytes | None = None
    path: Path | None = None  # an evidence file, or a cache file relative to `root`
    root: Path | None = None
    entry: Entry | None = None  # what the scan saw of a cache file: checked again on open

    def open(self) -> BinaryIO:
        """A reader of exactly these bytes; a cache file that changed since its scan is refused."""
        if self.data is not None:
            return io.BytesIO(self.data)
        if self.root is not None and self.entry is not None:
            return open_beneath(self.root, self.entry)
        assert self.path is not None, "a BlobSource has data, a path, or a root and an entry"
        return open_regular(self.path)


@dataclass(frozen=True)
class RecordPlan:
    """A record without its blob list and time, and one source per blob it refers to."""

    document: dict[str, Any]
    sources: dict[str, BlobSource]


def render_record(
    plan: RecordPlan,
    archived_at: str,
    placed: Mapping[str, tuple[str, int]] | None = None,
    pack_sizes: Mapping[str, int] | None = None,
) -> bytes:
    """The record's bytes: stable key order, one blob entry per distinct sha256. A cache
    version also lists its packs, and for each packed blob its pack and offset."""
    placed = placed or {}
    blobs: list[dict[str, Any]] = []
    for sha, source in sorted(plan.sources.items()):
        if sha in placed:
            pack, offset = placed[sha]
            blobs.append({"sha256": sha, "size": source.size, "pack": pack, "offset": offset})
        else:
            blobs.append({"sha256": sha, "size": source.size})
    document = {**plan.document, "archived_at": archived_at, "blobs": blobs}
    if pack_sizes is not None:
        used = sorted({pack for pack, _ in placed.values()})
        document["packs"] = [{"sha256": pack, "size": pack_sizes[pack]} for pack in used]
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def file_blob(path: Path, what: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    """Hash a (small) evidence file now, add it to `sources`; its {sha256, size}. It is read
    again, and checked, when uploaded."""
    sha, size = hashlib.sha256(), 0
    with open_regular(path) as handle:
        while chunk := handle.read(READ_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    source = BlobSource(sha.hexdigest(), size, what, path=path)
    sources.setdefault(source.sha256, source)
    return {"sha256": source.sha256, "size": size}


def memory_blob(data: bytes, what: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    """Bytes in memory as a blob added to `sources`; its {sha256, size}."""
    sha = hashlib.sha256(data).hexdigest()
    sources.setdefault(sha, BlobSource(sha, len(data), what, data=data))
    return {"sha256": sha, "size": len(data)}


def regular_files(top: Path) -> list[Path]:
    """Regular files below `top`; symlinks (to files or dirs) are neither followed nor kept."""
    found = []
    for directory, _, names in os.walk(top, followlinks=False):
        for name in names:
            path = Path(directory, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found.append(path)
    return found


def read_snapshot(path: Path) -> Any:
    """A provenance snapshot a boot kept (the image's, the manifest's), or None if none."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ArchiveError(f"{path}: damaged snapshot: {exc}") from exc


def open_beneath(root: Path, entry: Entry) -> BinaryIO:
    """Open a cache file through directory fds, following no symlink below the cache root."""
    # A component swapped for a symlink since the scan (say to /etc) fails with ELOOP
    # instead of reaching outside the cache; the final identity check catches any other swap.
    parts = entry.path.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            parent, fd = fd, os.open(part, flags, dir_fd=fd)
            os.close(parent)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        parent, fd = fd, os.open(parts[-1], flags, dir_fd=fd)
        os.close(parent)
    except OSError as exc:
        os.close(fd)
        raise ArchiveError(f"{root}/{entry.path}: {exc.strerror}; {_CHANGED}") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_size, st.st_mtime_ns, st.st_ino) != (
        entry.size,
        entry.mtime_ns,
        entry.inode,
    ):
        os.close(fd)
        raise ArchiveError(f"{root}/{entry.path}: changed since its scan; {_CHANGED}")
    return os.fdopen(fd, "rb")


_CHANGED = "is a boot writing this cache? archive it again once it is idle"
