"""Reading blobs for their md5 and uploading them, on a bounded pool of threads.

The record lists each blob's md5 because that is the ETag S3 gives a single PUT, which lets one
LIST page verify a thousand blobs. An md5 is learnt three ways, cheapest first: remembered in
the ledger from an earlier archive of the same bytes, computed from the bytes as they are
uploaded, or (only for a blob the server already holds that this host never sent) by reading
the file once more.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import BinaryIO

from lifecycle.archive.parallel import bounded_map
from lifecycle.archive.sources import BlobSource
from lifecycle.archive.store import READ_CHUNK, ArchiveError, BlobStore
from lifecycle.archive.uploaders import forked_uploads
from lifecycle.forking import fork_when_safe
from lifecycle.table import human_bytes

PROGRESS_EVERY = 100  # uploaded blobs between two progress lines
SMALL_BLOB = 1 << 20  # read whole and sent from memory; one per worker at a time
# Below this many blobs to send, one process: a fork and new connections cost tens of ms,
# 500 PUTs ~1.5 s of Python (a judgement from those two figures, not a measured break-even).
FORK_MIN_BLOBS = 500
MAX_UPLOADERS = 4
Progress = Callable[[str], None]


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
) -> dict[str, str]:
    """PUT every blob in parallel; the md5 of each, read from the bytes as they were sent.

    On the first failure the rest are dropped, and it is raised.
    """
    upload = partial(_upload_one, store)
    processes = uploader_processes(len(todo))
    if processes > 1:
        sent_blobs = forked_uploads(store, todo, upload, processes, workers)
    else:
        done = bounded_map(upload, todo, workers, "upload")
        sent_blobs = ((source.sha256, source.size, md5) for source, md5 in done)
    md5s: dict[str, str] = {}
    sent = 0
    for count, (sha256, size, md5) in enumerate(sent_blobs, start=1):
        md5s[sha256] = md5
        sent += size
        if count % PROGRESS_EVERY == 0 or count == len(todo):
            say(f"{cache_id}: uploaded {count}/{len(todo)} blobs ({human_bytes(sent)})")
    return md5s


def uploader_processes(blobs: int) -> int:
    """How many processes upload `blobs`: one per core (at most MAX_UPLOADERS) for many."""
    cores = min(os.cpu_count() or 1, MAX_UPLOADERS)
    if cores < 2 or blobs < FORK_MIN_BLOBS or not fork_when_safe(within=0.1):
        return 1
    return cores


def _upload_one(store: BlobStore, source: BlobSource) -> tuple[BlobSource, str]:
    """PUT one blob; the md5 of the bytes sent."""
    if source.data is not None:  # collected in memory (a scan, a snapshot): hashed then
        assert source.md5 is not None, "an in-memory blob's md5 is computed on collection"
        store.upload_blob(source.sha256, source.data)
        return source, source.md5
    with source.open() as handle:
        reader = HashingReader(handle)
        if source.size <= SMALL_BLOB:
            # Sent as bytes: botocore gives every file-like body an `Expect: 100-continue`
            # round trip, and most blobs of a JIT cache are a few KiB.
            data = reader.read()
            md5 = reader.md5_of(source)
            store.upload_blob(source.sha256, data)
            return source, md5
        store.upload_stream(source.sha256, reader, source.size)
    return source, reader.md5_of(source)


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
