"""Archives in the ledger: the versions of each cache and the boots this host archived (or
restored from), the newest version of each cache, the packs this host knows honest, and
their indexes.

Every record these rows name is immutable in S3 (its key holds its sha256), so what a row
says can be verified again at any time, whatever other hosts archived since.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from lifecycle.ledger.boots import CacheRecord, Scanned, write_scan
from lifecycle.ledger.core import Ledger, insert

_ASKED_AT_ONCE = 500  # packs looked up in one statement: below SQLite's limit on its values


@dataclass(frozen=True)
class ArchiveRecord:
    """The newest version of a cache this host archived or restored: what teardown checks."""

    cache_id: str
    location: str  # s3://bucket/prefix
    record_key: str  # PREFIX/caches/<cache id>/versions/<tree>.<sha256>.json
    record_sha256: str  # of the record's bytes as read back after the upload
    with_content: bool
    blobs: int
    bytes_uploaded: int
    archived_at: str
    verified_at: str | None
    # The tree the record holds; None for a record of the previous format (one mutable
    # `caches/<cache id>.json` per cache), written before versions existed.
    tree_digest: str | None = None


@dataclass(frozen=True)
class VersionRow:
    """One archived state of a cache: a record in S3 holding one tree."""

    cache_id: str
    tree_digest: str  # the tree this record holds
    location: str  # s3://bucket/prefix
    record_key: str  # with the prefix, as ArchiveRecord.record_key
    record_sha256: str
    with_content: bool
    parent: str | None  # the tree this version grew from, None for the first
    archived_at: str


@dataclass(frozen=True)
class BootArchiveRow:
    """A boot's record in S3 (`boots/<boot id>/<sha256>.json`)."""

    boot_id: str
    location: str
    record_key: str
    record_sha256: str
    archived_at: str


def record_version(ledger: Ledger, version: VersionRow, archive: ArchiveRecord) -> None:
    """One transaction: the version (once), the cache's newest archive, and a live cache
    marked archived."""
    with ledger.transaction() as conn:
        insert(conn, "cache_versions", version, on_conflict="IGNORE")
        insert(conn, "archives", archive, on_conflict="REPLACE")
        conn.execute(
            "UPDATE caches SET state = 'archived' WHERE id = ? AND state = 'live'",
            (archive.cache_id,),
        )


def record_restored(
    ledger: Ledger,
    cache_id: str,
    scanned: Scanned,
    *,
    new_row: CacheRecord | None,
    version: VersionRow | None,
    archive: ArchiveRecord | None,
) -> None:
    """One transaction: the restored tree's scan, the cache live, and the version it came
    from (once) as its newest archive. Apart, a restore killed between them would leave the
    cache live beside a newest archive of another tree: teardown would keep it as changed
    since archived, and its next version would name the wrong parent."""
    with ledger.transaction() as conn:
        write_scan(conn, cache_id, scanned, live=True, new_row=new_row)
        if version is not None:
            insert(conn, "cache_versions", version, on_conflict="IGNORE")
        if archive is not None:
            insert(conn, "archives", archive, on_conflict="REPLACE")


def forget_versions(ledger: Ledger, rows: Sequence[VersionRow]) -> None:
    """These versions' records are no longer at their location (an archive set them aside,
    damaged): their rows go, so nothing this host writes later names them."""
    with ledger.transaction() as conn:
        conn.executemany(
            "DELETE FROM cache_versions WHERE location = ? AND record_key = ?",
            [(row.location, row.record_key) for row in rows],
        )


def versions_of(ledger: Ledger, cache_id: str) -> list[VersionRow]:
    """Every version of the cache this host knows, oldest first."""
    sql = "SELECT * FROM cache_versions WHERE cache_id = ? ORDER BY archived_at, rowid"
    return ledger.records(VersionRow, sql, (cache_id,))


def version_of(ledger: Ledger, cache_id: str, tree_digest: str, location: str) -> VersionRow | None:
    """The first record of that tree at that location: the one a result names, forever."""
    sql = (
        "SELECT * FROM cache_versions WHERE cache_id = ? AND tree_digest = ? AND location = ?"
        " ORDER BY archived_at, rowid LIMIT 1"
    )
    return ledger.record(VersionRow, sql, (cache_id, tree_digest, location))


def honest_packs(ledger: Ledger, packs: Collection[str]) -> set[str]:
    """Those of these packs (by sha256) this host knows honest: written here, or every blob
    their index places hashed here (a pack's name is its bytes, so that holds for ever)."""
    return {row["sha256"] for row in _rows_of_packs(ledger, "honest_packs", "sha256", packs)}


def _rows_of_packs(
    ledger: Ledger, table: str, columns: str, packs: Collection[str]
) -> list[sqlite3.Row]:
    """`columns` of the rows of `table` whose sha256 is one of `packs`."""
    found: list[sqlite3.Row] = []
    ordered = sorted(packs)
    for at in range(0, len(ordered), _ASKED_AT_ONCE):
        some = ordered[at : at + _ASKED_AT_ONCE]
        marks = ", ".join("?" for _ in some)
        sql = f"SELECT {columns} FROM {table} WHERE sha256 IN ({marks})"
        found += ledger.query(sql, tuple(some))
    return found


def remember_honest_packs(
    ledger: Ledger, packs: Collection[str], known_by: Literal["written", "hashed"], at: str
) -> None:
    """These packs are honest, known so since `at` (the first time a pack is known counts)."""
    if not packs:
        return
    with ledger.transaction() as conn:
        conn.executemany(
            "INSERT OR IGNORE INTO honest_packs (sha256, known_by, known_at) VALUES (?, ?, ?)",
            [(sha, known_by, at) for sha in sorted(packs)],
        )


def pack_indexes(ledger: Ledger, packs: Collection[str]) -> dict[str, tuple[int, bytes]]:
    """The indexes kept of these packs (by sha256): each pack's size and its index's text."""
    rows = _rows_of_packs(ledger, "pack_indexes", "sha256, size, body", packs)
    return {row["sha256"]: (row["size"], row["body"]) for row in rows}


def keep_pack_indexes(
    ledger: Ledger, location: str, indexes: Mapping[str, tuple[int, bytes]]
) -> None:
    """Keep these indexes (sha256 -> the pack's size, its index's text) of honest packs seen
    at `location`: only an index the pack's own bytes were checked to hold, never one merely
    read (another host's pack, or a damaged object, may hold any index)."""
    if not indexes:
        return
    with ledger.transaction() as conn:
        conn.executemany(
            "INSERT OR IGNORE INTO pack_indexes (sha256, size, body) VALUES (?, ?, ?)",
            [(sha, size, body) for sha, (size, body) in sorted(indexes.items())],
        )
        conn.executemany(
            "INSERT OR IGNORE INTO packs_seen (location, sha256) VALUES (?, ?)",
            [(location, sha) for sha in sorted(indexes)],
        )


def prune_pack_indexes(ledger: Ledger, location: str, listed: Collection[str]) -> None:
    """`location` holds only the packs `listed` now: the others are no longer seen there, and
    an index no location holds the pack of any more goes (a `gc --remote` collected it).
    A pack another process wrote since `listed` was taken loses its index too: the next
    archive reads it again from the pack, checked, and keeps it again."""
    rows = ledger.query("SELECT sha256 FROM packs_seen WHERE location = ?", (location,))
    gone = [(location, row["sha256"]) for row in rows if row["sha256"] not in listed]
    if not gone:
        return
    with ledger.transaction() as conn:
        conn.executemany("DELETE FROM packs_seen WHERE location = ? AND sha256 = ?", gone)
        conn.execute("DELETE FROM pack_indexes WHERE sha256 NOT IN (SELECT sha256 FROM packs_seen)")


def record_boot_archive(ledger: Ledger, row: BootArchiveRow) -> None:
    """Record that the boot's record is in S3 at that location (read back and verified)."""
    with ledger.transaction() as conn:
        insert(conn, "boot_archives", row, on_conflict="REPLACE")


def boot_archive(ledger: Ledger, boot_id: str, location: str) -> BootArchiveRow | None:
    """Where the boot's record is at that location, if it was archived there."""
    sql = "SELECT * FROM boot_archives WHERE boot_id = ? AND location = ?"
    return ledger.record(BootArchiveRow, sql, (boot_id, location))


def boot_archives(ledger: Ledger, boot_id: str) -> list[BootArchiveRow]:
    """Every location the boot's record was archived to, oldest first."""
    sql = "SELECT * FROM boot_archives WHERE boot_id = ? ORDER BY archived_at, rowid"
    return ledger.records(BootArchiveRow, sql, (boot_id,))


def archive_of(ledger: Ledger, cache_id: str) -> ArchiveRecord | None:
    """The cache's newest archive, if it was archived from (or restored to) this host."""
    return ledger.record(ArchiveRecord, "SELECT * FROM archives WHERE cache_id = ?", (cache_id,))


def mark_verified(ledger: Ledger, cache_id: str, at: str) -> None:
    """Note when the archive was last verified against the server."""
    with ledger.transaction() as conn:
        conn.execute("UPDATE archives SET verified_at = ? WHERE cache_id = ?", (at, cache_id))
