"""Moving an archive's blobs on one bounded pool of threads: up, small ones in packs and large
ones each its own object; down, single blobs streamed and packed ones by ranged GETs.

Every PUT carries the sha256 the scan found as its ChecksumSHA256, so a file that changed since
its scan is refused by the server (BadDigest) rather than stored under a name not its own; every
file downloaded is checked against its sha256 before it counts as restored.
"""

from __future__ import annotations

import hashlib
import os
import queue
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from lifecycle.archive import packs
from lifecycle.archive.plans import BlobSource
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.faults import Checkpoint
from lifecycle.fingerprint import Entry
from lifecycle.parallel import bounded_map
from lifecycle.table import human_bytes
from lifecycle.ticker import Ticker

SMALL_BLOB = 1 << 20  # read whole and sent from memory; one per worker at a time
PACKS_AT_ONCE = 2  # packs held in memory at a time (a packs.BUFFER each)
TICK_S = 0.5  # between two progress lines
Progress = Callable[[str], None]
# Downloads: neighbouring packed blobs are joined in one ranged GET, so a whole cache is about
# one request per 4 MiB of small files.
REGION_MAX = 4 << 20  # bytes of one ranged GET (one per worker in memory at a time)
GAP_MAX = 256 << 10  # unwanted bytes read through to join two wanted blobs in one GET
PROGRESS_EVERY = 1000  # restored files between two progress lines


@dataclass
class Sent:
    """What an upload put on the server: each single blob (sha256 -> size), where each packed
    one went, the packs themselves (sha256 -> size), and their indexes (sha256 -> size, text)."""

    singles: dict[str, int] = field(default_factory=dict)
    placed: dict[str, packs.Placed] = field(default_factory=dict)
    packs: dict[str, int] = field(default_factory=dict)
    indexes: dict[str, tuple[int, bytes]] = field(default_factory=dict)


# Plain threads keep up with the wire: packs make a 20,000-file cache a few hundred PUTs, so
# botocore's ~3 ms a request no longer matters (the GIL is released while hashing and sending).
def upload_all(
    store: BlobStore,
    cache_id: str,
    todo: list[BlobSource],
    workers: int,
    say: Progress,
    *,
    rebuilt: Sequence[list[BlobSource]] = (),
    alone: Sequence[BlobSource] = (),
) -> Sent:
    """PUT every blob: packable ones (in the order given) as packs, the rest one by one; and
    packs built again of exactly the blobs given (`rebuilt`), blobs sent again as objects of
    their own whatever their size (`alone`): what records already there name.

    Packs first, largest work first: their building reads many small files, and a pack
    finishing late would hold up the end. On the first failure the rest are dropped, and it
    is raised.
    """
    grouped = [*rebuilt, *packs.group(s for s in todo if packs.packable(s))]
    singles = [*alone, *(s for s in todo if not packs.packable(s))]
    singles.sort(key=lambda s: -s.size)
    total = sum(s.size for s in singles) + sum(s.size for group in grouped for s in group)
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

    def send(item: list[BlobSource] | BlobSource) -> tuple[str, int, packs.Pack | None]:
        if isinstance(item, BlobSource):
            _upload_one(store, item)
            return item.sha256, item.size, None
        buffer = buffers.get()
        try:
            body, pack = packs.build(item, buffer)
            reader = packs.PackReader(body)
            store.put(store.pack_key(pack.sha256), pack.sha256, reader, len(body))
        finally:
            buffers.put(buffer)
        return pack.sha256, sum(s.size for s in item), pack

    work: list[list[BlobSource] | BlobSource] = [*grouped, *singles]
    for sha, size, pack in bounded_map(send, work, workers, "upload"):
        if pack is None:
            sent.singles[sha] = size
        else:
            sent.placed |= pack.blobs
            sent.packs[sha] = pack.size
            sent.indexes[sha] = (pack.size, packs.index_text(pack.blobs))
        done += size
        if time.monotonic() - last >= TICK_S:  # at most every TICK_S; a last line at the end
            last = time.monotonic()
            say(Ticker(meter()))
    if total:
        say(meter())
    return sent


def _upload_one(store: BlobStore, source: BlobSource) -> None:
    """PUT one blob (a file changed since its scan fails its ChecksumSHA256 on the server)."""
    if source.data is not None:  # collected in memory (a scan, a snapshot)
        store.upload_blob(source.sha256, source.data)
        return
    with source.open() as handle:
        # A small one is sent as bytes: botocore gives every file-like body an
        # `Expect: 100-continue` round trip.
        store.upload_blob(source.sha256, handle.read() if source.size <= SMALL_BLOB else handle)


@dataclass(frozen=True)
class Region:
    """One ranged GET: `size` bytes at `start` of a pack, and the blobs in it (by offset)."""

    pack: str
    start: int
    size: int
    blobs: tuple[tuple[str, int, int], ...]  # (sha256, offset in the pack, size)


def regions(wanted: Mapping[str, packs.Placed]) -> list[Region]:
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
    placed: Mapping[str, packs.Placed],
    workers: int,
    say: Callable[[str], None],
    checkpoint: Checkpoint,
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
        checkpoint("restore-fetched")
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
