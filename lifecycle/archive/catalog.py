"""What an archive holds, read by listing it: every cache with its versions, every boot.

This is the team's view: no ledger is read, so any host sees what every host archived. One
LIST of `caches/` (and of `boots/`) finds the index; the records it names are read in parallel
and each is checked against its name and format, as everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lifecycle.archive.layout import Key, parse_key
from lifecycle.archive.record import read_as
from lifecycle.archive.store import BlobStore
from lifecycle.ledger.boots import BootRecord, CacheRow, CacheUse
from lifecycle.parallel import pool_map
from lifecycle.records import BootRecordV1, CacheRecordV1, CacheVersion, MadeBy, stored_as


@dataclass(frozen=True)
class ArchivedVersion:
    """One version of a cache, as the list shows it."""

    tree_digest: str
    parent: str | None
    with_content: bool
    archived_at: str
    host: str
    record: str  # s3:// URL of its record
    files: int
    bytes: int
    made_by: MadeBy | None  # the last boot before it, and how that boot ended
    cache_key: str


@dataclass(frozen=True)
class ArchivedCache:
    """One cache the archive holds: its row (from its newest version), every version, and the
    boots and results its index lists."""

    row: CacheRow
    versions: tuple[ArchivedVersion, ...]  # oldest first
    boots: tuple[str, ...]
    results: tuple[str, ...]

    @property
    def newest(self) -> ArchivedVersion:
        """Its newest version."""
        return self.versions[-1]

    @property
    def state(self) -> str:
        """`restorable` when a version holds the cache's files, else `evidence`."""
        return "restorable" if any(v.with_content for v in self.versions) else "evidence"


@dataclass(frozen=True)
class ArchivedBoot:
    """One boot the archive holds."""

    boot: BootRecord
    arch: str
    uses: tuple[CacheUse, ...]
    record: str  # s3:// URL of its record
    archived_by: str  # the host that archived it


@dataclass
class _Index:
    """A cache's keys, as one listing found them."""

    versions: list[Key] = field(default_factory=list)
    boots: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    legacy: Key | None = None


def archived_caches(
    store: BlobStore, *, named: Iterable[str] | None = None, workers: int = 8
) -> list[ArchivedCache]:
    """Every cache the archive holds (only those of these cache names, if given), newest
    first."""
    index: dict[str, _Index] = {}
    prefixes = tuple(f"caches/{name}-" for name in named) if named is not None else ("caches/",)
    for key in (k for prefix in prefixes for k in _keys(store, prefix)):
        entry = index.setdefault(key.id, _Index())
        if key.kind == "version":
            entry.versions.append(key)
        elif key.kind == "boot-marker":
            entry.boots.append(str(key.other))
        elif key.kind == "result-marker":
            entry.results.append(str(key.other))
        elif key.kind == "legacy-cache":
            entry.legacy = key
    for key in _keys(store, "results-by-cache/"):
        if key.id in index:
            index[key.id].results.append(str(key.other))
    wanted = [(cache_id, key) for cache_id, e in index.items() for key in e.versions]
    wanted += [(cache_id, e.legacy) for cache_id, e in index.items() if e.legacy is not None]
    read = pool_map(lambda pair: (pair[0], *_version(store, pair[1])), wanted, workers, "catalog")
    found: dict[str, list[tuple[CacheRow, ArchivedVersion]]] = {}
    for cache_id, row, version, listed in read:
        found.setdefault(cache_id, []).append((row, version))
        index[cache_id].boots.extend(listed)
    caches = []
    for cache_id, versions in found.items():
        versions.sort(key=lambda pair: (pair[1].archived_at, pair[1].record))
        entry = index[cache_id]
        caches.append(
            ArchivedCache(
                row=versions[-1][0],
                versions=tuple(v for _, v in versions),
                boots=tuple(sorted(set(entry.boots))),
                results=tuple(sorted(set(entry.results))),
            )
        )
    return sorted(caches, key=lambda c: (c.newest.archived_at, c.row.id), reverse=True)


def archived_boots(store: BlobStore, *, workers: int = 8) -> list[ArchivedBoot]:
    """Every boot the archive holds a record of, newest first."""
    first: dict[str, Key] = {}
    for key in _keys(store, "boots/"):
        if key.kind == "boot":
            first.setdefault(key.id, key)  # a second record of a boot says the same
    boots = pool_map(lambda key: _boot(store, key), first.values(), workers, "catalog")
    return sorted(boots, key=lambda b: (b.boot.started_at, b.boot.id), reverse=True)


def _version(store: BlobStore, key: Key) -> tuple[CacheRow, ArchivedVersion, list[str]]:
    """A version's row and summary, and the boots a previous-format record lists in itself."""
    record = read_as(store, stored_as(key.kind), key.key)
    assert isinstance(record, CacheVersion | CacheRecordV1), "a cache's keys hold its versions"
    summary = ArchivedVersion(
        tree_digest=record.fingerprint.tree_digest,
        parent=record.parent if isinstance(record, CacheVersion) else None,
        with_content=record.with_content,
        archived_at=record.archived_at,
        host=record.host,
        record=store.where(key.key),
        files=record.fingerprint.files,
        bytes=record.fingerprint.bytes,
        made_by=record.made_by if isinstance(record, CacheVersion) else None,
        cache_key=record.cache.cache_key,
    )
    boots = sorted(record.boot_ids()) if isinstance(record, CacheRecordV1) else []
    return record.cache, summary, boots


def _boot(store: BlobStore, key: Key) -> ArchivedBoot:
    record = read_as(store, BootRecordV1, key.key)
    return ArchivedBoot(
        record.boot, record.arch, tuple(record.uses), store.where(key.key), record.host
    )


def _keys(store: BlobStore, prefix: str) -> list[Key]:
    """The keys of the layout under `prefix` (anything else there is not ours: left alone)."""
    return [key for item in store.list(prefix) if (key := parse_key(item.key)) is not None]
