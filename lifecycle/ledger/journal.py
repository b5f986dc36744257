"""The teardown journal in the ledger: each step of removing each cache, in order."""

from __future__ import annotations

from dataclasses import dataclass

from lifecycle.ledger.core import Ledger
from lifecycle.ledger.rows import insert


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


def steps_of(ledger: Ledger, cache_id: str) -> list[TeardownStep]:
    """Every teardown step journalled for a cache, oldest first."""
    columns = "run_id, cache_id, step, detail, bytes_freed, at"  # all but the rowid alias `id`
    sql = f"SELECT {columns} FROM teardown_steps WHERE cache_id = ? ORDER BY id"
    return ledger.records(TeardownStep, sql, (cache_id,))
