"""What an archive holds, read by listing it (no ledger: the team's view): every cache with its
versions, every boot, and for `restore --best` the newest complete version of each cache.

One LIST of `caches/` (and of `boots/`) finds the index; the records it names are read in
parallel, each checked against its name and format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from lifecycle.archive.layout import Key, parse_key
from lifecycle.archive.record import Unread, read_as
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.ledger.boots import BootRecord, CacheRow, CacheUse
from lifecycle.parallel import pool_map
from lifecycle.records import BootRecordV1, CacheRecordV1, CacheVersion, MadeBy, stored_as

T = TypeVar("T")


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


def archived_caches(
    store: BlobStore, *, named: Iterable[str] | None = None, workers: int = 8
) -> tuple[list[ArchivedCache], Unread]:
    """Every cache the archive holds (only those of these cache names, if given), newest
    first; and the version records that could not be read, left out (one damaged record
    hides nothing else)."""
    prefixes = [f"caches/{name}-" for name in named] if named is not None else ["caches/"]
    index: dict[str, dict[str, list[Key]]] = {}  # cache id -> kind -> its keys of that kind
    for prefix in [*prefixes, "results-by-cache/"]:
        for key in listed_keys(store, prefix):
            index.setdefault(key.id, {}).setdefault(key.kind, []).append(key)
    wanted = [k for kinds in index.values() for k in kinds.get("version", [])]
    wanted += [k for kinds in index.values() for k in kinds.get("legacy-cache", [])]
    read = pool_map(lambda key: _readable(store, key, _version), wanted, workers, "catalog")
    found: dict[str, list[tuple[CacheRow, ArchivedVersion]]] = {}
    listed: dict[str, set[str]] = {}  # cache id -> boots a previous-format record lists
    unread = {store.where(key.key): why for key, why in read if isinstance(why, str)}
    for key, parts in read:
        if isinstance(parts, str):
            continue
        cache_id, (row, version, boots) = key.id, parts
        found.setdefault(cache_id, []).append((row, version))
        listed.setdefault(cache_id, set()).update(boots)
    caches = []
    for cache_id, versions in found.items():
        versions.sort(key=lambda pair: (pair[1].archived_at, pair[1].record))
        kinds = index[cache_id]
        marked = {kind: {str(k.other) for k in kinds.get(kind, [])} for kind in _MARKERS}
        caches.append(
            ArchivedCache(
                row=versions[-1][0],
                versions=tuple(v for _, v in versions),
                boots=tuple(sorted(marked["boot-marker"] | listed[cache_id])),
                results=tuple(sorted(marked["result-marker"] | marked["legacy-marker"])),
            )
        )
    return sorted(caches, key=lambda c: (c.newest.archived_at, c.row.id), reverse=True), unread


_MARKERS = ("boot-marker", "result-marker", "legacy-marker")


def archived_boots(store: BlobStore, *, workers: int = 8) -> tuple[list[ArchivedBoot], Unread]:
    """Every boot the archive holds a record of, newest first; and the records that could
    not be read, left out."""
    first: dict[str, Key] = {}
    for key in listed_keys(store, "boots/"):
        if key.kind == "boot":
            first.setdefault(key.id, key)  # a second record of a boot says the same
    read = pool_map(lambda key: _readable(store, key, _boot), first.values(), workers, "catalog")
    boots = [boot for _, boot in read if not isinstance(boot, str)]
    unread = {store.where(key.key): why for key, why in read if isinstance(why, str)}
    boots.sort(key=lambda b: (b.boot.started_at, b.boot.id), reverse=True)
    return boots, unread


def _readable(
    store: BlobStore, key: Key, read: Callable[[BlobStore, Key], T]
) -> tuple[Key, T | str]:
    """What `read` makes of the record at `key`, or why it could not be read (a server that
    does not answer is not the record's fault: it stops the whole listing)."""
    try:
        return key, read(store, key)
    except S3Unavailable:
        raise
    except ArchiveError as exc:  # its message names the record: callers name it once
        return key, str(exc).removeprefix(f"{store.where(key.key)}: ")


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


def listed_keys(store: BlobStore, prefix: str) -> list[Key]:
    """The keys of the layout under `prefix` (anything else there is not ours: left alone);
    the store's copies of records no longer listed there are forgotten."""
    listed = [item.key for item in store.list(prefix)]
    if store.copies is not None and prefix.endswith("/"):
        store.copies.keep_only(listed, under=prefix)
    return [key for found in listed if (key := parse_key(found)) is not None]


@dataclass(frozen=True)
class Best:
    """The version chosen for one cache name."""

    cache_name: str
    cache_id: str
    tree_digest: str
    archived_at: str
    host: str  # the host that archived it
    record: str  # s3:// URL of its record


def best_versions(store: BlobStore, keys: Mapping[str, str]) -> tuple[dict[str, Best], Unread]:
    """cache name -> the newest complete version whose cache key is `keys[name]`: it holds the
    cache's files, and the boot that left it ended `ok` (a failed boot may have left a
    half-built .so, which crashes the engine that loads it). Which host archived it is moot.
    And the version records passed over as they could not be read."""
    best: dict[str, Best] = {}
    caches, unread = archived_caches(store, named=keys)
    for cache in caches:
        name = cache.row.cache_name
        for version in cache.versions:
            good = version.made_by is None or version.made_by.outcome == "ok"
            if version.cache_key != keys.get(name) or not version.with_content or not good:
                continue
            found = Best(
                name, cache.row.id, version.tree_digest, version.archived_at, version.host,
                version.record,
            )  # fmt: skip
            best[name] = max(found, best.get(name, found), key=lambda b: (b.archived_at, b.record))
    return best, unread
