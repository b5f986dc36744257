"""Everything an archive holds, as one listing saw it, with every record read and what each
record needs to stay whole.

Records are immutable and named by their bytes, so a record read once is that record forever:
a later snapshot reads only the keys it has not seen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from lifecycle.archive.layout import Key, blob_key, legacy_cache_key, pack_key, parse_key
from lifecycle.archive.objects import Listing
from lifecycle.archive.record import read_as
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.formats import STORED_UNDER
from lifecycle.parallel import pool_map
from lifecycle.records import Record, ResultRecordV1, ResultRecordV2, stored_as
from lifecycle.results.archive import load_result_record

_RESULTS = ("result", "legacy-result")  # read with their digest checked (lifecycle.results)
_READ = STORED_UNDER - {"gc"}  # gc's own records are not among what it plans


@dataclass(frozen=True)
class Snapshot:
    """The archive under one prefix: its objects, its records read, and what could not be."""

    objects: dict[str, Listing]  # key (relative) -> what the listing said of it
    keys: dict[str, Key]  # the objects of our layout, read as the layout names them
    records: dict[str, Record]  # key -> the record it holds
    unreadable: dict[str, str]  # key -> why it could not be read

    def age(self, key: str, now: datetime) -> float:
        """Seconds since the server stored the object."""
        return (now - self.objects[key].modified).total_seconds()


def take_snapshot(
    store: BlobStore, earlier: Snapshot | None = None, *, workers: int = 8
) -> Snapshot:
    """List the whole prefix and read every record not read before."""
    objects = {item.key: item for item in store.list()}
    keys = {key: parsed for key in objects if (parsed := parse_key(key)) is not None}
    known = earlier.records if earlier else {}
    records = {key: known[key] for key in keys if key in known}
    wanted = [k for k in keys.values() if k.kind in _READ and k.key not in records]

    def read(key: Key) -> tuple[str, Record | str]:
        try:
            return key.key, _read(store, key)
        except S3Unavailable:  # not this record's fault: no other is read (exit 3)
            raise
        except ArchiveError as exc:
            return key.key, str(exc)

    found = pool_map(read, wanted, workers, "gc-read")
    unreadable = {key: why for key, why in found if isinstance(why, str)}
    records |= {key: record for key, record in found if not isinstance(record, str)}
    return Snapshot(objects, keys, records, unreadable)


# A marker's kind -> the kinds its record may have (a result's: either release's).
_MARKED = {
    "boot-marker": ("boot",),
    "result-marker": ("result", "legacy-result"),
    "legacy-marker": ("result", "legacy-result"),
}


def needs(record: Record) -> set[str]:
    """The keys (relative) a record names: its blobs (a packed blob: its pack, which stays
    while any kept record names a blob in it), and the records it stands on."""
    found = {
        pack_key(pack) if (pack := getattr(b, "pack", None)) else blob_key(b.sha256)
        for b in getattr(record, "blobs", [])
    }
    if isinstance(record, ResultRecordV2):
        found.add(record.boot.key)
        found |= {ref.record.key for ref in record.caches if ref.record is not None}
    elif isinstance(record, ResultRecordV1):
        found |= {legacy_cache_key(cache_id) for cache_id in record.caches}
    return found


def needed(records: Iterable[Record]) -> set[str]:
    """Every key these records name."""
    return {key for record in records for key in needs(record)}


def markers_of(snap: Snapshot, records: Iterable[str]) -> dict[str, str]:
    """The markers that belong to these records (keys): marker key -> `boot ID` or `result ID`."""
    ids = {(snap.keys[k].kind, snap.keys[k].id) for k in records if k in snap.keys}
    found = {}
    for key, parsed in snap.keys.items():
        kinds = _MARKED.get(parsed.kind, ())
        if any((kind, parsed.other) in ids for kind in kinds):
            found[key] = f"{kinds[0]} {parsed.other}"
    return found


def _read(store: BlobStore, key: Key) -> Record:
    if key.kind in _RESULTS:
        body = store.read(key.key)
        if body is None:
            raise ArchiveError(f"{store.where(key.key)}: gone while listed")
        return load_result_record(body, key.key, store.where(key.key))
    return read_as(store, stored_as(key.kind), key.key)
