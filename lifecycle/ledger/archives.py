"""Archives in the ledger: where each cache's verified record is, and the md5s of blobs sent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lifecycle.ledger.core import Ledger
from lifecycle.ledger.rows import insert


@dataclass(frozen=True)
class ArchiveRecord:
    """A cache's record in S3, written last as the commit marker of its archive."""

    cache_id: str
    location: str  # s3://bucket/prefix
    record_key: str  # PREFIX/caches/<cache id>.json
    record_sha256: str  # of the record's bytes as read back after the upload
    with_content: bool
    blobs: int
    bytes_uploaded: int
    archived_at: str
    verified_at: str | None


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
    return ledger.record(ArchiveRecord, "SELECT * FROM archives WHERE cache_id = ?", (cache_id,))


def mark_verified(ledger: Ledger, cache_id: str, at: str) -> None:
    """Note when the archive was last verified against the server."""
    with ledger.transaction() as conn:
        conn.execute("UPDATE archives SET verified_at = ? WHERE cache_id = ?", (at, cache_id))
