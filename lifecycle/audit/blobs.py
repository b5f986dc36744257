"""Archived objects downloaded and hashed, each at most once per `lifecycle verify` run.

Unlike teardown's check (listing, ETag, stored checksum), verify trusts nothing the server
says about an object: it reads every byte back and hashes it, so it also catches an object
overwritten in place without a checksum. A record found missing is looked up in what gc
recorded removing at its location (lifecycle.archive.record), read once per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, cast

from lifecycle.archive.record import Removal, removals
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.parallel import pool_map


@dataclass(frozen=True)
class BlobClaim:
    """A blob a record names: its sha256, its size, and what it holds (for the message)."""

    sha256: str
    size: int | None
    what: str
    pack: bool = False  # a pack of small blobs, not a blob


class _Counter:
    """A sink that only counts the bytes written to it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


@dataclass
class BlobChecker:
    """Download-and-hash with a memory: blobs shared by several records are read once, and
    gc's records at each location once, when a record is first found missing there."""

    workers: int = 8
    seen: dict[tuple[str, str], tuple[str, str] | None] = field(default_factory=dict)
    collected: dict[str, dict[str, Removal]] = field(default_factory=dict)  # location -> key

    def removal(self, store: BlobStore, relative: str) -> Removal | None:
        """What a gc's record says of a key it removed at this location; None if it says nothing."""
        url = store.location.url()
        if url not in self.collected:
            try:
                self.collected[url] = removals(store)
            except S3Unavailable:  # the environment, not the archive: exit 3
                raise
            except ArchiveError as exc:
                raise ArchiveError(f"missing, and gc's records cannot be read: {exc}") from exc
        return self.collected[url].get(relative)

    def check(self, store: BlobStore, claims: Sequence[BlobClaim]) -> list[tuple[str, str]]:
        """(object, what differs) for each claimed blob not on the server with those bytes."""
        todo = [c for c in claims if (store.location.url(), c.sha256) not in self.seen]
        found = pool_map(lambda c: _one(store, c), todo, self.workers, "verify")
        for claim, problem in zip(todo, found, strict=True):
            self.seen[(store.location.url(), claim.sha256)] = problem
        problems = [self.seen[(store.location.url(), c.sha256)] for c in claims]
        return sorted({p for p in problems if p is not None})


def _one(store: BlobStore, claim: BlobClaim) -> tuple[str, str] | None:
    key = (store.pack_key if claim.pack else store.blob_key)(claim.sha256)
    where = f"{store.url(key)} ({claim.what})"
    counter = _Counter()
    try:
        # Only write() is called on the sink: a counter stands in for a file.
        found = store.download_sha256(key, cast(BinaryIO, counter))
    except S3Unavailable:  # the environment, not the archive: exit 3
        raise
    except ArchiveError as exc:
        return where, f"cannot download: {exc}"
    if found is None:
        return where, "missing"
    if found != claim.sha256:
        return where, f"content has sha256 {found}, not the sha256 its key and record name"
    if claim.size is not None and counter.size != claim.size:
        return where, f"{counter.size} bytes, not the {claim.size} recorded"
    return None
