"""GC roots in the ledger: a pinned cache is kept by teardown until every pin on it is gone."""

from __future__ import annotations

from lifecycle.ledger.core import Ledger


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
