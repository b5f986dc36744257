"""Builds in the ledger: every attempt, and where its full log is kept."""

from __future__ import annotations

from dataclasses import dataclass

from lifecycle.ledger.core import Ledger
from lifecycle.ledger.rows import insert


@dataclass(frozen=True)
class BuildRecord:
    """One build attempt and where its full log is kept."""

    started_at: str
    duration_s: float
    manifest_name: str
    manifest_file: str
    manifest_digest: str
    tag: str
    image_id: str | None
    outcome: str
    error: str | None
    log_path: str | None
    id: int | None = None


def record_build(ledger: Ledger, record: BuildRecord) -> int:
    """Insert a build attempt; returns its id."""
    with ledger.transaction() as conn:
        insert(conn, "builds", record, skip=("id",))
        return int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])


def all_builds(ledger: Ledger) -> list[BuildRecord]:
    """Every build, oldest first."""
    return ledger.records(BuildRecord, "SELECT * FROM builds ORDER BY id")
