"""`lifecycle gc --remote`: remove from an archive what no kept record needs (lifecycle.gc).

The plan is always shown first; nothing is removed without agreement (or --yes), and never in a
dry run. A run stopped by a kill is completed by the next one at the same location, checked
again first. One run at a time per host: a second is refused at once (a lock under
LIFECYCLE_HOME); a dry run, which changes nothing, needs no lock.
"""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import click

from lifecycle.archive.config import resolve_location
from lifecycle.archive.copies import RecordCopies
from lifecycle.archive.store import BlobStore
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.durations import parse_duration
from lifecycle.errors import LifecycleError
from lifecycle.gc import (
    GcPlan,
    Policy,
    Swept,
    gc_lock,
    journal_plan,
    pinned_results,
    plan_gc,
    sweep,
    take_snapshot,
)
from lifecycle.ledger.removal import unfinished_gc
from lifecycle.report import Report, plain
from lifecycle.table import count_of, human_bytes, lines_text


@dataclass(frozen=True)
class GcReport(Report):
    """The plan, what a stopped run's completion did, and what this run removed."""

    FORMAT: ClassVar[str] = "lifecycle-gc/1"
    location: str  # s3://bucket/prefix
    policy: str  # what --keep-last, --older-than and --grace asked, in words
    dry_run: bool
    plan: GcPlan
    resumed: tuple[Swept, ...] = ()
    result: Swept | None = None
    notes: tuple[str, ...] = ()  # a record it could not read: what it kept for it

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.FORMAT,
            "location": self.location,
            "policy": self.policy,
            "dry_run": self.dry_run,
            "plan": {
                "remove": dict(Counter(doomed.kind for doomed in self.plan.remove)),
                "bytes": self.plan.bytes,
                "objects": [d.key for d in self.plan.remove],
                "kept": self.plan.kept,
                "pinned": list(self.plan.pinned),
                "unreadable": {f"{self.location}/{k}": why for k, why in self.plan.unread.items()},
            },
            "resumed": plain(self.resumed),
            "result": plain(self.result),
        }

    def plan_text(self) -> str:
        """What a stopped run's completion did, then the plan: what goes, what stays and why."""
        plan = self.plan
        lines = [f"# gc of {self.location} ({self.policy})"]
        lines += [completed_line(done) for done in self.resumed]
        removing = Counter(doomed.kind for doomed in plan.remove)
        going = ", ".join(count_of(n, kind) for kind, n in sorted(removing.items())) or "nothing"
        lines.append(f"to remove: {going} ({human_bytes(plan.bytes)})")
        kept = ", ".join(count_of(n, kind) for kind, n in sorted(plan.kept.items())) or "nothing"
        lines.append(f"kept: {kept}")
        if plan.pinned:
            lines.append(f"pinned (kept with all behind them): {', '.join(plan.pinned)}")
        if self.dry_run:
            lines.append("dry run: nothing removed")
        return lines_text(lines)  # a pin's target, as the bucket's records name it

    def text(self) -> str:
        """The outcome line (the plan was shown before)."""
        done = self.result
        if done is None:
            return "" if self.dry_run or self.plan.remove else "nothing to remove\n"
        spared = f"; spared {len(done.spared)}{_why(done)}" if done.spared else ""
        freed = f"{done.removed} objects, {human_bytes(done.bytes_freed)} freed"
        return lines_text([f"removed {freed} (run {done.run_id}){spared}"])


def run(ctx: Context, options: verbs.Gc) -> GcReport:
    """Complete any stopped run here, plan, show the plan, and (agreed) carry it out."""
    if not options.remote:
        raise click.UsageError("only `gc --remote` exists: teardown removes this host's caches")
    if options.keep_last is not None and options.keep_last < 1:
        raise LifecycleError("--keep-last must be at least 1 (the newest version of each cache)")
    older_than = options.older_than
    grace = parse_duration(options.grace, "--grace")
    policy = Policy(
        options.keep_last,
        None if older_than is None else parse_duration(older_than, "--older-than"),
        grace,
    )
    location = resolve_location(options.source, ctx.environ, ctx.project, option="--from")
    store = BlobStore(ctx.s3(), location, RecordCopies(ctx.home, location))
    checkpoint = ctx.checkpoint()
    reading = ctx.reading() if options.dry_run else ctx.ledger()  # a new host's makes none
    with reading as ledger, nullcontext() if options.dry_run else gc_lock(ctx.home):
        resumed: tuple[Swept, ...] = ()
        if not options.dry_run:
            stopped = unfinished_gc(ledger, location.url())
            resumed = tuple(sweep(ledger, store, r.run_id, ctx.now) for r in stopped)
        snap = take_snapshot(store)
        plan = plan_gc(snap, policy, pinned_results(ledger, snap), ctx.now())
        unread = plan.unread_note(store.where)
        report = GcReport(
            location.url(), policy.describe(), options.dry_run, plan, resumed,
            notes=(unread,) if unread else (),
        )  # fmt: skip
        if not options.as_json:
            ctx.out(report.plan_text())
        if options.dry_run or not plan.remove:
            return report
        question = f"remove {len(plan.remove)} objects from {report.location}?"
        ctx.agree(question, options, report.to_json)
        run_id = journal_plan(ledger, store, plan, policy, ctx.now())
        checkpoint("gc-planned")
        swept = sweep(ledger, store, run_id, ctx.now, snap=snap, checkpoint=checkpoint)
    return replace(report, result=swept)


def completed_line(done: Swept) -> str:
    """What completing a run a kill stopped did, in one line."""
    return (
        f"completed stopped gc run {done.run_id}: removed {done.removed} objects"
        f" ({human_bytes(done.bytes_freed)}), spared {len(done.spared)}{_why(done)}"
    )


def _why(done: Swept) -> str:
    """Why the last look spared what it did, counted: ` (2 behind result r-…, pinned since the
    plan; 1 named by …)`."""
    whys = Counter(done.spared.values())
    return f" ({'; '.join(f'{n} {why}' for why, n in sorted(whys.items()))})" if whys else ""
