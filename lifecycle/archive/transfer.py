"""Uploading an archive's blobs on one bounded pool of threads: small ones in packs, large ones
each its own object.

With a cache's small files packed (lifecycle.archive.packs) a 20,000-file cache is a few hundred
PUTs, so the ~3 ms of botocore each costs no longer matters and plain threads keep up with the
wire (the GIL is released while hashing and sending). Every PUT carries the sha256 the scan
found as its ChecksumSHA256, so a file that changed since its scan is refused by the server
(BadDigest) rather than stored under a name that is not its own; nothing is hashed again here.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lifecycle.archive import packs
from lifecycle.archive.sources import BlobSource
from lifecycle.archive.store import BlobStore
from lifecycle.parallel import bounded_map
from lifecycle.table import human_bytes
from lifecycle.ticker import Ticker

SMALL_BLOB = 1 << 20  # read whole and sent from memory; one per worker at a time
PACKS_AT_ONCE = 2  # packs held in memory at a time (a packs.BUFFER each)
TICK_S = 0.5  # between two progress lines
Progress = Callable[[str], None]


@dataclass
class Sent:
    """What an upload put on the server: each single blob (sha256 -> size), where each packed
    one went, and the packs themselves (sha256 -> size)."""

    singles: dict[str, int] = field(default_factory=dict)
    placed: dict[str, packs.Placed] = field(default_factory=dict)
    packs: dict[str, int] = field(default_factory=dict)


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
