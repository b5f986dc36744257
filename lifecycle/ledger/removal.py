"""What removing caches and archived objects keeps and journals: pins (GC roots: teardown keeps
a cache until every pin on it is gone), the teardown journal (each step of removing each cache),
and `gc --remote`'s journal: each run's whole plan is written in one transaction before anything
is deleted, each batch marked once S3 confirmed it, so the next run completes a killed one (after
checking its objects again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lifecycle.ledger.core import Ledger, insert


def pin(ledger: Ledger, cache_id: str, reason: str, at: str) -> None:
    """Make a cache a GC root: teardown keeps it until every pin is gone."""
    with ledger.transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO pins (cache_id, reason, pinned_at) VALUES (?, ?, ?)",
            (cache_id, reason, at),
        )


def unpin(ledger: Ledger, cache_id: str, reason: str | None = None) -> int:
    """Remove one pin (or all of a cache's pins); returns how many went."""
    sql = "DELETE FROM pins WHERE cache_id = ? AND (? IS NULL OR reason = ?)"
    with ledger.transaction() as conn:
        return conn.execute(sql, (cache_id, reason, reason)).rowcount


def pins(ledger: Ledger) -> dict[str, list[str]]:
    """cache id → the reasons it is pinned."""
    found: dict[str, list[str]] = {}
    for row in ledger.query("SELECT cache_id, reason FROM pins ORDER BY pinned_at"):
        found.setdefault(row["cache_id"], []).append(row["reason"])
    return found


@dataclass(frozen=True)
class TeardownStep:
    """One step of removing one cache: intent → verified → deleted → done (or refused)."""

    run_id: str
    cache_id: str
    step: str  # intent | verified | deleted | done | refused
    # intent: the dir, or what a re-run resumes; verified: the proof; deleted: the trash dir
    detail: str | None
    bytes_freed: int | None
    at: str


def record_step(ledger: Ledger, step: TeardownStep, *, cache_state: str | None = None) -> None:
    """Journal one teardown step (and, at `done`, the cache's new state) in one transaction."""
    with ledger.transaction() as conn:
        insert(conn, "teardown_steps", step)
        if cache_state is not None:
            conn.execute("UPDATE caches SET state = ? WHERE id = ?", (cache_state, step.cache_id))


_STEP_COLUMNS = "run_id, cache_id, step, detail, bytes_freed, at"  # all but the rowid alias `id`


def steps_of(ledger: Ledger, cache_id: str) -> list[TeardownStep]:
    """Every teardown step journalled for a cache, oldest first."""
    sql = f"SELECT {_STEP_COLUMNS} FROM teardown_steps WHERE cache_id = ? ORDER BY id"
    return ledger.records(TeardownStep, sql, (cache_id,))


def steps_of_caches(ledger: Ledger, cache_ids: Iterable[str]) -> dict[str, list[TeardownStep]]:
    """cache id -> every teardown step journalled for it, oldest first; one statement for all.

    The journal has no index by cache (a year of nights: ~290,000 steps), so each cache asked
    apart is a scan of it: 113 caches took 3 s; asked together, one scan."""
    found: dict[str, list[TeardownStep]] = {cache_id: [] for cache_id in cache_ids}
    sql = (
        f"SELECT {_STEP_COLUMNS} FROM teardown_steps"
        " WHERE cache_id IN (SELECT value FROM json_each(?)) ORDER BY id"
    )
    for step in ledger.records(TeardownStep, sql, (json.dumps(sorted(found)),)):
        found[step.cache_id].append(step)
    return found


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
