"""A night's journal: what has run, what is left, and what production went through.

Written one row at a time, each in its own transaction, before and after every step: a run is
`started` before its boot and `done` once its results are recorded, so a night killed at any
point resumes at the first run without a `done`. A cell asked to run again (`--rerun`) gets a
new attempt; the runs of the attempt before stay in the ledger, superseded.
"""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from lifecycle.ledger import Ledger
from lifecycle.ledger.nights import (
    NightEvent,
    NightRecord,
    NightRunStep,
    add,
    events,
    latest_night,
    night_by_id,
    run_steps,
)
from lifecycle.night.engine import RunSummary
from lifecycle.night.plan import LoadedPlan

FINISHED = "finished"  # closes a night: every run done, the end actions taken; detail: pin ->
# the manifest digest the night left (JSON), its ladders' writes included
RERUN = "rerun"  # detail: the cell's id; its next attempt starts
BUILDS = "builds"  # detail: pin -> the manifest digest the night measures (JSON), at its start
LOST = "lost"  # detail: a lost attempt (JSON: cell, run, attempt, node, error); never counted


@dataclass(frozen=True)
class NightJournal:
    """The journal of one night in this host's ledger."""

    ledger: Ledger
    night: NightRecord
    stamp: Callable[[], str]  # the time each row is written at

    @classmethod
    def begin(
        cls, ledger: Ledger, loaded: LoadedPlan, kind: str, project: Path, stamp: Callable[[], str]
    ) -> NightJournal:
        """A new night of this plan, its id `n-<UTC time>-<6 hex>` sorting by time like boots'."""
        night = NightRecord(
            id=f"n-{datetime.fromisoformat(stamp()):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}",
            kind=kind,
            plan_name=loaded.plan.name,
            plan_file=str(loaded.file),
            plan_digest=loaded.digest,
            plan=loaded.canonical(),
            project=str(project),
            host=socket.gethostname(),
            started_at=stamp(),
        )
        add(ledger, night)
        return cls(ledger, night, stamp)

    @classmethod
    def of(cls, ledger: Ledger, night_id: str, stamp: Callable[[], str]) -> NightJournal | None:
        """The journal of a night the ledger knows."""
        night = night_by_id(ledger, night_id)
        return None if night is None else cls(ledger, night, stamp)

    @classmethod
    def latest(
        cls, ledger: Ledger, plan_name: str, stamp: Callable[[], str]
    ) -> NightJournal | None:
        """The newest night of a plan, if any."""
        night = latest_night(ledger, plan_name)
        return None if night is None else cls(ledger, night, stamp)

    def event(self, name: str, detail: str | None = None) -> None:
        """Journal an event now."""
        add(self.ledger, NightEvent(self.night.id, name, detail, self.stamp()))

    def events(self) -> list[NightEvent]:
        """Every event, oldest first."""
        return events(self.ledger, self.night.id)

    def attempt(self, cell: str) -> int:
        """The cell's current attempt: 1, plus one for each time it was asked to run again."""
        return 1 + sum(1 for e in self.events() if e.event == RERUN and e.detail == cell)

    def started(self, cell: str, run: int, attempt: int) -> None:
        """Journal that a run is about to boot."""
        at = self.stamp()
        step = NightRunStep(self.night.id, cell, run, attempt, "started", None, None, None, at)
        add(self.ledger, step)

    def done(self, summary: RunSummary) -> None:
        """Journal a run's summary, once its boot and results are recorded."""
        step = NightRunStep(
            self.night.id, summary.cell, summary.run, summary.attempt, "done", summary.boot_id,
            summary.verdict, summary.model_dump_json(), self.stamp(),
        )  # fmt: skip
        add(self.ledger, step)

    def runs(self) -> dict[tuple[str, int], RunSummary]:
        """The done runs of each cell's current attempt, by (cell, run)."""
        attempts: dict[str, int] = {}
        for event in self.events():
            if event.event == RERUN and event.detail is not None:
                attempts[event.detail] = attempts.get(event.detail, 1) + 1
        found = {}
        for step in run_steps(self.ledger, self.night.id):
            if step.step == "done" and step.attempt == attempts.get(step.cell, 1):
                assert step.summary is not None, "a done run always has its summary"
                found[(step.cell, step.run)] = RunSummary.model_validate_json(step.summary)
        return found

    def unfinished(self) -> list[tuple[str, int, int]]:
        """(cell, run, attempt) of each run journalled `started` and never `done`, of any
        attempt, in the order they started: its driver was killed while it ran, or it was lost."""
        started: dict[tuple[str, int, int], str] = {}
        done = set()
        for step in run_steps(self.ledger, self.night.id):
            key = (step.cell, step.run, step.attempt)
            if step.step == "done":
                done.add(key)
            else:
                started.setdefault(key, step.step)
        return [key for key in started if key not in done]

    def boot_ids(self) -> list[str]:
        """Every boot this night made, superseded attempts and warm-ups included."""
        return list(self.boot_nodes())

    def boot_nodes(self) -> dict[str, str | None]:
        """Every boot this night made (`boot_ids`) -> the node that ran it, as its run's
        summary was journalled (None: this host's engine ran it). A night resumed by another
        driver finds here where the boots before it ran: their end actions go there."""
        found: dict[str, str | None] = {}
        for step in run_steps(self.ledger, self.night.id):
            if step.boot_id and step.boot_id not in found:
                summary = RunSummary.model_validate_json(step.summary) if step.summary else None
                found[step.boot_id] = summary.node if summary else None
        return found

    def builds(self) -> dict[str, str]:
        """pin -> the manifest digest of the build this night measures."""
        found = [e.detail for e in self.events() if e.event == BUILDS and e.detail]
        return dict(json.loads(found[0])) if found else {}

    def left(self) -> dict[str, str]:
        """pin -> the manifest digest the night left when it finished, its ladders' writes
        included (a night finished before this was journalled: the builds it measured)."""
        found = [e.detail for e in self.events() if e.event == FINISHED and e.detail]
        return dict(json.loads(found[-1])) if found else self.builds()

    def ended(self) -> set[str]:
        """The end actions (archive, teardown) taken since a cell was last asked to run again."""
        events = self.events()
        opened = max((i for i, e in enumerate(events) if e.event == RERUN), default=-1)
        return {
            e.event.removeprefix("end:") for e in events[opened + 1 :] if e.event.startswith("end:")
        }

    @property
    def finished(self) -> bool:
        """Whether the night ran to its end (every run, the end actions)."""
        last = [e.event for e in self.events() if e.event in (FINISHED, RERUN)]
        return bool(last) and last[-1] == FINISHED
