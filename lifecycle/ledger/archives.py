"""Archives, GC roots (pins) and the teardown journal in the ledger."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lifecycle.ledger.core import Ledger
from lifecycle.ledger.rows import from_row, insert


@dataclass(frozen=True)
class ArchiveRecord:
    """A cache's record in S3, written last as the commit marker of its archive."""

    cache_id: str
    location: str  # s3://bucket/prefix
    record_key: str
    record_sha256: str
    with_content: bool
    blobs: int
    bytes_uploaded: int
    archived_at: str
    verified_at: str | None


@dataclass(frozen=True)
class TeardownStep:
    """One step of removing one cache: intent → verified → deleted → done (or refused)."""

    run_id: str
    cache_id: str
    step: str
    detail: str | None
    bytes_freed: int | None
    at: str


def record_archive(
    ledger: Ledger, archive: ArchiveRecord, md5s: Mapping[str, str] | None = None
) -> None:
    """Record a verified archive, mark a live cache archived and remember its blobs' md5s."""
    with ledger.transaction() as conn:
        conn.execute("DELETE FROM archives WHERE cache_id = ?", (archive.cache_id,))
        insert(conn, "archives", archive)
        conn.executemany(
            "INSERT OR IGNORE INTO blob_md5s (sha256, md5) VALUES (?, ?)", (md5s or {}).items()
        )
        conn.execute(
            "UPDATE caches SET state = 'archived' WHERE id = ? AND state = 'live'",
            (archive.cache_id,),
        )


def known_md5s(ledger: Ledger, shas: Iterable[str]) -> dict[str, str]:
    """The md5 remembered for each of these blobs, where one is."""
    wanted = list(shas)
    found: dict[str, str] = {}
    for start in range(0, len(wanted), _IN_BATCH):
        batch = tuple(wanted[start : start + _IN_BATCH])
        marks = ",".join("?" * len(batch))
        rows = ledger.query(f"SELECT sha256, md5 FROM blob_md5s WHERE sha256 IN ({marks})", batch)
        found.update((row["sha256"], row["md5"]) for row in rows)
    return found


_IN_BATCH = 500  # parameters per query: under SQLite's 999 of older builds


def archive_of(ledger: Ledger, cache_id: str) -> ArchiveRecord | None:
    """The cache's archive, if it was archived from this host."""
    rows = ledger.query("SELECT * FROM archives WHERE cache_id = ?", (cache_id,))
    return from_row(ArchiveRecord, rows[0]) if rows else None


def mark_verified(ledger: Ledger, cache_id: str, at: str) -> None:
    """Note when the archive was last verified against the server."""
    with ledger.transaction() as conn:
        conn.execute("UPDATE archives SET verified_at = ? WHERE cache_id = ?", (at, cache_id))


def pin(ledger: Ledger, cache_id: str, reason: str, at: str) -> None:
    """Make a cache a GC root: teardown keeps it until every pin is gone."""
    with ledger.transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO pins (cache_id, reason, pinned_at) VALUES (?, ?, ?)",
            (cache_id, reason, at),
        )


def unpin(ledger: Ledger, cache_id: str, reason: str | None = None) -> int:
    """Remove one pin (or all of a cache's pins); returns how many went."""
    with ledger.transaction() as conn:
        if reason is None:
            cursor = conn.execute("DELETE FROM pins WHERE cache_id = ?", (cache_id,))
        else:
            cursor = conn.execute(
                "DELETE FROM pins WHERE cache_id = ? AND reason = ?", (cache_id, reason)
            )
        return cursor.rowcount


def pins(ledger: Ledger) -> dict[str, list[str]]:
    """cache id → the reasons it is pinned."""
    found: dict[str, list[str]] = {}
    for row in ledger.query("SELECT cache_id, reason FROM pins ORDER BY pinned_at"):
        found.setdefault(row["cache_id"], []).append(row["reason"])
    return found


def record_step(ledger: Ledger, step: TeardownStep, *, cache_state: str | None = None) -> None:
    """Journal one teardown step (and, at `done`, the cache's new state) in one transaction."""
    with ledger.transaction() as conn:
        insert(conn, "teardown_steps", step)
        if cache_state is not None:
            conn.execute("UPDATE caches SET state = ? WHERE id = ?", (cache_state, step.cache_id))


def steps_of(ledger: Ledger, cache_id: str) -> list[TeardownStep]:
    """Every teardown step journalled for a cache, oldest first."""
    rows = ledger.query(
        "SELECT run_id, cache_id, step, detail, bytes_freed, at FROM teardown_steps"
        " WHERE cache_id = ? ORDER BY id",
        (cache_id,),
    )
    return [from_row(TeardownStep, row) for row in rows]
