"""`lifecycle night PLAN`: the acceptance night as one command (lifecycle.night).

Also `--dry-run` (the cells in order, nothing booted, no acting hook run) and `--recover`
(bring production back wherever a night left it down). A night's boots run on this host's
Docker engine; its results and report go to the archive location (`--to`, else
LIFECYCLE_ARCHIVE, else `archive:` in lifecycle.yaml), which a plan that archives needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.archive.config import optional_location, resolve_location
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import BlobStore
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import EXIT_NO, EXIT_OK, LifecycleError
from lifecycle.hooks import run_hook_process
from lifecycle.ledger import Ledger
from lifecycle.night.dry import DryRun, dry_run
from lifecycle.night.local import LocalEngine
from lifecycle.night.plan import LoadedPlan, load_plan
from lifecycle.night.publish import report_json
from lifecycle.night.run import (
    Night,
    NightOutcome,
    NightRequest,
    Recovery,
    journal_stamp,
    night_lock,
    recover,
    run_night,
)
from lifecycle.night.view import NightView
from lifecycle.report import Report, plain

WHY_CHARS = 160  # of a cell's first non-passing verdict in the text report; --json has all


@dataclass(frozen=True)
class NightReport(Report):
    """A night after this invocation: its view, what this run booted, what it recovered."""

    FORMAT: ClassVar[str] = "lifecycle-night/1"
    outcome: NightOutcome

    @property
    def exit_code(self) -> int:
        """0 when every pin passes and every ladder wrote its value; 1 otherwise."""
        view = self.outcome.view
        pins_pass = all(p.verdict in ("pass", "untested") for p in view.pins)
        settled = all(d.action == "written" for d in self.outcome.decisions)
        return EXIT_OK if pins_pass and settled and view.state == "finished" else EXIT_NO

    @property
    def notes(self) -> tuple[str, ...]:
        return (f"lifecycle: {self.outcome.note}",) if self.outcome.note else ()

    def text(self) -> str:
        return render_view(self.outcome)

    def to_json(self) -> dict[str, Any]:
        """The report the night wrote (`report.json`), and what this invocation did."""
        outcome = self.outcome
        extra = {
            "ran": outcome.ran,
            "recovered": plain(outcome.recovered),
            "decisions": plain(outcome.decisions),
        }
        return {**report_json(outcome.view), **extra}


@dataclass(frozen=True)
class NightPlanReport(Report):
    """`--dry-run`: the night the plan would make."""

    FORMAT: ClassVar[str] = "lifecycle-night-plan/1"
    plan: DryRun

    def text(self) -> str:
        return render_plan(self.plan)


@dataclass(frozen=True)
class RecoverReport(Report):
    """`--recover`: production of earlier nights, brought back or not."""

    FORMAT: ClassVar[str] = "lifecycle-night-recover/1"
    recovered: tuple[Recovery, ...]

    @property
    def exit_code(self) -> int:
        return EXIT_OK if all(r.up for r in self.recovered) else EXIT_NO

    def text(self) -> str:
        if not self.recovered:
            return "production: no night left it down\n"
        return "".join(
            f"night {r.night_id}: {'production is up' if r.up else 'STILL DOWN'}: {r.detail}\n"
            for r in self.recovered
        )


def run(ctx: Context, options: verbs.Night) -> NightReport | NightPlanReport | RecoverReport:
    """Recover, plan or run, as asked."""
    if options.plan is None:
        if not options.recover:
            raise LifecycleError("name a PLAN, or pass --recover")
        return run_recover(ctx)
    loaded = load_plan(options.plan)
    if options.dry_run:
        if loaded.plan.end.archive:  # the night would refuse to start without one
            resolve_location(options.to, ctx.environ, ctx.project)
        return NightPlanReport(plan_only(ctx, loaded))
    request = NightRequest(loaded, rerun=tuple(options.rerun), new=options.new)
    return NightReport(run_plan(ctx, request, options.to))


def run_plan(ctx: Context, request: NightRequest, to: str | None) -> NightOutcome:
    """Run (or resume) a night on this host's Docker engine."""
    plan = request.loaded.plan
    location = (
        resolve_location(to, ctx.environ, ctx.project)
        if plan.end.archive
        else optional_location(to, ctx.environ, ctx.project)
    )
    docker = ctx.docker()
    s3 = ctx.s3() if location is not None else None
    with ctx.ledger() as ledger:
        night = setting(ctx, ledger, docker, s3, location)
        return run_night(night, request)


def setting(
    ctx: Context, ledger: Ledger, docker: Any, s3: Any, location: ArchiveLocation | None
) -> Night:
    """The night's engine (this host's Docker) and services, from the command's context."""
    arch = ctx.environ.get("LIFECYCLE_GPU_ARCH", "unknown")
    engine = LocalEngine(docker, ledger, ctx.environ, arch, s3, location)
    store = BlobStore(s3, location) if s3 is not None and location is not None else None
    return Night(
        ledger=ledger,
        engine=engine,
        manifests_dir=ctx.manifests_dir,
        project=ctx.project,
        store=store,
        say=ctx.say,
        now=ctx.now,
    )


def plan_only(ctx: Context, loaded: LoadedPlan) -> DryRun:
    """The dry run: no Docker, no S3, no ledger made, no acting hook run."""
    if ctx.recorded():
        with ctx.ledger(create=False) as ledger:
            return dry_run(loaded, ctx.manifests_dir, ctx.project, ledger, run_hook_process)
    return dry_run(loaded, ctx.manifests_dir, ctx.project, None, run_hook_process)


def run_recover(ctx: Context) -> RecoverReport:
    """Bring production back wherever a night left it down."""
    if not ctx.recorded():
        return RecoverReport(())
    with ctx.ledger(create=False) as ledger, night_lock(ledger.home):
        return RecoverReport(tuple(recover(ledger, journal_stamp(ctx.now), ctx.say)))


def render_view(outcome: NightOutcome) -> str:
    """A night's verdicts, downtime, observers that voted, ladders and where its report is."""
    view: NightView = outcome.view
    lines = [f"{view.kind} {view.id} ({view.plan}): {view.state}; booted {outcome.ran} this run"]
    lines += [
        f"  recovered production of night {r.night_id}: {r.detail}" for r in outcome.recovered
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
                (o.verdict for r in cell.runs for o in r.checks if o.verdict.status != "pass"), None
            )
            said = f": {why.check} {why.status}: {why.why}"[:WHY_CHARS] if why else ""
            lines.append(
                f"    {cell.id}: {cell.verdict} {cell.passed}/{len(cell.runs)}{flag}{said}"
            )
    lines += [f"  observers voted: {d.text}" for d in view.disagreements]
    if view.production is not None:
        production = view.production
        state = "up" if production.up else "DOWN"
        lines.append(f"  production: down {production.downtime_s:.1f} s in all; now {state}")
    for decision in outcome.decisions:
        lines.append(f"  {decision.pin} {decision.argument}: {decision.action}: {decision.detail}")
    lines += [f"  {e.action}: {e.detail}" for e in view.end]
    if view.report is not None:
        lines.append(f"  report: {view.report.html_file}")
        if view.report.archived_html:
            lines.append(f"  archived: {view.report.archived_html}")
    return "\n".join(lines) + "\n"


def render_plan(plan: DryRun) -> str:
    """The dry run: cells in order, hooks that would and would not run."""
    resumes = f"; resumes night {plan.resumes}" if plan.resumes else ""
    lines = [f"night {plan.plan} (sha256:{plan.digest[:12]}): {plan.boots} runs to boot{resumes}"]
    for cell in plan.cells:
        done = f", {cell.done} done" if cell.done else ""
        hooks = f" hooks {', '.join(cell.hooks)}" if cell.hooks else ""
        lines.append(f"  {cell.id}: {cell.runs} run(s){done}{hooks}  {' '.join(cell.args)}")
    for hook in plan.production:
        if hook.ran:
            lines.append(f"  production.{hook.role}: hooks/{hook.hook} (asks) said: {hook.said}")
        else:
            lines.append(f"  production.{hook.role}: hooks/{hook.hook} acts: not run in a dry run")
    lines.append(f"  predictions: {plan.predictions}; end: {plan.end}")
    return "\n".join(lines) + "\n"
