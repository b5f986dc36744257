"""What a night found, read from its journal: the view its JSON and HTML reports print.

The pins' verdicts count only plain cells of the matrix: an instrumented cell (an observing
hook attached) is shown beside its plain twin and never counted, and when the two disagree the
view says so, with both counts. Downtime is read from the production events; a ladder's rungs
against their predictions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import Field

from lifecycle.ledger.nights import NightEvent
from lifecycle.night.cells import Cell, is_warm_up
from lifecycle.night.engine import EndSummary, RunSummary, worst
from lifecycle.night.journal import LOST, NightJournal
from lifecycle.night.ladder import LadderView, Registered, ladder_views
from lifecycle.night.plan import Frozen, Plan


class CellView(Frozen):
    """One cell: its runs of the current attempt and its verdict over them."""

    id: str
    pin: str
    workload: str
    state: str
    instrumented: bool
    counted: bool  # toward its pin's verdict: a plain cell of the matrix
    created: list[str]
    repeats: int
    runs: list[RunSummary]
    passed: int
    verdict: str  # pass | fail | inconclusive | pending (not every run done)


class PinView(Frozen):
    """A pin's verdict: the worst of its counted cells."""

    pin: str
    verdict: str  # pass | fail | inconclusive | pending | untested (no matrix cell)
    cells: int
    why: str


class Disagreement(Frozen):
    """A plain cell and its instrumented twin that came out differently."""

    pin: str
    workload: str
    state: str
    hooks: list[str]
    instrumented: str  # "2/3": passed of runs
    plain: str
    text: str


class Interval(Frozen):
    """From a production.down hook's start to the end of the up hook that brought it back."""

    down_at: str
    up_at: str | None  # None: not brought back (yet)
    seconds: float | None


class ProductionView(Frozen):
    """Production's hours down, as the journal has them."""

    intervals: list[Interval]
    downtime_s: float
    up: bool
    last_event: str | None


class ReportPlaces(Frozen):
    """Where a night's report is: on this host, and in the archive."""

    html_file: str
    json_file: str
    archived_html: str | None
    archived_json: str | None


class LostAttempt(Frozen):
    """An attempt at a run that never finished: its node died or could not run it. Never
    counted; the run went to another node."""

    cell: str
    run: int
    attempt: int
    node: str
    error: str


class NightView(Frozen):
    """Everything a night's report shows."""

    id: str
    kind: str
    plan: str
    plan_file: str
    plan_digest: str
    host: str
    engine: str
    started_at: str
    state: str  # finished | running (stopped before its end: it resumes)
    pins: list[PinView]
    cells: list[CellView]
    disagreements: list[Disagreement]
    warm_ups: list[RunSummary]
    production: ProductionView | None
    predictions: Registered | None
    ladders: list[LadderView]
    end: list[EndSummary]
    archive: str | None = None  # the archive location: results' records are under it
    report: ReportPlaces | None = None
    lost: list[LostAttempt] = Field(default_factory=list)


def cell_view(cell: Cell, runs: Mapping[tuple[str, int], RunSummary]) -> CellView:
    """A cell with its done runs and its verdict."""
    done = [runs[(cell.id, n)] for n in range(1, cell.repeats + 1) if (cell.id, n) in runs]
    statuses = [r.verdict for r in done]
    verdict = "pending" if len(done) < cell.repeats else worst(statuses)
    return CellView(
        id=cell.id,
        pin=cell.pin,
        workload=cell.workload,
        state=cell.state,
        instrumented=cell.instrumented,
        counted=not cell.instrumented and cell.rung is None,
        created=list(cell.created),
        repeats=cell.repeats,
        runs=done,
        passed=statuses.count("pass"),
        verdict=verdict,
    )


def pin_views(plan: Plan, cells: list[CellView]) -> list[PinView]:
    """Each pin's verdict over its counted cells."""
    views = []
    for pin in plan.pins:
        counted = [c for c in cells if c.pin == pin and c.counted]
        if not counted:
            verdict, why = "untested", "no matrix cell (ladders only)"
        elif any(c.verdict == "pending" for c in counted):
            verdict, why = "pending", "not every cell has run"
        else:
            verdict = worst([c.verdict for c in counted])
            bad = [f"{c.workload} {c.state}: {c.verdict}" for c in counted if c.verdict != "pass"]
            why = "; ".join(bad) if bad else f"all {len(counted)} cells pass"
        views.append(PinView(pin=pin, verdict=verdict, cells=len(counted), why=why))
    return views


def disagreements(cells: list[CellView]) -> list[Disagreement]:
    """Instrumented cells whose runs passed as often as their plain twin's did not: 2 of 3
    with the observer and 0 of 5 without is a disagreement, though both cells fail."""
    plain = {(c.pin, c.workload, c.state): c for c in cells if not c.instrumented}
    found = []
    for cell in cells:
        twin = plain.get((cell.pin, cell.workload, cell.state))
        if not cell.instrumented or twin is None or "pending" in (cell.verdict, twin.verdict):
            continue
        if not cell.runs or not twin.runs:
            continue
        if cell.passed * len(twin.runs) == twin.passed * len(cell.runs):  # the same share
            continue
        hooks = sorted(
            {h for r in cell.runs for h in r.hooks} - {h for r in twin.runs for h in r.hooks}
        )
        with_hook, without = f"{cell.passed}/{len(cell.runs)}", f"{twin.passed}/{len(twin.runs)}"
        text = (
            f"the hook changed the outcome: {with_hook} with, {without} without"
            f" ({', '.join(hooks) or 'observing hooks'}; {cell.pin} {cell.workload} {cell.state})"
        )
        found.append(
            Disagreement(
                pin=cell.pin,
                workload=cell.workload,
                state=cell.state,
                hooks=hooks,
                instrumented=with_hook,
                plain=without,
                text=text,
            )
        )
    return found


def production_view(events: list[NightEvent]) -> ProductionView | None:
    """Intervals of production down, from the journal's production events."""
    production = [e for e in events if e.event.startswith("production.")]
    if not production:
        return None
    intervals: list[Interval] = []
    opened: str | None = None
    for event in production:
        if event.event == "production.down:intent" and opened is None:
            opened = event.at
        elif event.event == "production.up:done" and opened is not None:
            took = datetime.fromisoformat(event.at) - datetime.fromisoformat(opened)
            seconds = round(took.total_seconds(), 1)
            intervals.append(Interval(down_at=opened, up_at=event.at, seconds=seconds))
            opened = None
    if opened is not None:
        intervals.append(Interval(down_at=opened, up_at=None, seconds=None))
    total = sum(i.seconds or 0.0 for i in intervals)
    return ProductionView(
        intervals=intervals, downtime_s=round(total, 1), up=opened is None,
        last_event=production[-1].event,
    )  # fmt: skip


def night_view(
    journal: NightJournal,
    plan: Plan,
    cells: list[Cell],
    engine: str,
    registered: Registered | None,
    archive: str | None = None,
) -> NightView:
    """The view of a night as its journal has it now."""
    night = journal.night
    events = journal.events()
    runs = journal.runs()
    views = [cell_view(cell, runs) for cell in cells]
    warm_ups = sorted(
        (run for (cell, _), run in runs.items() if is_warm_up(cell)),
        key=lambda r: r.started_at or "",
    )
    end = [
        EndSummary.model_validate_json(e.detail)
        for e in events
        if e.event.startswith("end:") and e.detail
    ]
    return NightView(
        id=night.id,
        kind=night.kind,
        plan=night.plan_name,
        plan_file=night.plan_file,
        plan_digest=night.plan_digest,
        host=night.host,
        engine=engine,
        started_at=night.started_at,
        state="finished" if journal.finished else "running",
        pins=pin_views(plan, views),
        cells=views,
        disagreements=disagreements(views),
        warm_ups=warm_ups,
        production=production_view(events),
        predictions=registered,
        ladders=ladder_views(plan, cells, runs, events),
        end=end,
        archive=archive,
        lost=[
            LostAttempt.model_validate_json(e.detail)
            for e in events
            if e.event == LOST and e.detail
        ],
    )
