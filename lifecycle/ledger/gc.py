"""The journal of `lifecycle gc --remote`: each run's plan, object by object, and what went.

The plan is written in one transaction before anything is deleted; each batch of deletions
is marked once S3 has confirmed it. A run killed in between leaves its plan with some objects
not marked, which the next run completes (after checking them again).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lifecycle.ledger.core import Ledger
from lifecycle.ledger.rows import insert


@dataclass(frozen=True)
class GcRun:
    """One run of `gc --remote` at one archive location."""

    run_id: str
    location: str  # s3://bucket/prefix
    started_at: str
    policy: str  # the options it ran with, as the user gave them
    finished_at: str | None = None


@dataclass(frozen=True)
class GcObject:
    """An object a run planned to remove, and what became of it."""

    run_id: str
    key: str  # under the location's prefix (lifecycle.archive.layout)
    phase: int  # removed in phase order: whatever refers to an object goes before it
    size: int
    removed_at: str | None = None
    spared: str | None = None  # why a later check kept it after all


def start_gc(ledger: Ledger, run: GcRun, objects: Sequence[GcObject]) -> None:
    """Journal the run and its whole plan in one transaction, before anything is deleted."""
    with ledger.transaction() as conn:
        insert(conn, "gc_runs", run)
        for item in objects:
            insert(conn, "gc_objects", item)


def mark_removed(ledger: Ledger, run_id: str, keys: Iterable[str], at: str) -> None:
    """The server confirmed these deletions."""
    with ledger.transaction() as conn:
        conn.executemany(
            "UPDATE gc_objects SET removed_at = ? WHERE run_id = ? AND key = ?",
            ((at, run_id, key) for key in keys),
        )


def mark_spared(ledger: Ledger, run_id: str, spared: dict[str, str]) -> None:
    """Planned, but kept after all (key -> why): something came to refer to it since."""
    with ledger.transaction() as conn:
        conn.executemany(
            "UPDATE gc_objects SET spared = ? WHERE run_id = ? AND key = ?",
            ((why, run_id, key) for key, why in spared.items()),
        )


def finish_gc(ledger: Ledger, run_id: str, at: str) -> None:
    """Every object of the plan is removed or spared."""
    with ledger.transaction() as conn:
        conn.execute("UPDATE gc_runs SET finished_at = ? WHERE run_id = ?", (at, run_id))


def gc_run(ledger: Ledger, run_id: str) -> GcRun:
    """One run, as journalled when it planned."""
    found = ledger.record(GcRun, "SELECT * FROM gc_runs WHERE run_id = ?", (run_id,))
    assert found is not None, "a run's objects are journalled with the run (one transaction)"
    return found


def unfinished_gc(ledger: Ledger, location: str) -> list[GcRun]:
    """Runs at this location that a kill stopped before they finished, oldest first."""
    sql = (
        "SELECT * FROM gc_runs WHERE location = ? AND finished_at IS NULL"
        " ORDER BY started_at, rowid"
    )
    return ledger.records(GcRun, sql, (location,))


def pending_objects(ledger: Ledger, run_id: str) -> list[GcObject]:
    """A run's planned objects not yet removed nor spared, in phase order."""
    sql = (
        "SELECT * FROM gc_objects WHERE run_id = ? AND removed_at IS NULL AND spared IS NULL"
        " ORDER BY phase, key"
    )
    return ledger.records(GcObject, sql, (run_id,))
