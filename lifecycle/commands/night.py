"""`lifecycle night PLAN`: the acceptance night as one command (lifecycle.night).

Also `--dry-run` (the cells in order, nothing booted, no acting hook run) and `--recover`
(bring production back wherever a night left it down). A night's boots run on this host's
Docker engine; its results and report go to the archive location (`--to`, else
LIFECYCLE_ARCHIVE, else `archive:` in lifecycle.yaml), which a plan that archives needs.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import ClassVar

from lifecycle.archive.config import optional_location, resolve_location
from lifecycle.archive.store import BlobStore
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import EXIT_NO, EXIT_OK, LifecycleError
from lifecycle.faults import fault_env
from lifecycle.hooks import run_hook_process
from lifecycle.night.engine import Engine
from lifecycle.night.local import LocalEngine
from lifecycle.night.plan import LoadedPlan, load_plan
from lifecycle.night.prepare import DryRun, dry_run
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
from lifecycle.report import Report
from lifecycle.table import lines_text


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
        # A detail holds what a production hook said: a field (lifecycle.table.visible).
        return lines_text(
            f"night {r.night_id}: {'production is up' if r.up else 'STILL DOWN'}: {r.detail}"
            for r in self.recovered
        )


def run(ctx: Context, options: verbs.Night) -> NightOutcome | DryRun | RecoverReport:
    """Recover, plan or run, as asked."""
    if options.plan is None:
        if not options.recover:
            raise LifecycleError("name a PLAN, or pass --recover")
        return run_recover(ctx)
    loaded = load_plan(options.plan)
    if options.dry_run:
        on_ray = (options.engine or loaded.plan.engine) == "ray"
        if needed_by := _needs_archive(loaded, on_ray):  # the night would refuse to start
            resolve_location(options.to, ctx.environ, ctx.project, needed_by=needed_by)
        return plan_only(ctx, loaded)
    request = NightRequest(loaded, rerun=tuple(options.rerun), new=options.new)
    return run_plan(ctx, request, options)


def run_plan(
    ctx: Context, request: NightRequest, options: verbs.Night | verbs.Tune
) -> NightOutcome:
    """Run (or resume) a night on this host's Docker engine, or on a Ray cluster's nodes."""
    plan = request.loaded.plan
    on_ray = (options.engine or plan.engine) == "ray"
    needed_by = _needs_archive(request.loaded, on_ray)
    location = (
        resolve_location(options.to, ctx.environ, ctx.project, needed_by=needed_by)
        if needed_by
        else optional_location(options.to, ctx.environ, ctx.project)
    )
    if on_ray:  # Ray is imported on this path only; without it, one line (exit 2)
        from lifecycle.dockerd import seconds_from
        from lifecycle.night.cluster import TASK_MARGIN_S, RayEngine

        margin_s = seconds_from(ctx.environ, "LIFECYCLE_RAY_TASK_MARGIN", TASK_MARGIN_S)
    s3 = ctx.s3() if location is not None else None
    store = BlobStore(s3, location) if s3 is not None and location is not None else None
    checkpoint = ctx.checkpoint()
    with ctx.ledger() as ledger, ExitStack() as stack:
        if on_ray:
            assert store is not None, "a cluster night always has its archive location"
            faults = fault_env(ctx.environ)  # its points on the nodes: reached in its tasks
            cluster = RayEngine(options.address, store, ctx.say, margin_s, faults)
            stack.callback(cluster.close)
            engine: Engine = cluster
        else:
            arch = ctx.environ.get("LIFECYCLE_GPU_ARCH", "unknown")
            engine = LocalEngine(
                ctx.docker(), ledger, ctx.home, ctx.environ, arch, s3, location,
                checkpoint=checkpoint,
            )  # fmt: skip
        night = Night(
            ledger=ledger,
            home=ctx.home,
            engine=engine,
            manifests_dir=ctx.manifests_dir,
            project=ctx.project,
            store=store,
            say=ctx.say,
            now=ctx.now,
            checkpoint=checkpoint,
        )
        return run_night(night, request)


def _needs_archive(loaded: LoadedPlan, on_ray: bool) -> str:
    """Why the night cannot run without an archive location; "" when it can."""
    if on_ray:  # a cluster's nodes share their caches through it
        return "a night on a Ray cluster shares its caches through it"
    if loaded.plan.end.archive:
        return f"{loaded.file} archives the night: `end: archive: true`"
    return ""


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
    with ctx.ledger(create=False) as ledger, night_lock(ctx.home):
        return RecoverReport(tuple(recover(ledger, journal_stamp(ctx.now), ctx.say)))
