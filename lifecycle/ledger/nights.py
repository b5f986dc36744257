"""Acceptance nights in the ledger: the plan each ran, its journal, and its predictions.

Every row is added, never changed: a night's state (which runs are done, whether production
is down, whether it finished) is read from its journal, so a night killed at any point is
exactly as far as its last row says.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from lifecycle.home import Home, HomeUnusable
from lifecycle.ledger.core import Ledger, has_ledger, insert

PRODUCTION_UP = "production.up:done"


@dataclass(frozen=True)
class NightRecord:
    """One night (or one tuning ladder, kind `tune`) as it was started."""

    id: str  # n-<UTC time>-<6 hex>
    kind: str  # night | tune
    plan_name: str
    plan_file: str
    plan_digest: str  # sha256 of the plan's canonical JSON
    plan: str  # the plan as run: canonical JSON
    project: str  # the project root: its hooks/ hold the production hooks
    host: str  # the host that drove it
    started_at: str


@dataclass(frozen=True)
class NightRunStep:
    """One step of one run of one cell: `started` before its boot, `done` after its results."""

    night_id: str
    cell: str
    run: int  # 1 … the cell's repeats
    attempt: int  # 1, then one more each time the cell was asked to run again
    step: str  # started | done
    boot_id: str | None
    verdict: str | None  # pass | fail | inconclusive, when done
    summary: str | None  # the run's summary, JSON, when done
    at: str


@dataclass(frozen=True)
class NightEvent:
    """Something the night did that is not a cell run: production down and up, a cell asked
    to run again, the end actions."""

    night_id: str
    event: str
    detail: str | None
    at: str


@dataclass(frozen=True)
class Prediction:
    """A margin predicted for one rung of a ladder before any rung ran."""

    night_id: str
    pin: str
    argument: str
    rung: float
    margin_mib: float
    registered_at: str


_TABLES = {
    NightRecord: "nights",
    NightRunStep: "night_runs",
    NightEvent: "night_events",
    Prediction: "predictions",
}


def add(ledger: Ledger, *rows: NightRecord | NightRunStep | NightEvent | Prediction) -> None:
    """Add rows of nights in one transaction; a second prediction for the same night and rung
    is refused by the primary key (predictions are registered once, never changed)."""
    with ledger.transaction() as conn:
        for row in rows:
            insert(conn, _TABLES[type(row)], row)


def night_by_id(ledger: Ledger, night_id: str) -> NightRecord | None:
    """One night, or None."""
    return ledger.record(NightRecord, "SELECT * FROM nights WHERE id = ?", (night_id,))


def latest_night(ledger: Ledger, plan_name: str) -> NightRecord | None:
    """The newest night of a plan, or None."""
    sql = "SELECT * FROM nights WHERE plan_name = ? ORDER BY started_at DESC, id DESC LIMIT 1"
    return ledger.record(NightRecord, sql, (plan_name,))


def run_steps(ledger: Ledger, night_id: str) -> list[NightRunStep]:
    """Every run step of a night, oldest first."""
    columns = "night_id, cell, run, attempt, step, boot_id, verdict, summary, at"
    sql = f"SELECT {columns} FROM night_runs WHERE night_id = ? ORDER BY id"
    return ledger.records(NightRunStep, sql, (night_id,))


def events(ledger: Ledger, night_id: str) -> list[NightEvent]:
    """Every event of a night, oldest first."""
    sql = "SELECT night_id, event, detail, at FROM night_events WHERE night_id = ? ORDER BY id"
    return ledger.records(NightEvent, sql, (night_id,))


def predictions(ledger: Ledger, night_id: str) -> list[Prediction]:
    """A night's registered predictions, by pin, argument and rung."""
    sql = "SELECT * FROM predictions WHERE night_id = ? ORDER BY pin, argument, rung"
    return ledger.records(Prediction, sql, (night_id,))


_LAST_PRODUCTION_EVENT = (
    "SELECT night_id, event, detail, at FROM night_events AS e WHERE event LIKE 'production.%'"
    " AND id = (SELECT max(id) FROM night_events WHERE night_id = e.night_id"
    " AND event LIKE 'production.%') ORDER BY id"
)


def production_left_down(ledger: Ledger) -> list[NightEvent]:
    """The last production event of each night that did not bring production back up."""
    events = ledger.records(NightEvent, _LAST_PRODUCTION_EVENT)
    return [e for e in events if e.event != PRODUCTION_UP]


def production_left_down_in(home: Path) -> list[NightEvent]:
    """The same, read from the ledger in `home` without writing anything, so every verb can
    ask when it starts: no ledger, nothing to say; HomeUnusable when it cannot be read."""
    if not has_ledger(home):  # reads the file's header only: a home with no ledger opens none
        return []
    file = Home(home).ledger_file
    # A read-only connection still makes the WAL's -shm index when it is not there; with
    # no -wal file every commit is in the file itself, which is then read as immutable
    # (nothing made, nothing locked). A -wal file (a writer open, or killed) is read too.
    wal = file.with_name(file.name + "-wal").exists()
    uri = file.absolute().as_uri() + ("?mode=ro" if wal else "?mode=ro&immutable=1")
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=2)) as conn:
            rows = conn.execute(_LAST_PRODUCTION_EVENT).fetchall()
    except sqlite3.DatabaseError as exc:
        # Two answers are expected and mean nothing to say: a ledger from before the nights
        # tables (the verb migrates it), and a writer holding the file past the timeout (a
        # migration, a checkpoint: the verb waits its turn). Anything else is a broken ledger.
        name = getattr(exc, "sqlite_errorname", "")
        if "no such table" in str(exc) or name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return []
        raise HomeUnusable(f"the ledger {file} cannot be read: {exc}") from None
    found = [NightEvent(*row) for row in rows]
    return [e for e in found if e.event != PRODUCTION_UP]


def newest_night(ledger: Ledger) -> NightRecord | None:
    """The newest night of any plan (a tune included), or None."""
    sql = "SELECT * FROM nights ORDER BY started_at DESC, id DESC LIMIT 1"
    return ledger.record(NightRecord, sql)
