"""Uploading an archive's blobs on one bounded pool of threads: small ones in packs, large ones
each its own object.

With a cache's small files packed (lifecycle.archive.packs) a 20,000-file cache is a few hundred
PUTs, so the ~3 ms of botocore each costs no longer matters and plain threads keep up with the
wire (the GIL is released while hashing and sending). A single blob's md5 is recorded because it
is the ETag S3 gives a single PUT, which lets one LIST page verify a thousand blobs; it is
learnt cheapest first: remembered in the ledger from an earlier archive of the same bytes,
computed from the bytes as they are uploaded, or (only for a blob the server already holds that
this host never sent) by reading the file once more. A pack is verified by its ChecksumSHA256.
"""

from __future__ import annotations

import hashlib
import io
import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from lifecycle.archive import packs
from lifecycle.archive.sources import BlobSource
from lifecycle.archive.store import READ_CHUNK, ArchiveError, BlobStore
from lifecycle.parallel import bounded_map
from lifecycle.table import human_bytes

SMALL_BLOB = 1 << 20  # read whole and sent from memory; one per worker at a time
PACKS_AT_ONCE = 2  # packs held in memory at a time (a packs.BUFFER each)
TICK_S = 0.5  # between two progress lines
Progress = Callable[[str], None]


class Ticker(str):
    """A progress line that the next one replaces: a terminal shows it in place, and a pipe
    or a log, which would keep every one, is spared it."""


@dataclass
class Sent:
    """What an upload put on the server: md5 of each single blob, where each packed one went,
    and the packs themselves (sha256 -> size)."""

    md5s: dict[str, str] = field(default_factory=dict)
    placed: dict[str, packs.Placed] = field(default_factory=dict)
    packs: dict[str, int] = field(default_factory=dict)


def digest_all(sources: Mapping[str, BlobSource], workers: int) -> dict[str, str]:
    """md5 of every blob (the ETag its PUT gets), checking each still has its sha256."""

    def digest(source: BlobSource) -> tuple[str, str]:
        if source.md5 is not None:
            return source.sha256, source.md5
        with source.open() as handle:
            reader = HashingReader(handle)
            while reader.read(READ_CHUNK):
                pass
        return source.sha256, reader.md5_of(source)

    return dict(bounded_map(digest, sources.values(), workers, "digest"))


def upload_all(
    store: BlobStore, cache_id: str, todo: list[BlobSource], workers: int, say: Progress
) -> Sent:
    """PUT every blob: packable ones (in the order given) as packs, the rest one by one.

    Packs first, largest work first: their building reads many small files, and a pack
    finishing late would hold up the end. On the first failure the rest are dropped, and it
    is raised.
    """
    grouped = packs.group(s for s in todo if packs.packable(s))
    singles = sorted((s for s in todo if not packs.packable(s)), key=lambda s: -s.size)
    total = sum(s.size for s in todo)
    # A few buffers, each reused pack after pack: they bound the memory packs take.
    buffers: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
    for _ in range(min(PACKS_AT_ONCE, len(grouped))):
        buffers.put(bytearray(packs.BUFFER))
    sent = Sent()
    start = last = time.monotonic()
    done = 0

    def meter() -> str:  # bytes sent, their rate and the time left
        rate = done / max(time.monotonic() - start, 1e-3)
        left = int((total - done) / rate) if rate else 0
        return (
            f"{cache_id}: uploaded {human_bytes(done)} of {human_bytes(total)}"
            f" ({human_bytes(int(rate))}/s, {left // 60}:{left % 60:02d} left)"
        )

    def send(item: list[BlobSource] | BlobSource) -> tuple[str, int, str | None, packs.Pack | None]:
        if isinstance(item, BlobSource):
            return item.sha256, item.size, _upload_one(store, item), None
        buffer = buffers.get()
        try:
            body, pack = packs.build(item, buffer)
            reader = packs.PackReader(body)
            store.put(store.pack_key(pack.sha256), pack.sha256, reader, len(body))
        finally:
            buffers.put(buffer)
        return pack.sha256, sum(s.size for s in item), None, pack

    work: list[list[BlobSource] | BlobSource] = [*grouped, *singles]
    for sha, size, md5, pack in bounded_map(send, work, workers, "upload"):
        if pack is None:
            assert md5 is not None, "a single blob's upload gives its md5"
            sent.md5s[sha] = md5
        else:
            sent.placed |= pack.blobs
            sent.packs[sha] = pack.size
        done += size
        if time.monotonic() - last >= TICK_S:  # at most every TICK_S; a last line at the end
            last = time.monotonic()
            say(Ticker(meter()))
    if total:
        say(meter())
    return sent


def _upload_one(store: BlobStore, source: BlobSource) -> str:
    """PUT one blob; the md5 of the bytes sent."""
    if source.data is not None:  # collected in memory (a scan, a snapshot): hashed then
        assert source.md5 is not None, "an in-memory blob's md5 is computed on collection"
        store.upload_blob(source.sha256, source.data)
        return source.md5
    with source.open() as handle:
        reader = HashingReader(handle)
        if source.size <= SMALL_BLOB:
            # Sent as bytes: botocore gives every file-like body an `Expect: 100-continue`
            # round trip.
            data = reader.read()
            md5 = reader.md5_of(source)
            store.upload_blob(source.sha256, data)
            return md5
        store.upload_stream(source.sha256, reader, source.size)
    return reader.md5_of(source)


class HashingReader:
    """A file reader that hashes (sha256 and md5) exactly the bytes read through it.

    An upload reads its body once on the way to the socket; hashing there saves reading every
    new file a second time just for its md5. A retry rewinds the body (seek(0)), which starts
    the hashes over, so they always describe the last complete pass.
    """

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._start()

    def _start(self) -> None:
        self._sha256 = hashlib.sha256()
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._size = 0

    def read(self, size: int = -1) -> bytes:
        """Read and hash up to `size` bytes."""
        chunk = self._handle.read(size)
        self._sha256.update(chunk)
        self._md5.update(chunk)
        self._size += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        """Only a rewind to the start is supported (what a retry does); it resets the hashes."""
        if (offset, whence) != (0, 0):
            # UnsupportedOperation, the error of an unseekable file: callers that probe for
            # a length with seek(0, 2) then fall back to other means.
            raise io.UnsupportedOperation("a HashingReader can only be rewound to its start")
        self._start()
        return self._handle.seek(0)

    def tell(self) -> int:
        """Bytes read since the last rewind."""
        return self._size

    def md5_of(self, source: BlobSource) -> str:
        """The md5 of what was read, once it is proven to be all of `source`'s bytes."""
        if (self._sha256.hexdigest(), self._size) != (source.sha256, source.size):
            raise ArchiveError(f"{source.what} changed since its scan; archive it again")
        return self._md5.hexdigest()
