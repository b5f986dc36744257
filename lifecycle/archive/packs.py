"""Packs: a cache's small files end to end in one object, so 20,000 files cost tens of PUTs.

A PUT costs the same few milliseconds of client and server work whatever its size, and most
files of a JIT cache are a few KiB; S3 also bills per request. So every cache file of at most
PACK_BLOB_MAX bytes goes into a pack of about PACK_TARGET bytes:

    blob ‖ blob ‖ … ‖ index ‖ trailer
    index    one line per blob: `<sha256> <offset> <size>\\n`
    trailer  MAGIC (16 bytes), then the index's length (8 bytes, big-endian)

A pack is named by the sha256 of all its bytes (`packs/sha256/ab/<sha256>`), written once with
ChecksumSHA256 and If-None-Match like a blob, and verified the same way. Blobs stay the unit:
each is hashed while its pack is built (a file that changed since its scan is refused), a
version record names for each file its blob's pack and offset, and a restore checks every
file's sha256. The index at the end lets a later archive, of any cache on any host, find a
blob already packed and name it instead of sending it again (`known_blobs`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from lifecycle.archive.sources import BlobSource
from lifecycle.archive.store import ArchiveError, BlobStore, Listed

PACK_BLOB_MAX = 1 << 20  # cache files up to this size are packed
PACK_TARGET = 8 << 20  # a pack is closed once it holds this many bytes of blobs
MAGIC = b"lifecycle-pack/1"
_TRAILER = struct.Struct(">16sQ")
INDEX_GUESS = 256 << 10  # one ranged GET of a pack's tail usually holds all of its index


class Placed(NamedTuple):
    """Where a packed blob lives: `size` bytes at `offset` of the pack named `pack`."""

    pack: str
    offset: int
    size: int


@dataclass(frozen=True)
class Pack:
    """A pack: its name, its whole size, and where each of its blobs sits."""

    sha256: str
    size: int
    blobs: dict[str, Placed]


def packable(source: BlobSource) -> bool:
    """Whether a blob goes into a pack: a cache file small enough."""
    return source.entry is not None and source.size <= PACK_BLOB_MAX


def group(sources: Iterable[BlobSource]) -> list[list[BlobSource]]:
    """Sources in packs of about PACK_TARGET bytes, in the order given (a cache's path order,
    so a directory's files sit together and a restore reads them with one ranged GET)."""
    packs: list[list[BlobSource]] = []
    current: list[BlobSource] = []
    size = 0
    for source in sources:
        current.append(source)
        size += source.size
        if size >= PACK_TARGET:
            packs.append(current)
            current, size = [], 0
    if current:
        packs.append(current)
    return packs


def build(sources: list[BlobSource]) -> tuple[bytes, Pack]:
    """Read each source (checking its sha256) and make the pack of them: its bytes, and it."""
    parts: list[bytes] = []
    index: list[str] = []
    offset = 0
    for source in sources:
        with source.open() as handle:
            data = handle.read(source.size + 1)
        if len(data) != source.size or hashlib.sha256(data).hexdigest() != source.sha256:
            raise ArchiveError(f"{source.what} changed since its scan; archive it again")
        parts.append(data)
        index.append(f"{source.sha256} {offset} {source.size}\n")
        offset += source.size
    text = "".join(index).encode()
    parts += [text, _TRAILER.pack(MAGIC, len(text))]
    body = b"".join(parts)
    sha = hashlib.sha256(body).hexdigest()
    placed: dict[str, Placed] = {}
    at = 0
    for source in sources:
        placed.setdefault(source.sha256, Placed(sha, at, source.size))
        at += source.size
    return body, Pack(sha, len(body), placed)


def read_index(store: BlobStore, sha256: str, size: int) -> dict[str, Placed]:
    """The blobs a pack on the server holds, from its tail (one ranged GET, rarely two)."""
    key = store.pack_key(sha256)
    if size < _TRAILER.size:
        raise ArchiveError(f"{store.url(key)}: {size} bytes is too short for a pack")
    start = max(0, size - INDEX_GUESS)
    tail = b"".join(store.read_range(key, start, size - start))
    magic, length = _TRAILER.unpack(tail[-_TRAILER.size :])
    if magic != MAGIC or length > size - _TRAILER.size:
        raise ArchiveError(f"{store.url(key)}: not a pack (no index at its end)")
    index_start = size - _TRAILER.size - length
    if index_start < start:  # a longer index than guessed: fetch the rest
        head = b"".join(store.read_range(key, index_start, start - index_start))
        tail = head + tail
        start = index_start
    text = tail[index_start - start : len(tail) - _TRAILER.size]
    placed: dict[str, Placed] = {}
    try:
        for line in text.decode().splitlines():
            sha, offset, length = line.split(" ")
            at, count = int(offset), int(length)
            if len(sha) != 64 or at < 0 or count < 0 or at + count > index_start:
                raise ValueError(line)
            placed[sha] = Placed(sha256, at, count)
    except ValueError as exc:
        raise ArchiveError(f"{store.url(key)}: damaged pack index ({exc})") from None
    return placed


def known_blobs(
    store: BlobStore, packs: Mapping[str, Listed], workers: int, cache: dict[str, dict[str, Placed]]
) -> dict[str, Placed]:
    """Every blob the listed packs hold, by sha256. `cache` keeps indexes read before (a pack
    never changes), so a second archive in one run reads only the new ones."""
    todo = [sha for sha in packs if sha not in cache]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pack-index")
    try:
        read = pool.map(lambda sha: read_index(store, sha, packs[sha][0]), todo)
        cache.update(zip(todo, read, strict=True))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    found: dict[str, Placed] = {}
    for sha in sorted(packs):
        for blob, placed in cache[sha].items():
            found.setdefault(blob, placed)
    return found


def read_blob(store: BlobStore, placed: Placed, sha256: str) -> bytes:
    """One packed blob's bytes (one ranged GET), checked against its sha256."""
    data = b"".join(store.read_range(store.pack_key(placed.pack), placed.offset, placed.size))
    if hashlib.sha256(data).hexdigest() != sha256:
        where = f"{store.url(store.pack_key(placed.pack))} at {placed.offset}"
        raise ArchiveError(f"{where}: bytes that are not blob {sha256}")
    return data
