"""Downloading a cache's files: single blobs streamed, packed ones by ranged GETs of their packs.

Files whose blobs sit next to each other in a pack (a pack follows the cache's path order) are
read with one ranged GET per region of at most REGION_MAX bytes, gaps of up to GAP_MAX bytes
read through rather than split, so a whole cache is about one request per 4 MiB of small files.
Every file is checked against its sha256 before it counts as restored.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lifecycle.archive.packs import Placed
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.fingerprint import Entry
from lifecycle.parallel import bounded_map
from lifecycle.table import human_bytes

REGION_MAX = 4 << 20  # bytes of one ranged GET (one per worker in memory at a time)
GAP_MAX = 256 << 10  # unwanted bytes read through to join two wanted blobs in one GET
PROGRESS_EVERY = 1000  # restored files between two progress lines


@dataclass(frozen=True)
class Region:
    """One ranged GET: `size` bytes at `start` of a pack, and the blobs in it (by offset)."""

    pack: str
    start: int
    size: int
    blobs: tuple[tuple[str, int, int], ...]  # (sha256, offset in the pack, size)


def regions(wanted: Mapping[str, Placed]) -> list[Region]:
    """The ranged GETs that fetch every wanted packed blob, adjacent ones joined."""
    by_pack: dict[str, list[tuple[int, int, str]]] = {}
    for sha, placed in wanted.items():
        by_pack.setdefault(placed.pack, []).append((placed.offset, placed.size, sha))
    found: list[Region] = []
    for pack, blobs in sorted(by_pack.items()):
        current: list[tuple[str, int, int]] = []
        start = end = 0
        for offset, size, sha in sorted(blobs):
            if current and (offset - end > GAP_MAX or offset + size - start > REGION_MAX):
                found.append(Region(pack, start, end - start, tuple(current)))
                current = []
            if not current:
                start = end = offset
            current.append((sha, offset, size))
            end = max(end, offset + size)
        if current:
            found.append(Region(pack, start, end - start, tuple(current)))
    return found


def fetch_region(store: BlobStore, region: Region) -> Iterator[tuple[str, memoryview]]:
    """Each blob of a region, (sha256, its bytes), checked against its sha256."""
    key = store.pack_key(region.pack)
    data = memoryview(b"".join(store.read_range(key, region.start, region.size)))
    for sha, offset, size in region.blobs:
        blob = data[offset - region.start : offset - region.start + size]
        if hashlib.sha256(blob).hexdigest() != sha:
            raise ArchiveError(f"{store.url(key)} at {offset}: bytes that are not blob {sha}")
        yield sha, blob


def download_files(
    store: BlobStore,
    root: Path,
    files: Sequence[Entry],
    placed: Mapping[str, Placed],
    workers: int,
    say: Callable[[str], None],
) -> None:
    """Every file under `root`, created new (never through a link), checked against its sha256:
    packed blobs by region, the others one GET each."""
    paths: dict[str, list[Entry]] = {}
    for e in files:
        assert e.sha256 is not None, "a file entry has its sha256"
        paths.setdefault(e.sha256, []).append(e)
    packed = {sha: placed[sha] for sha in paths if sha in placed}
    work: list[Region | str] = [*regions(packed), *(sha for sha in paths if sha not in packed)]

    def fetch(item: Region | str) -> tuple[int, int]:
        count = size = 0
        if isinstance(item, Region):
            for sha, blob in fetch_region(store, item):
                for e in paths[sha]:
                    with _create(root, e) as out:
                        out.write(blob)
                    count, size = count + 1, size + e.size
            return count, size
        for e in paths[item]:
            with _create(root, e) as out:
                store.download_blob(item, out)
                if out.tell() != e.size:
                    raise ArchiveError(f"{e.path}: {out.tell()} bytes downloaded, not {e.size}")
            count, size = count + 1, size + e.size
        return count, size

    done = got = 0
    for count, size in bounded_map(fetch, work, workers, "restore"):
        before, done, got = done, done + count, got + size
        if done // PROGRESS_EVERY != before // PROGRESS_EVERY or done == len(files):
            say(f"restored {done}/{len(files)} files ({human_bytes(got)})")


@contextmanager
def _create(root: Path, entry: Entry) -> Iterator[BinaryIO]:
    """A new file of the tree (never through a link), given its mode once written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(root / entry.path, flags, 0o600), "wb") as out:
        yield out
        os.fchmod(out.fileno(), entry.mode)
