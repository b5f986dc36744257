"""The night, start to end (or to where it was stopped, and on from there next time).

`run_night` reads in order: everything checked (lifecycle.night.prepare); one night per host,
production an earlier night left down brought back first; this plan's unfinished night resumed
(or a new one), each run whose boot recorded it before a driver was killed adopted
(lifecycle.night.adopt); predictions registered; production down around every pending run, each
journalled; ladder values settled; the end actions; the report. A night its engine cannot
carry on (no node left with room for a run, a run lost MAX_LOST times) stops after production
came back, unfinished (it resumes), and still writes its report: exit 3, the environment.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.archive.store import BlobStore
from lifecycle.errors import EXIT_ENVIRONMENT, EXIT_NO, EXIT_OK, AnswerNo, LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.home import Home
from lifecycle.hooks import HookRunner, HookSelectionError, run_hook_process, select
from lifecycle.leases import exclusive_or, held
from lifecycle.ledger import Ledger
from lifecycle.ledger.nights import production_left_down
from lifecycle.manifest import load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.night.adopt import adopt
from lifecycle.night.cells import Cell, is_warm_up, matching, warm_up
from lifecycle.night.engine import Engine, LostRun, RunOrder
from lifecycle.night.journal import BUILDS, FINISHED, LOST, RERUN, NightJournal
from lifecycle.night.ladder import climb, register
from lifecycle.night.plan import LoadedPlan, Plan
from lifecycle.night.prepare import Prepared, prepare
from lifecycle.night.production import bring_up, production_down
from lifecycle.night.publish import publish, report_json
from lifecycle.night.settle import Decision, settle
from lifecycle.night.view import NightView, night_view
from lifecycle.report import Report, plain
from lifecycle.table import lines_text


def journal_stamp(now: Callable[[], datetime]) -> Callable[[], str]:
    """The clock as the journal writes it: ISO 8601, to the millisecond (downtime is read
    from these)."""
    return lambda: now().isoformat(timespec="milliseconds")


class NightBusy(AnswerNo):
    """Another night (or ladder) runs on this host."""


@dataclass(frozen=True)
class Night:
    """Where a night runs and what it talks to; the command layer makes it."""

    ledger: Ledger
    home: Home
    engine: Engine
    manifests_dir: Path
    project: Path
    store: BlobStore | None  # the archive; None when no location is set
    say: Callable[[str], None]
    now: Callable[[], datetime]
    runner: HookRunner = run_hook_process
    checkpoint: Checkpoint = lambda point: None  # test-only fault injection (lifecycle.faults)

    def stamp(self) -> str:
        """Now, as the journal writes it."""
        return journal_stamp(self.now)()


@dataclass(frozen=True)
class NightRequest:
    """What is asked of a night."""

    loaded: LoadedPlan
    kind: str = "night"  # night | tune
    rerun: tuple[str, ...] = ()  # cell id patterns to run again
    new: bool = False  # a new night even if this plan's last one did not finish
    revalidate: bool = False  # ladders check carried values instead of choosing


@dataclass(frozen=True)
class Recovery:
    """Production of an earlier night, brought back (or not)."""

    night_id: str
    up: bool
    detail: str


WHY_CHARS = 160  # of a cell's first non-passing verdict in the text report; --json has all


@dataclass(frozen=True)
class NightOutcome(Report):
    """What one invocation did, and the night's view after it."""

    view: NightView
    ran: int  # runs booted by this invocation (warm-ups included)
    recovered: tuple[Recovery, ...]
    decisions: tuple[Decision, ...]
    note: str | None = None
    stopped: str | None = None  # why the engine could not carry the night on

    FORMAT: ClassVar[str] = "lifecycle-night/1"

    @property
    def exit_code(self) -> int:
        """0 when every pin passes, every ladder wrote its value and production is up; 3 when
        the engine stopped the night; 1 otherwise."""
        if self.stopped is not None:
            return EXIT_ENVIRONMENT
        view = self.view
        pins_pass = all(p.verdict in ("pass", "untested") for p in view.pins)
        settled = all(d.action == "written" for d in self.decisions)
        up = view.production is None or view.production.up
        return EXIT_OK if pins_pass and settled and up and view.state == "finished" else EXIT_NO

    @property
    def notes(self) -> tuple[str, ...]:
        said = (self.note, self.stopped and f"the night stopped before its end: {self.stopped}")
        return tuple(f"lifecycle: {line}" for line in said if line)

    def to_json(self) -> dict[str, Any]:
        """The report the night wrote (`report.json`), and what this invocation did."""
        outcome = self
        extra = {
            "ran": outcome.ran,
            "recovered": plain(outcome.recovered),
            "decisions": plain(outcome.decisions),
            "stopped": outcome.stopped,
        }
        return {**report_json(outcome.view), **extra}

    def text(self) -> str:
        """A night's verdicts, downtime, observers that voted, ladders and where its report is."""
        view: NightView = self.view
        lines = [f"{view.kind} {view.id} ({view.plan}): {view.state}; booted {self.ran} this run"]
        lines += [
            f"  recovered production of night {r.night_id}: {r.detail}" for r in self.recovered
        ]
        lines += [
            f"  pin {p.pin}: {p.verdict.upper()} ({p.why})"
            for p in view.pins
            if p.cells  # a tune's: none
        ]
        for cell in view.cells:
            if cell.verdict not in ("pass", "pending") and not cell.workload.count("="):
                flag = " [instrumented: not counted]" if cell.instrumented else ""
                why = next(
                    (o.verdict for r in cell.runs for o in r.checks if o.verdict.status != "pass"),
                    None,
                )
                said = f": {why.check} {why.status}: {why.why}"[:WHY_CHARS] if why else ""
                lines.append(
                    f"    {cell.id}: {cell.verdict} {cell.passed}/{len(cell.runs)}{flag}{said}"
                )
        lines += [f"  observers voted: {d.text}" for d in view.disagreements]
        lines += [
            f"  lost, not counted: {a.cell} run {a.run} on {a.node}: {a.error}"[:WHY_CHARS]
            for a in view.lost
        ]
        if view.production is not None:
            production = view.production
            if production.up:
                lines.append(f"  production: down {production.downtime_s:.1f} s in all; now up")
            else:  # its last interval is open: no up hook ended it
                since = production.intervals[-1].down_at
                lines.append(
                    f"  production: DOWN since {since}, not brought back; `lifecycle night"
                    " --recover` brings it up"
                )
        for decision in self.decisions:
            lines.append(
                f"  {decision.pin} {decision.argument}: {decision.action}: {decision.detail}"
            )
        lines += [f"  {e.action}: {e.detail}" for e in view.end]
        if view.report is not None:
            lines.append(f"  report: {view.report.html_file}")
            if view.report.archived_html:
                lines.append(f"  archived: {view.report.archived_html}")
        return lines_text(lines)  # an engine's error, a node's, a hook's words


def run_night(night: Night, request: NightRequest) -> NightOutcome:
    """Run (or resume) the plan's night; see the module's docstring for the order."""
    plan = request.loaded.plan
    checked = prepare(plan, night.manifests_dir, night.project, None)
    with night_lock(night.home):
        recovered = tuple(recover(night.ledger, night.stamp, night.say, night.runner))
        if any(not r.up for r in recovered):
            raise ProductionStillDown(recovered)
        builds = {ref: pin.digest for ref, pin in checked.pins.items()}
        resumed, note = _journal(night, request, builds, checked)
        prepared = _resolved(night.engine, checked, resumed.builds() if resumed else builds)
        journal = resumed or _begin(night, request, builds)
        _ask_again(journal, prepared, request.rerun)
        adopt(night.engine, journal, prepared, night.say)
        registered = register(journal, plan, night.store)
        ran, stopped = 0, None
        pending = _pending(journal, prepared)
        if pending:
            guard = (
                production_down(journal, prepared.production, night.say, night.runner)
                if prepared.production
                else nullcontext()
            )
            with guard:
                ran, stopped = _run(night, journal, prepared, pending)
        archive = night.store.location.url() if night.store else None
        decisions = []
        if stopped is None:  # else its ladders and end wait for its runs, when it resumes
            decisions = _settle(night, journal, plan, prepared, request.revalidate, archive)
            night.checkpoint("night-settled")
            if ran or not journal.finished:
                _end(night, journal, plan)
                night.checkpoint("night-ended")
                journal.event(FINISHED, json.dumps(_left(prepared), sort_keys=True))
        cells = list(prepared.cells)
        view = night_view(journal, plan, cells, night.engine.where, registered, archive)
        night.checkpoint("night-finished")
        view = publish(view, night.home, night.store)
    return NightOutcome(view, ran, recovered, tuple(decisions), note, stopped)


class ProductionStillDown(AnswerNo):
    """An earlier night's production could not be brought back: nothing else runs."""

    def __init__(self, recovered: tuple[Recovery, ...]) -> None:
        failed = [f"night {r.night_id}: {r.detail}" for r in recovered if not r.up]
        super().__init__("production is still down, so nothing was run: " + "; ".join(failed))


def recover(
    ledger: Ledger,
    stamp: Callable[[], str],
    say: Callable[[str], None],
    runner: HookRunner = run_hook_process,
) -> list[Recovery]:
    """Bring up production wherever a night left it down (a SIGKILL, a reboot, a failed up)."""
    found = []
    for event in production_left_down(ledger):
        journal = NightJournal.of(ledger, event.night_id, stamp)
        assert journal is not None, "an event's night is in the ledger"
        plan = Plan.model_validate(json.loads(journal.night.plan), strict=False)  # as it ran
        production = plan.production
        if production is None:
            found.append(Recovery(journal.night.id, False, "its plan names no production.up"))
            continue
        try:
            hook = select(Path(journal.night.project) / "hooks", [production.up])[0]
        except HookSelectionError as exc:
            found.append(Recovery(journal.night.id, False, f"cannot run production.up: {exc}"))
            continue
        say(f"night {journal.night.id} left production down ({event.event}): recovering")
        up = bring_up(journal, hook, say, runner)
        detail = "production is up" if up else f"hooks/{hook.name} failed; still down"
        found.append(Recovery(journal.night.id, up, detail))
    return found


def night_lock(home: Home) -> AbstractContextManager[None]:
    """One night at a time per host: two would take each other's production down and up. The
    kernel drops the lock when its holder dies, SIGKILL included."""
    path = home.night_lock
    return exclusive_or(path, lambda: NightBusy(f"another night runs on this host (lock {path})"))


def night_running(home: Home) -> bool:
    """Whether a night runs on this host now (it holds the lock); nothing is created."""
    return held(home.night_lock)


def _journal(
    night: Night, request: NightRequest, builds: dict[str, str], prepared: Prepared
) -> tuple[NightJournal | None, str | None]:
    """This plan's night to run: the last one, unless it finished (or --new) or its pins are
    other builds now (`builds`: pin -> manifest digest); else None, for a new one. A night
    whose runs so far measured other builds is never resumed: its measurements would mix two
    builds. One whose every run is done is: only its end is left, and its ladders' writes into
    the manifests it measured are what changed them."""
    loaded = request.loaded
    latest = NightJournal.latest(night.ledger, loaded.plan.name, night.stamp)
    if latest is not None and not request.new:
        same_plan = latest.night.plan_digest == loaded.digest
        measured = latest.builds()
        changed = sorted(ref for ref, digest in builds.items() if measured.get(ref) != digest)
        if not latest.finished and not same_plan:
            raise LifecycleError(
                f"night {latest.night.id} of plan {loaded.plan.name!r} stopped before its end"
                f" with another version of the plan (sha256:{latest.night.plan_digest[:12]},"
                f" now {loaded.digest[:12]}): run it to its end with that plan, or pass --new"
            )
        finishing = same_plan and changed and not latest.finished and not request.rerun
        if finishing and not _pending(latest, prepared):
            return latest, f"finishing night {latest.night.id}: every run of it is done"
        if same_plan and changed and (not latest.finished or request.rerun):
            raise LifecycleError(
                f"night {latest.night.id} measured other builds of {', '.join(changed)} (their"
                " manifests changed since it started): pass --new for a night of these"
            )
        if same_plan and not changed and (request.rerun or not latest.finished):
            return latest, None if latest.finished else f"resuming night {latest.night.id}"
        if same_plan and latest.finished and not request.rerun and builds == latest.left():
            # --rerun only while the night's builds stand: its ladders' writes made new ones.
            again = "" if changed else "--rerun CELL runs cells again, "
            return latest, (
                f"night {latest.night.id} of this plan finished; nothing to run ({again}--new"
                " starts a new night)"
            )
    return None, None


def _begin(night: Night, request: NightRequest, builds: dict[str, str]) -> NightJournal:
    """A new night of the plan, measuring `builds` (pin -> manifest digest)."""
    loaded = request.loaded
    journal = NightJournal.begin(night.ledger, loaded, request.kind, night.project, night.stamp)
    journal.event(BUILDS, json.dumps(builds, sort_keys=True))
    return journal


def _resolved(engine: Engine, checked: Prepared, measured: dict[str, str]) -> Prepared:
    """`checked` with the built image of each pin whose manifest is still the build the night
    measures (`measured`: pin -> digest). Only those boot again: a night is resumed past a
    moved manifest only once none of its runs is left, and the manifest its own ladder
    rewrote is a build nobody made, so looking its image up would ask for a needless build."""
    pins = {
        ref: engine.resolve(ref, pin.loaded, pin.digest) if measured.get(ref) == pin.digest else pin
        for ref, pin in checked.pins.items()
    }
    return replace(checked, pins=pins)


def _ask_again(journal: NightJournal, prepared: Prepared, patterns: tuple[str, ...]) -> None:
    """A new attempt of each cell matching `--rerun`: its runs run again."""
    if not patterns:
        return
    chosen = matching(list(prepared.cells), list(patterns))
    if not chosen:
        known = ", ".join(c.id for c in prepared.cells[:6])
        raise LifecycleError(f"--rerun {' '.join(patterns)}: no such cell (cells: {known}, …)")
    for cell in chosen:
        journal.event(RERUN, cell.id)


def _pending(journal: NightJournal, prepared: Prepared) -> list[tuple[Cell, int, int]]:
    """(cell, run, attempt) of every run not done yet, in the night's order."""
    done = journal.runs()
    return [
        (cell, run, journal.attempt(cell.id))
        for cell in prepared.cells
        for run in range(1, cell.repeats + 1)
        if (cell.id, run) not in done
    ]


def _run(
    night: Night, journal: NightJournal, prepared: Prepared, pending: list[tuple[Cell, int, int]]
) -> tuple[int, str | None]:
    """Every pending run, each journalled, as many at once as the engine has room for (one on
    this host's engine), in the night's order where room allows. A warm cell whose pin has no
    good cache left waits for a run of its pin under way, else gets a warm-up first. A lost
    attempt (its node died) is journalled with its node and run again. The number of boots, and
    why the engine stopped the night before its runs' end (None: it did not)."""
    engine, waiting = night.engine, list(pending)
    order_of = {(cell.id, run): index for index, (cell, run, _) in enumerate(pending)}
    started: dict[tuple[str, int, int], RunOrder] = {}  # (cell id, run, attempt) -> its order
    lost: Counter[tuple[str, int]] = Counter()
    boots = 0

    def under_way(cell: Cell) -> bool:
        return any(o.cell.pin == cell.pin and o.cell.gpu == cell.gpu for o in started.values())

    def start(order: RunOrder) -> bool:
        if not engine.start(order):
            return False
        started[(order.cell.id, order.run, order.attempt)] = order
        journal.started(order.cell.id, order.run, order.attempt)
        return True

    while waiting or started:
        for item in list(waiting):
            cell, run, attempt = item
            pin = prepared.pins[cell.pin]
            if cell.state == "warm" and not engine.warm_ready(pin, cell.gpu):
                if under_way(cell):
                    continue  # a run of the pin under way leaves a good cache
                up = warm_up(cell)
                number = 1 + sum(1 for key in journal.runs() if key[0] == up.id)
                if start(RunOrder(journal.night.id, up, number, 1, pin, ())):
                    night.say(f"{cell.pin}: no good cache left for a warm run; warm-up boot first")
                continue
            if start(RunOrder(journal.night.id, cell, run, attempt, pin, prepared.hooks[cell.id])):
                waiting.remove(item)
        if not started:
            return boots, f"{engine.where} has no room for any run of this night"
        for ended in engine.finished():
            if isinstance(ended, LostRun):
                order = started.pop((ended.order.cell.id, ended.order.run, ended.order.attempt))
                if stop := _lost(night, journal, ended, lost):
                    return boots, stop  # the runs still under way are lost with the night
                if not is_warm_up(order.cell.id):  # a warm-up is made again if still needed
                    waiting.append((order.cell, order.run, order.attempt))
                    waiting.sort(key=lambda w: order_of[(w[0].id, w[1])])
                continue
            started.pop((ended.cell, ended.run, ended.attempt))
            journal.done(ended)
            night.checkpoint("night-run-done")
            boots += 1
            checks = ", ".join(f"{o.verdict.check} {o.verdict.status}" for o in ended.checks)
            where = f" on {ended.node}" if ended.node else ""
            done = (
                len(pending)
                - len(waiting)
                - sum(1 for o in started.values() if not is_warm_up(o.cell.id))
            )
            night.say(
                f"[{done}/{len(pending)}] {ended.cell} run {ended.run}: {ended.verdict}"
                f" (boot {ended.boot_id} {ended.outcome}{where}{'; ' + checks if checks else ''})"
            )
    return boots, None


MAX_LOST = 3  # lost attempts of one run before the night stops


def _lost(
    night: Night, journal: NightJournal, lost: LostRun, counts: Counter[tuple[str, int]]
) -> str | None:
    """Journal a lost attempt; why the night stops, once one run was lost MAX_LOST times."""
    order = lost.order
    detail = {
        "cell": order.cell.id, "run": order.run, "attempt": order.attempt, "node": lost.node,
        "error": lost.error,
    }  # fmt: skip
    journal.event(LOST, json.dumps(detail, sort_keys=True))
    counts[(order.cell.id, order.run)] += 1
    again = "runs again" if counts[(order.cell.id, order.run)] < MAX_LOST else "the night stops"
    night.say(f"{order.cell.id} run {order.run}: lost on {lost.node} ({lost.error}); {again}")
    if counts[(order.cell.id, order.run)] < MAX_LOST:
        return None
    return (
        f"{order.cell.id} run {order.run} was lost {MAX_LOST} times, last on {lost.node}:"
        f" {lost.error}"
    )


def _settle(
    night: Night,
    journal: NightJournal,
    plan: Plan,
    prepared: Prepared,
    revalidate: bool,
    archive: str | None,
) -> list[Decision]:
    runs = journal.runs()
    decisions = []
    for ladder in plan.ladders:
        for ref in plan.ladder_pins(ladder):
            predicted = ladder.predictions.get(ref, {})
            climbed = climb(ladder, ref, list(prepared.cells), runs, predicted)
            pin = prepared.pins[ref]
            decision = settle(
                journal, ladder, climbed, pin, revalidate=revalidate, archive=archive,
                checkpoint=night.checkpoint,
            )  # fmt: skip
            decisions.append(decision)
            night.say(f"{ref} {ladder.argument}: {decision.action}: {decision.detail}")
    return decisions


def _left(prepared: Prepared) -> dict[str, str]:
    """pin -> its manifest's digest now, its ladders' writes included: run again on these, the
    finished night is shown, not begun anew (its own writes are no other build)."""
    return {ref: manifest_digest(load_manifest(p.loaded.file)) for ref, p in prepared.pins.items()}


def _end(night: Night, journal: NightJournal, plan: Plan) -> None:
    """The end actions not taken yet (a night killed after them takes none twice), each on
    every boot of the night where the journal says it ran (a resumed driver ran none of the
    boots before it), each journalled with what it did."""
    boots, taken = journal.boot_nodes(), journal.ended()
    if plan.end.archive and "archive" not in taken:
        done = night.engine.archive(boots)
        journal.event("end:archive", done.model_dump_json())
        night.say(f"archive: {done.detail}")
    if plan.end.teardown and "teardown" not in taken:
        done = night.engine.teardown(boots)
        journal.event("end:teardown", done.model_dump_json())
        night.say(f"teardown: {done.detail}")
