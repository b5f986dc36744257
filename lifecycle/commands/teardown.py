"""`lifecycle teardown`: the plan shown, agreed to, carried out; one teardown at a time.

The work is in lifecycle.teardown: `make_plan` only reads (`--dry-run` stops there),
`run_teardown` carries the plan out once the user agreed to it. The CLI hands in how to
show the plan and how to ask for agreement (a terminal prompt, or `--yes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.archive.config import optional_location, resolve_location
from lifecycle.archive.objects import s3_client
from lifecycle.boot.engine import stop_orphans
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.durations import parse_duration
from lifecycle.errors import EXIT_ENVIRONMENT, EXIT_NO, EXIT_OK, LifecycleError
from lifecycle.home import Home
from lifecycle.hooks import select
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import DIED, settle_dead_boots
from lifecycle.report import Report
from lifecycle.table import human_bytes, visible
from lifecycle.teardown.plan import Selection, TeardownPlan, plan_json, plan_text
from lifecycle.teardown.removal import teardown_lock
from lifecycle.teardown.run import TeardownResult, result_json, run_teardown, summary_text
from lifecycle.teardown.survey import Services, TeardownRequest, make_plan


@dataclass(frozen=True)
class TeardownReport(Report):
    """The plan and, unless it was a dry run or there was nothing to do, what the run did."""

    FORMAT: ClassVar[str] = "lifecycle-teardown/1"
    plan: TeardownPlan | None  # None: nothing is recorded in this home
    result: TeardownResult | None
    dry_run: bool

    @property
    def exit_code(self) -> int:
        if self.unreachable:
            return EXIT_ENVIRONMENT
        failed = self.result is not None and self.result.failed
        return EXIT_NO if (self.plan is not None and self.plan.has_problems) or failed else EXIT_OK

    @property
    def unreachable(self) -> tuple[str, ...]:
        """Why dockerd or S3 could not be used: found by the plan, or S3 stopping mid-run."""
        found = self.plan.unreachable if self.plan is not None else ()
        return found + (self.result.unreachable if self.result is not None else ())

    @property
    def notes(self) -> tuple[str, ...]:
        # dockerd's or S3's words: a newline in them forges no line of lifecycle's own
        return tuple(f"lifecycle: {visible(p)}; what it guards was kept" for p in self.unreachable)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.FORMAT,
            "plan": plan_json(self.plan) if self.plan else None,
            "result": result_json(self.result) if self.result else None,
        }

    def text(self) -> str:
        """After the plan (shown already): what the run did, or that there was nothing to do."""
        if self.result is not None:
            return summary_text(self.result)
        return "" if self.dry_run and self.plan is not None else "nothing to remove\n"


def run(ctx: Context, options: verbs.Teardown) -> TeardownReport:
    """Plan, show the plan, ask for agreement (or --yes), carry it out."""
    request = make_request(ctx, options)
    hooks = select(ctx.project / "hooks", options.hook_names)
    checkpoint = ctx.checkpoint()  # test-only fault injection; a no-op when unset
    named = f"unknown cache {options.cache_ids[0]!r}" if options.cache_ids else None
    if not ctx.recorded(named):
        return TeardownReport(None, None, options.dry_run)
    services = connect_services(ctx.environ, ctx.say)
    result = None
    dry_run = options.dry_run
    with (
        ctx.ledger(create=False) as ledger,
        nullcontext() if dry_run else teardown_lock(ctx.home),  # a dry run changes nothing
    ):
        if not dry_run:  # a boot that died holding caches holds nothing: said first, whatever goes
            at = services.now().isoformat(timespec="seconds")
            for line in settle_dead(services.docker, ledger, ctx.home, at):
                ctx.say(line)
        plan = make_plan(ledger, ctx.home, services, request, preview=dry_run)
        if not options.as_json:
            ctx.out(plan_text(plan, dry_run=dry_run))
        if not dry_run and plan.has_work:
            question = f"remove {len(plan.removing)} caches ({human_bytes(plan.bytes_to_free)})?"
            ctx.agree(question, options, lambda: {"plan": plan_json(plan), "result": None})
            result = run_teardown(
                ledger, ctx.home, services, plan, request, hooks=hooks, checkpoint=checkpoint,
                progress=ctx.say,
            )  # fmt: skip
    return TeardownReport(plan, result, options.dry_run)


def settle_dead(docker: Any | None, ledger: Ledger, home: Home, at: str) -> list[str]:
    """Dead boots recorded `interrupted`, their engines stopped first where dockerd answers (a
    cache a running engine mounts is kept: lifecycle.boot.engine.stop_orphans); a line each."""
    if docker is not None:
        return stop_orphans(docker, ledger, home, at)
    return [f"boot {b}: {DIED}: now interrupted" for b in settle_dead_boots(ledger, home, at)]


def make_request(ctx: Context, options: verbs.Teardown) -> TeardownRequest:
    """The filters and switches, checked: a bad duration is a usage error. Without --archive
    no location need be configured: each archive is verified where its record says it was
    written; one given but wrong is an error all the same."""
    if options.with_content and not options.archive_first:
        raise LifecycleError("--with-content only means something with --archive")
    archive_to = (
        resolve_location(options.to, ctx.environ, ctx.project)
        if options.archive_first
        else optional_location(options.to, ctx.environ, ctx.project)
    )
    selection = Selection(
        cache_ids=tuple(dict.fromkeys(options.cache_ids)),
        manifest=options.manifest,
        older_than=(None if options.older_than is None else parse_duration(options.older_than)),
        state=options.state,
    )
    return TeardownRequest(
        selection, options.archive_first, options.with_content, options.images, archive_to,
        options.drop_withheld,
    )  # fmt: skip


def connect_services(
    environ: Mapping[str, str], on_slow: Callable[[str], None] | None = None
) -> Services:
    """dockerd and S3 where the environment points. dockerd not answering keeps every cache
    (nobody can say which containers mount it) instead of failing the command."""
    docker, problem = docker_if_it_answers(environ)
    return Services(docker, s3_client(environ, on_slow), environ, docker_problem=problem)


def docker_if_it_answers(environ: Mapping[str, str]) -> tuple[Any | None, str | None]:
    """(dockerd's client, None), or (None, why not) when it does not answer."""
    from lifecycle.dockerd import DockerUnavailable, connect

    try:
        return connect(environ), None
    except DockerUnavailable as exc:
        return None, str(exc)
