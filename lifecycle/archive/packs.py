"""Packs: a cache's small files end to end in one object, named by its sha256, so 20,000 files
cost tens of PUTs (a PUT costs the same few milliseconds whatever its size, and S3 bills per
request). Blobs stay the unit: each is hashed as its pack is built and checked on restore.
The layout (blobs, index, trailer): docs/formats.md; the index at the end lets a later archive,
of any cache on any host, name a blob already packed instead of sending it (`known_blobs`); the
ledger keeps the indexes of the packs its host knows honest (`index_text`, `parse_index`).
"""

from __future__ import annotations

import hashlib
import io
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, cast

from lifecycle.archive.plans import BlobSource
from lifecycle.archive.store import ArchiveError, BlobStore, Listed, S3Unavailable
from lifecycle.parallel import pool_map

PACK_BLOB_MAX = 1 << 20  # cache files up to this size are packed
PACK_TARGET = 8 << 20  # a pack is closed once it holds this many bytes of blobs
PACK_BLOBS = 4096  # ...or this many blobs (so its index stays within about 400 KiB)
BUFFER = PACK_TARGET + PACK_BLOB_MAX + (1 << 20)  # holds any pack `group` makes, index too
MAGIC = b"lifecycle-pack/1"
_TRAILER = struct.Struct(">16sQ")
INDEX_GUESS = 256 << 10  # one ranged GET of a pack's tail usually holds all of its index


class Placed(NamedTuple):
    """Where a packed blob lives: `size` bytes at `offset` of the pack named `pack`."""

    pack: str
    offset: int
    size: int


Index = dict[str, Placed] | None  # a pack's blobs, or None when its index cannot be read


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
        if size >= PACK_TARGET or len(current) >= PACK_BLOBS:
            packs.append(current)
            current, size = [], 0
    if current:
        packs.append(current)
    return packs


def buffer_size(sources: list[BlobSource]) -> int:
    """Bytes of the pack these sources make: their blobs, the index, the trailer."""
    index = sum(len(_line(s.sha256, 0, s.size)) + 16 for s in sources)  # 16: room for offsets
    return sum(s.size for s in sources) + index + _TRAILER.size


def build(sources: list[BlobSource], buffer: bytearray) -> tuple[memoryview, Pack]:
    """Read each source into `buffer` (checking its sha256) and lay out the pack of them there:
    a view of its bytes, and the pack. The buffer is the caller's, reused pack after pack, so
    that building packs does not churn the allocator (8 MiB objects made and freed by several
    threads left ~130 MiB of RSS behind, measured on a 2 GB tree)."""
    if len(buffer) < buffer_size(sources):
        buffer = bytearray(buffer_size(sources))  # a pack of unusually many tiny blobs
    view = memoryview(buffer)
    laid: list[tuple[str, int, int]] = []  # (sha256, offset, size) of each blob, in order
    offset = 0
    for source in sources:
        end = offset + source.size
        with source.open() as opened:
            handle = cast(io.BufferedIOBase, opened)  # a file or a BytesIO: both read into
            while offset < end and (got := handle.readinto(view[offset:end])):
                offset += got
            if offset != end or handle.read(1):
                raise ArchiveError(f"{source.what} changed since its scan; archive it again")
        if hashlib.sha256(view[end - source.size : end]).hexdigest() != source.sha256:
            raise ArchiveError(f"{source.what} changed since its scan; archive it again")
        laid.append((source.sha256, end - source.size, source.size))
    index = tail(laid)
    view[offset : offset + len(index)] = index
    body = view[: offset + len(index)]
    sha = hashlib.sha256(body).hexdigest()
    placed: dict[str, Placed] = {}
    for blob, at, size in laid:
        placed.setdefault(blob, Placed(sha, at, size))
    return body, Pack(sha, len(body), placed)


def tail(laid: Iterable[tuple[str, int, int]]) -> bytes:
    """What follows a pack's blobs: the index of (sha256, offset, size), then the trailer."""
    text = "".join(_line(*blob) for blob in laid).encode()
    return text + _TRAILER.pack(MAGIC, len(text))


def _line(sha256: str, offset: int, size: int) -> str:
    return f"{sha256} {offset} {size}\n"


class PackReader:
    """A pack's bytes as the file-like body of a PUT, read from its buffer in small copies;
    a retry rewinds it."""

    def __init__(self, body: memoryview) -> None:
        self._body = body
        self._at = 0

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all that is left when negative)."""
        end = len(self._body) if size < 0 else min(len(self._body), self._at + size)
        chunk = bytes(self._body[self._at : end])
        self._at = end
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move like a file (botocore rewinds a body to retry, and seeks to its end to size it)."""
        base = (0, self._at, len(self._body))[whence]
        self._at = max(0, min(len(self._body), base + offset))
        return self._at

    def tell(self) -> int:
        """Where the next read starts."""
        return self._at


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
    try:
        return parse_index(text, sha256, size)
    except ValueError as exc:
        raise ArchiveError(f"{store.url(key)}: damaged pack index ({exc})") from None


def parse_index(text: bytes, sha256: str, size: int) -> dict[str, Placed]:
    """The blobs an index's text places in the pack `sha256` of `size` bytes, each before the
    index; ValueError naming the first line that does not say so."""
    index_start = size - _TRAILER.size - len(text)
    placed: dict[str, Placed] = {}
    for line in text.decode().splitlines():
        sha, offset, length = line.split(" ")
        at, count = int(offset), int(length)
        if len(sha) != 64 or at < 0 or count < 0 or at + count > index_start:
            raise ValueError(line)
        placed[sha] = Placed(sha256, at, count)
    return placed


def index_text(blobs: Mapping[str, Placed]) -> bytes:
    """The text of the index of these blobs, as a pack's tail holds it (`parse_index` reads it)."""
    return "".join(_line(sha, p.offset, p.size) for sha, p in blobs.items()).encode()


def known_blobs(
    store: BlobStore, packs: Mapping[str, Listed], workers: int, cache: dict[str, Index]
) -> dict[str, Placed]:
    """Every blob the listed packs hold, by sha256. `cache` keeps indexes read before (a pack
    never changes), in the run or kept by the ledger, so only the new ones are read. A pack
    whose index cannot be read is kept there as None: it offers no blob, and fails no archive
    (whether its bytes are damaged, its checksum says: lifecycle.archive.verify)."""
    todo = [sha for sha in packs if sha not in cache]
    read = pool_map(lambda sha: _index(store, sha, packs[sha][0]), todo, workers, "pack-index")
    cache.update(zip(todo, read, strict=True))
    found: dict[str, Placed] = {}
    for sha in sorted(packs):
        for blob, placed in (cache[sha] or {}).items():
            found.setdefault(blob, placed)
    return found


def _index(store: BlobStore, sha256: str, size: int) -> Index:
    try:
        return read_index(store, sha256, size)
    except S3Unavailable:
        raise
    except ArchiveError:  # no index at its end, or a damaged one
        return None
