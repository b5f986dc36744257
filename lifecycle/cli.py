"""The `lifecycle` command line: parse, call lifecycle.commands.<verb>, print, exit.

Verb modules are imported inside each verb so that `lifecycle --help` loads neither
pydantic nor docker nor boto3: start-up time is paid only by the verb that needs it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lifecycle import __version__
from lifecycle.crash import known_secrets
from lifecycle.errors import (
    EXIT_CODES,
    EXIT_ENVIRONMENT,
    EXIT_INTERNAL,
    LifecycleError,
    problem_lines,
)
from lifecycle.redact import redact

if TYPE_CHECKING:
    from lifecycle.boot.run import BootRequest
    from lifecycle.ledger import Ledger

EXIT_USAGE = 2


class _Group(click.Group):
    """Renders a LifecycleError as its lines on stderr with its family's exit code; any other
    error as one line naming the file its traceback went to (exit 4). Tracebacks on the
    terminal only with --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except LifecycleError as exc:
            if ctx.params.get("debug"):
                traceback.print_exc()
            for line in exc.lines():
                click.echo(redact(line, known_secrets(os.environ)), err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            # Interrupted (from a hook session) knows its signal: exit 130 or 143 like a shell.
            click.echo(f"lifecycle: {exc or 'interrupted'}; what was done is recorded", err=True)
            ctx.exit(getattr(exc, "exit_code", 130))
        except Exception as exc:
            if ctx.params.get("debug"):
                traceback.print_exc()
                ctx.exit(EXIT_INTERNAL)
            _unexpected(exc)
            ctx.exit(EXIT_INTERNAL)


def _unexpected(exc: Exception) -> None:
    from lifecycle.crash import write_traceback
    from lifecycle.home import default_home

    summary = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    try:
        where = f"traceback in {write_traceback(exc, default_home(dict(os.environ)), os.environ)}"
    except OSError:
        where = "no traceback file could be written; rerun with --debug"
    line = f"lifecycle: unexpected error (a bug): {summary}; {where}"
    click.echo(redact(line, known_secrets(os.environ)), err=True)


def _exit_code_table() -> str:
    # \b keeps click from re-wrapping the table into one paragraph.
    rows = "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES)
    return f"\b\nExit codes:\n{rows}"


@click.group(
    cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=_exit_code_table()
)
@click.version_option(__version__, prog_name="lifecycle")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option(
    "--manifests",
    "manifests_dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="LIFECYCLE_MANIFESTS",
    help="Directory of manifests/<version>/manifest.yaml (default: ./manifests, searched upward).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, manifests_dir: Path | None) -> None:
    """Build, boot, archive and port patched vLLM engines, keeping their JIT caches' evidence."""
    ctx.obj = {"debug": debug, "manifests_dir": manifests_dir or _find_manifests_dir(Path.cwd())}


def _find_manifests_dir(start: Path) -> Path:
    for directory in (start, *start.parents):
        if (directory / "manifests").is_dir():
            return directory / "manifests"
    return start / "manifests"


def _say(line: str) -> None:
    """Progress on stderr, so stdout stays the command's answer."""
    click.echo(f"  | {line}", err=True)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.pass_context
def validate(ctx: click.Context, paths: tuple[Path, ...], as_json: bool) -> None:
    """Validate manifests (default: every manifests/*/manifest.yaml)."""
    from lifecycle.commands.validate import validate as run

    files = list(paths) or sorted(ctx.obj["manifests_dir"].glob("*/manifest.yaml"))
    if not files:
        raise LifecycleError(f"no manifests found under {ctx.obj['manifests_dir']}")
    results = run(files)
    if as_json:
        _emit_json(
            [
                {
                    "file": str(r.file),
                    "valid": not r.problems,
                    "digest": r.digest,
                    "problems": problem_lines(r.problems),
                    "warnings": list(r.warnings),
                }
                for r in results
            ]
        )
    for result in results:
        for line in problem_lines(result.problems):
            click.echo(line, err=True)
        if not result.problems and not as_json:
            click.echo(f"ok {result.file} sha256:{result.digest}")
        for warning in () if as_json else result.warnings:
            click.echo(f"warning: {warning}", err=True)
    if any(r.problems for r in results):
        ctx.exit(EXIT_USAGE)


@cli.command()
@click.argument("version")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def show(ctx: click.Context, version: str, as_json: bool) -> None:
    """Print the resolved manifest of VERSION (or a manifest path) and its digest."""
    from lifecycle.commands.show import render_text
    from lifecycle.commands.show import show as run

    report = run(ctx.obj["manifests_dir"], version)
    if as_json:
        _emit_json(report)
    else:
        click.echo(render_text(report), nl=False)


@cli.command()
@click.argument("version")
@click.option("--dry-run", is_flag=True, help="Print the plan (Dockerfile, context, tag, labels).")
@click.option("--force", is_flag=True, help="Build even if an image of this digest exists.")
@click.option("--push", metavar="REGISTRY", help="Tag and push the image to REGISTRY.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def build(
    ctx: click.Context, version: str, dry_run: bool, force: bool, push: str | None, as_json: bool
) -> None:
    """Build the engine image of VERSION through the Docker Engine API."""
    from lifecycle.commands.build import build as run
    from lifecycle.commands.build import describe_plan, make_plan

    plan = make_plan(ctx.obj["manifests_dir"], version)
    if dry_run:
        described = describe_plan(plan)
        if as_json:
            _emit_json(described)
            return
        click.echo(f"# dry run: nothing is built\n# tag {plan.tag}")
        for key, value in plan.labels.items():
            click.echo(f"# label {key}={value}")
        for name, size in described["context"].items():
            click.echo(f"# context {name} ({size} bytes)")
        click.echo(plan.dockerfile, nl=False)
        return
    from lifecycle.dockerd import connect

    client = connect(os.environ)  # its settings are checked before the ledger is made
    with _ledger() as ledger:
        report = run(
            plan,
            client,
            ledger,
            force=force,
            push=push,
            on_line=_say,
        )
    if as_json:
        _emit_json(report)
    elif report["outcome"] == "up-to-date":
        click.echo(f"{report['tag']} is up to date ({report['image_id'][:19]})")
    else:
        click.echo(f"built {report['tag']} ({report['image_id'][:19]}) in {report['duration_s']} s")
    if report.get("pushed"):
        click.echo(f"pushed {report['pushed']}")


@cli.command()
@click.argument("version")
@click.option("--profile", help="Boot profile (default: the only one, else 'serve').")
@click.option("--cold", is_flag=True, help="Start from empty caches instead of reusing live ones.")
@click.option("--hook", "hook_names", multiple=True, metavar="NAME", help="Attach hooks/NAME.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Stop the engine after this many seconds.",
)
@click.option("--dry-run", is_flag=True, help="Print the exact container spec; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the boot record as JSON.")
@click.pass_context
def boot(
    ctx: click.Context,
    version: str,
    profile: str | None,
    cold: bool,
    hook_names: tuple[str, ...],
    timeout: float | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Boot the built engine of VERSION with its JIT caches mounted from tracked host dirs."""
    from lifecycle.commands.boot import describe_dry_run, make_request, run_boot
    from lifecycle.faults import crash_checkpoint

    # GPU arch is part of the cache key; set LIFECYCLE_GPU_ARCH (e.g. 90a) on GPU hosts.
    arch = os.environ.get("LIFECYCLE_GPU_ARCH", "unknown")

    def request(client: Any) -> BootRequest:
        return make_request(
            ctx.obj["manifests_dir"],
            version,
            client,
            profile=profile,
            cold=cold,
            hook_names=hook_names,
            arch=arch,
            timeout_s=timeout,
        )

    if dry_run:
        _emit_json(describe_dry_run(request(None), os.environ))
        return
    from lifecycle.dockerd import connect

    client = connect(os.environ)
    boot_request = request(client)
    with _ledger() as ledger:
        report = run_boot(
            client,
            ledger,
            boot_request,
            os.environ,
            _say,
            crash_checkpoint(os.environ),  # test-only delay points; a no-op when unset
        )
    if as_json:
        _emit_json(report)
    else:
        caches = ", ".join(f"{u['cache_id']} {u['mode']}" for u in report["caches"])
        flag = " [instrumented]" if report["instrumented"] else ""
        click.echo(
            f"boot {report['id']}: {report['outcome']} (exit {report['exit_code']}){flag}\n"
            f"  caches: {caches}\n  evidence: {report['evidence_path']}"
        )
    if report["outcome"] != "ok":
        ctx.exit(1)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def caches(as_json: bool) -> None:
    """List tracked JIT caches: size, files, boots that used them, state, age."""
    from datetime import UTC, datetime

    from lifecycle.commands.listing import caches_table, list_caches

    rows = _listed(lambda ledger: list_caches(ledger, datetime.now(UTC)))
    _emit_json(rows) if as_json else click.echo(caches_table(rows), nl=False)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def boots(as_json: bool) -> None:
    """List boots: when, which profile, outcome, caches cold/warm, hooks, instrumented."""
    from lifecycle.commands.listing import boots_table, list_boots

    rows = _listed(list_boots)
    _emit_json(rows) if as_json else click.echo(boots_table(rows), nl=False)


@cli.command()
@click.argument("cache_ids", nargs=-1, metavar="[CACHE]...")
@click.option("--archive", "archive_first", is_flag=True, help="Archive caches not archived yet.")
@click.option("--with-content", is_flag=True, help="With --archive: archive file content too.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing anywhere.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--images", is_flag=True, help="Also remove engine images no cache refers to.")
@click.option("--manifest", metavar="NAME", help="Only caches (and images) of this manifest.")
@click.option("--older-than", metavar="DURATION", help="Only caches older than this (2h, 3d).")
@click.option("--state", type=click.Choice(["live", "archived"]), help="Only caches in this state.")
@click.option("--to", metavar="S3_URL", help="Where --archive writes (s3://BUCKET/PREFIX).")
@click.option("--hook", "hook_names", multiple=True, metavar="NAME", help="Attach hooks/NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and the result as JSON.")
@click.pass_context
def teardown(
    ctx: click.Context,
    cache_ids: tuple[str, ...],
    archive_first: bool,
    with_content: bool,
    dry_run: bool,
    yes: bool,
    images: bool,
    manifest: str | None,
    older_than: str | None,
    state: str | None,
    to: str | None,
    hook_names: tuple[str, ...],
    as_json: bool,
) -> None:
    """Remove boot caches whose archive verifies in S3 now; kept ones are shown with why."""
    import sys
    from contextlib import nullcontext

    from lifecycle.commands.teardown import archive_location, connect_services, make_request
    from lifecycle.faults import crash_checkpoint
    from lifecycle.hooks import select
    from lifecycle.table import human_bytes
    from lifecycle.teardown.journal import teardown_lock
    from lifecycle.teardown.report import plan_json, plan_text, result_json, summary_text
    from lifecycle.teardown.run import run_teardown
    from lifecycle.teardown.survey import make_plan

    project = ctx.obj["manifests_dir"].parent
    where = archive_location(to, os.environ, project, required=archive_first)
    request = make_request(
        cache_ids,
        manifest=manifest,
        older_than=older_than,
        state=state,
        archive_first=archive_first,
        with_content=with_content,
        images=images,
        archive_to=where,
    )
    hooks = select(project / "hooks", hook_names)
    checkpoint = crash_checkpoint(os.environ)  # test-only fault injection; a no-op when unset
    if _nothing_recorded(f"unknown cache {cache_ids[0]!r}" if cache_ids else None):
        _emit_json({"plan": None, "result": None}) if as_json else click.echo("nothing to remove")
        return
    services = connect_services(os.environ, _say)
    result = None
    with _ledger(create=False) as ledger, nullcontext() if dry_run else teardown_lock(ledger.home):
        plan = make_plan(ledger, services, request, preview=dry_run)
        if not as_json:
            click.echo(plan_text(plan, dry_run=dry_run), nl=False)
        if not dry_run and plan.has_work:
            if not yes and not sys.stdin.isatty():
                if as_json:
                    _emit_json({"plan": plan_json(plan), "result": None})
                raise LifecycleError("nothing removed: no terminal to confirm on; pass --yes")
            if not yes:
                size = human_bytes(plan.bytes_to_free)
                question = f"remove {len(plan.removing)} caches ({size})?"
                click.confirm(question, default=False, abort=True, err=True)
            result = run_teardown(
                ledger,
                services,
                plan,
                request,
                hooks=hooks,
                checkpoint=checkpoint,
                progress=_say,
            )
    if as_json:
        _emit_json({"plan": plan_json(plan), "result": result_json(result) if result else None})
    elif result is not None:
        click.echo(summary_text(result), nl=False)
    elif not dry_run:
        click.echo("nothing to remove")
    for problem in plan.unreachable:
        click.echo(f"lifecycle: {problem}; what it guards was kept", err=True)
    if plan.unreachable:
        ctx.exit(EXIT_ENVIRONMENT)
    ctx.exit(1 if plan.has_problems or (result is not None and result.failed) else 0)


@cli.command()
@click.argument("target", metavar="CACHE|RESULT")
@click.option("--reason", default=None, help="Why it is kept (default: 'pinned by hand').")
def pin(target: str, reason: str | None) -> None:
    """Make CACHE (or every cache behind RESULT) a GC root: teardown keeps it until unpinned."""
    from datetime import UTC, datetime

    from lifecycle.commands.pin import DEFAULT_REASON, pin_target

    with _ledger(create=False, missing=f"unknown cache or result {target!r}") as ledger:
        report = pin_target(ledger, target, reason or DEFAULT_REASON, datetime.now(UTC))
    for cache_id in report.pinned:
        click.echo(f"pinned {cache_id}: {'; '.join(report.reasons[cache_id])}")
    for skipped in report.skipped:
        click.echo(f"skipped {skipped}")


@cli.command()
@click.argument("target", metavar="CACHE|RESULT")
@click.option("--reason", default=None, help="Remove only the pin with this reason.")
def unpin(target: str, reason: str | None) -> None:
    """Remove CACHE's pins (or RESULT's, or the one with --reason); teardown may then remove it."""
    from lifecycle.commands.pin import unpin_target

    with _ledger(create=False, missing=f"unknown cache or result {target!r}") as ledger:
        report = unpin_target(ledger, target, reason)
    for cache_id in report.pinned:
        left = report.reasons[cache_id]
        click.echo(f"unpinned {cache_id}" + (f"; still pinned: {'; '.join(left)}" if left else ""))
    for skipped in report.skipped:
        click.echo(f"skipped {skipped}")


@contextmanager
def _ledger(*, create: bool = True, missing: str | None = None) -> Iterator[Ledger]:
    """The ledger of LIFECYCLE_HOME. Verbs that only act on what was recorded pass
    create=False: in a home with no ledger they write nothing and fail with `missing`."""
    from lifecycle.ledger import Ledger, NoLedger, default_home

    try:
        ledger = Ledger.open(default_home(dict(os.environ)), create=create)
    except NoLedger as exc:
        raise LifecycleError(f"{missing}: {exc}" if missing else str(exc)) from None
    try:
        yield ledger
    finally:
        ledger.close()


def _listed(rows_of: Callable[[Ledger], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A listing's rows; in a home where nothing was recorded yet, none (and a note)."""
    if _nothing_recorded():
        return []
    with _ledger(create=False) as ledger:
        return rows_of(ledger)


def _nothing_recorded(missing: str | None = None) -> bool:
    """True, after a note, when LIFECYCLE_HOME holds no ledger yet (with `missing`, the
    error of a verb that was asked about a recorded thing); nothing is written either way."""
    from lifecycle.ledger import NoLedger, default_home, has_ledger

    home = default_home(dict(os.environ))
    if has_ledger(home):
        return False
    if missing:
        raise LifecycleError(f"{missing}: {NoLedger(home)}")
    click.echo(f"lifecycle: {NoLedger(home)}; nothing is recorded on this host", err=True)
    return True


@cli.command()
@click.argument("cache_ids", nargs=-1, metavar="[CACHE]...")
@click.option("--all", "every", is_flag=True, help="Every live cache; re-verify archived ones.")
@click.option("--with-content", is_flag=True, help="Archive the cache's files too (restorable).")
@click.option("--to", metavar="S3_URL", help="Archive location (default: LIFECYCLE_ARCHIVE).")
@click.option("--dry-run", is_flag=True, help="Show what would be uploaded; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def archive(
    ctx: click.Context,
    cache_ids: tuple[str, ...],
    every: bool,
    with_content: bool,
    to: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Archive caches' evidence (and files, --with-content) to S3, content-addressed, verified."""
    from lifecycle.archive.config import resolve_location
    from lifecycle.archive.location import s3_client
    from lifecycle.commands.archive import archive as run
    from lifecycle.commands.archive import archive_text, check_selection

    location = resolve_location(to, os.environ, ctx.obj["manifests_dir"].parent)
    check_selection(cache_ids, every)
    client = s3_client(os.environ, _say)
    if _nothing_recorded(f"unknown cache {cache_ids[0]!r}" if cache_ids else None):
        return
    with _ledger(create=False) as ledger:
        report = run(
            ledger,
            client,
            location,
            cache_ids,
            every=every,
            with_content=with_content,
            dry_run=dry_run,
            progress=_say,
        )
    _emit_json(report) if as_json else click.echo(archive_text(report), nl=False)


@cli.command()
@click.argument("cache_id", metavar="CACHE")
@click.option("--from", "source", metavar="S3_URL", help="Archive location (as for archive --to).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def restore(ctx: click.Context, cache_id: str, source: str | None, as_json: bool) -> None:
    """Rebuild CACHE's dir from its archived files, verified, and mark it live."""
    from lifecycle.archive.config import resolve_location
    from lifecycle.archive.location import s3_client
    from lifecycle.archive.restore import check_cache_id
    from lifecycle.commands.archive import restore as run
    from lifecycle.commands.archive import restore_text

    project = ctx.obj["manifests_dir"].parent
    location = resolve_location(source, os.environ, project, option="--from")
    check_cache_id(cache_id)
    client = s3_client(os.environ, _say)
    with _ledger() as ledger:
        report = run(
            ledger,
            client,
            location,
            cache_id,
            progress=_say,
        )
    _emit_json(report) if as_json else click.echo(restore_text(report), nl=False)


@cli.command()
def schema() -> None:
    """Print the manifest JSON Schema (for editors' YAML language servers)."""
    from lifecycle.commands.schema import manifest_json_schema

    _emit_json(manifest_json_schema())


@cli.command()
@click.argument("old", required=False)
@click.argument("new", required=False)
@click.option("--dry-run", is_flag=True, help="Compute the report; write nothing.")
@click.option("--keep-going", is_flag=True, help="Try every patch; report every conflict.")
@click.option("--continue", "resume", is_flag=True, help="Go on after resolving a conflict.")
@click.option("--abort", is_flag=True, help="Forget the stopped port, restoring everything.")
@click.option("--branch", metavar="NAME", help="Branch to commit on (default: port/NEW).")
@click.option("--release", metavar="VERSION", help="Upstream release (default: from NEW).")
@click.option(
    "--allow-dirty", is_flag=True, help="Port OLD as in the working tree though HEAD differs."
)
@click.option("--force", is_flag=True, help="Replace a NEW that exists (keeps what it validated).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def port(
    ctx: click.Context,
    old: str | None,
    new: str | None,
    dry_run: bool,
    keep_going: bool,
    resume: bool,
    abort: bool,
    branch: str | None,
    release: str | None,
    allow_dirty: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Port the patch series of OLD to the upstream release NEW, on branch port/NEW.

    Exit 0 when the port is complete, 1 while conflicts are pending, 2 on usage errors.
    """
    from lifecycle.commands.port import abort_port, continue_port, render_text
    from lifecycle.commands.port import port as run
    from lifecycle.ledger import default_home
    from lifecycle.port.plan import PortRequest

    home = default_home(dict(os.environ))
    manifests_dir = ctx.obj["manifests_dir"]
    if resume or abort:
        others = (old, new, dry_run, keep_going, branch, release, allow_dirty, force)
        if (resume and abort) or any(others):
            raise click.UsageError("--continue and --abort take no other arguments or options")
        if abort:
            message = abort_port(manifests_dir, home, Path.cwd())
            _emit_json({"aborted": True, "message": message}) if as_json else click.echo(message)
            return
        report = continue_port(manifests_dir, home, Path.cwd())
    else:
        if not (old and new):
            raise click.UsageError("give OLD and NEW (e.g. `lifecycle port 0.30 0.31`)")
        request = PortRequest(
            manifests_dir,
            old,
            new,
            home,
            dry_run,
            keep_going,
            branch=branch,
            release=release,
            allow_dirty=allow_dirty,
            force=force,
        )
        report = run(request)
    if as_json:
        _emit_json(report.to_json())
    else:
        click.echo(render_text(report), nl=False)
    ctx.exit(report.exit_code)


@cli.group("result")
def result_group() -> None:
    """Record results against boots; `lifecycle results` lists them."""


@result_group.command("add")
@click.argument("boot_id", metavar="BOOT")
@click.option("--name", required=True, help="What was tested, e.g. batch-burst-64.")
@click.option(
    "--status", required=True, type=click.Choice(["pass", "fail", "inconclusive"]), help="Verdict."
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="NAME=VALUE",
    help="A measured value: a JSON number, true, false, null, or text. Repeatable.",
)
@click.option(
    "--file",
    "document",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A JSON object kept with the result; its `metrics` and `note` are taken too.",
)
@click.option("--note", help="Free text kept with the result.")
@click.option("--to", metavar="S3_URL", help="Archive it there now (default: LIFECYCLE_ARCHIVE).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def result_add(
    ctx: click.Context,
    boot_id: str,
    name: str,
    status: str,
    metrics: tuple[str, ...],
    document: Path | None,
    note: str | None,
    to: str | None,
    as_json: bool,
) -> None:
    """Record a result against BOOT; archived at once when an archive location is set."""
    from datetime import UTC, datetime

    from lifecycle.archive.location import s3_client
    from lifecycle.commands.result import add, add_text, read_result_file
    from lifecycle.commands.teardown import archive_location
    from lifecycle.results.add import ResultRequest
    from lifecycle.results.model import parse_metric

    where = archive_location(to, os.environ, ctx.obj["manifests_dir"].parent, required=False)
    request = ResultRequest(
        boot_id,
        name,
        status,
        metrics=dict(parse_metric(text) for text in metrics),
        note=note,
        document=read_result_file(document) if document else None,
        document_where=str(document),
    )
    with _ledger(create=False, missing=f"unknown boot {boot_id!r}") as ledger:
        report, problem = add(
            ledger,
            request,
            datetime.now(UTC),
            location=where,
            client_for=lambda: s3_client(os.environ, _say),
            progress=_say,
        )
    _emit_json(report) if as_json else click.echo(add_text(report), nl=False)
    if problem:
        click.echo(f"lifecycle: {problem}", err=True)
        ctx.exit(problem.exit_code)  # 1, or 3 when S3 could not be reached


@cli.command("results")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def results_list(as_json: bool) -> None:
    """List results: name, status, boot, metrics, archived; instrumented ones are flagged."""
    from lifecycle.commands.result import list_results, results_table

    rows = _listed(list_results)
    _emit_json(rows) if as_json else click.echo(results_table(rows), nl=False)


@contextmanager
def _ledger_or_archive(source: str | None) -> Iterator[tuple[Ledger | None, Any, str]]:
    """(ledger, S3 client, where from): with --from, the archive alone and no ledger at all;
    without, the ledger that must already exist (audit never makes an empty one)."""
    from lifecycle.archive.location import ArchiveLocation, s3_client
    from lifecycle.ledger import Ledger, NoLedger, default_home

    if source is not None:
        where = ArchiveLocation.parse(source, "--from").url()  # the flag first, then the env
        yield None, s3_client(os.environ, _say), where
        return
    home = default_home(dict(os.environ))
    client = s3_client(os.environ, _say)
    try:
        ledger = Ledger.open(home, create=False)
    except NoLedger as exc:
        raise LifecycleError(f"{exc}; add --from s3://BUCKET/PREFIX to read the archive") from None
    try:
        yield ledger, client, f"the ledger at {home}"
    finally:
        ledger.close()


@cli.group("audit")
def audit_group() -> None:
    """Which caches, image, manifest and patches stand behind a result; what stands on a cache."""


@audit_group.command("result")
@click.argument("result_id", metavar="RESULT")
@click.option("--from", "source", metavar="S3_URL", help="Read the archive alone (no ledger).")
@click.option(
    "--provenance",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the chain as an in-toto Statement v1 to this file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the chain as JSON.")
def audit_result(
    result_id: str, source: str | None, provenance: Path | None, as_json: bool
) -> None:
    """The chain: result, boot, caches, image, manifest, patches."""
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.archive.store import BlobStore
    from lifecycle.audit.render import chain_text
    from lifecycle.commands.audit import audit_result as run
    from lifecycle.commands.audit import check_output_file, write_provenance

    if provenance is not None:
        check_output_file(provenance, "--provenance")
    with _ledger_or_archive(source) as (ledger, client, where):
        store = BlobStore(client, ArchiveLocation.parse(source, "--from")) if source else None
        chain = run(result_id, ledger=ledger, store=store)
    if provenance is not None:
        write_provenance(chain, provenance)
    if as_json:
        _emit_json(chain)
        return
    click.echo(chain_text(chain, where), nl=False)
    if provenance is not None:
        click.echo(f"provenance: {provenance} (in-toto Statement v1)")


@audit_group.command("cache")
@click.argument("cache_id", metavar="CACHE")
@click.option("--from", "source", metavar="S3_URL", help="Read the archive alone (no ledger).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def audit_cache(cache_id: str, source: str | None, as_json: bool) -> None:
    """Every boot that used CACHE and every result that stands on it."""
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.archive.store import BlobStore
    from lifecycle.audit.render import cache_text
    from lifecycle.commands.audit import audit_cache as run

    with _ledger_or_archive(source) as (ledger, client, where):
        store = BlobStore(client, ArchiveLocation.parse(source, "--from")) if source else None
        report = run(cache_id, ledger=ledger, store=store)
    _emit_json(report) if as_json else click.echo(cache_text(report, where), nl=False)


@cli.command("verify")
@click.argument("target", metavar="CACHE|RESULT")
@click.option("--from", "source", metavar="S3_URL", help="Verify the archive alone (no ledger).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def verify_target(ctx: click.Context, target: str, source: str | None, as_json: bool) -> None:
    """Hash the live cache and the archived objects again; name whatever differs. Exit 1 if any."""
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.commands.verify import report_json, report_text, verify

    with _ledger_or_archive(source) as (ledger, client, _):
        location = ArchiveLocation.parse(source, "--from") if source else None
        report = verify(target, ledger=ledger, client=client, source=location)
    _emit_json(report_json(report)) if as_json else click.echo(report_text(report), nl=False)
    ctx.exit(1 if report.problems else 0)


def main() -> None:
    """Console-script entry point: click's usage errors as one line each, exit 2 (click would
    print the usage and a hint around it); LifecycleError is handled in _Group."""
    try:
        code = cli.main(prog_name="lifecycle", auto_envvar_prefix=None, standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "lifecycle"
        click.echo(f"{where}: {exc.format_message()} (see '{where} -h')", err=True)
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
