"""The `lifecycle` command line: parse, call lifecycle.commands.<verb>, print, exit.

Each verb here parses its arguments, calls its command's `run` with the Context (where
things are, how to reach the services), prints the report it gets back (its `render`, or
`--json`), the report's notes on stderr, and exits with the report's exit code. Nothing else.

Verb modules are imported inside each verb so that `lifecycle --help` loads neither
pydantic nor docker nor boto3: start-up time is paid only by the verb that needs it.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from lifecycle import __version__
from lifecycle.commands.params import GIVEN
from lifecycle.crash import known_secrets
from lifecycle.errors import EXIT_CODES, EXIT_INTERNAL, LifecycleError
from lifecycle.formats import RECORD_KINDS
from lifecycle.redact import redact

if TYPE_CHECKING:
    from lifecycle.commands.context import Context
    from lifecycle.commands.report import Report
    from lifecycle.teardown.plan import TeardownPlan

AnyReport = TypeVar("AnyReport", bound="Report")

# Every verb's --json prints its report with a format tag (lifecycle-<verb>/1, see README).
json_option = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
# Audit and verify can work from an archive alone, with no ledger on this host.
archive_only_option = click.option(
    "--from", "source", metavar="S3_URL", help="Read the archive alone (no ledger)."
)


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
    from lifecycle.home import Home, default_home

    summary = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    try:
        home = Home(default_home(dict(os.environ)))
        where = f"traceback in {write_traceback(exc, home, os.environ)}"
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
    _warn_if_production_down()


def _warn_if_production_down() -> None:
    """Whatever the verb: say so when a night left production down (a SIGKILL, a reboot, a
    failed up hook). Read-only, and silent when the ledger cannot be read."""
    from lifecycle.home import Home, default_home
    from lifecycle.ledger.nights import production_left_down_in

    home = default_home(os.environ)
    events = production_left_down_in(home)
    if events:  # the wording needs the night package; the common case imports none of it
        from lifecycle.night.production import is_down
        from lifecycle.night.run import night_running

        running = night_running(Home(home))
        for event in events:
            click.echo(f"lifecycle: {is_down(event, running)}", err=True)


def _find_manifests_dir(start: Path) -> Path:
    for directory in (start, *start.parents):
        if (directory / "manifests").is_dir():
            return directory / "manifests"
    return start / "manifests"


def _context(ctx: click.Context) -> Context:
    from lifecycle.commands.context import Context

    return Context(os.environ, ctx.obj["manifests_dir"], say=_say, note=_note)


_TICKING: list[bool] = [False]  # a progress line is shown in place on the terminal now


def _say(line: str) -> None:
    """Progress on stderr, so stdout stays the command's answer. A ticker line (bytes, rate,
    time left) replaces the one before it on a terminal, and is left out of a pipe or a log."""
    from lifecycle.ticker import Ticker

    if isinstance(line, Ticker):
        if sys.stderr.isatty():
            click.echo(f"\r\x1b[K  | {line}", err=True, nl=False)
            _TICKING[0] = True
        return
    prefix = "\r\x1b[K" if _TICKING[0] else ""
    _TICKING[0] = False
    click.echo(f"{prefix}  | {line}", err=True)


def _note(line: str) -> None:
    click.echo(f"lifecycle: {line}", err=True)


def _answer(
    ctx: click.Context, report: AnyReport, render: Callable[[AnyReport], str], as_json: bool
) -> None:
    """Print the report (its human form, or `--json`), its notes on stderr; exit its code."""
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(render(report), nl=False)
    for line in report.notes:
        click.echo(line, err=True)
    ctx.exit(report.exit_code)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@json_option
@click.pass_context
def validate(ctx: click.Context, paths: tuple[Path, ...], as_json: bool) -> None:
    """Validate manifests (default: every manifest.yaml under the manifests dir)."""
    from lifecycle.commands import validate as verb

    _answer(ctx, verb.run(_context(ctx), paths), verb.render, as_json)


@cli.command()
@click.argument("version")
@json_option
@click.pass_context
def show(ctx: click.Context, version: str, as_json: bool) -> None:
    """Print the resolved manifest of VERSION (or a manifest path) and its digest."""
    from lifecycle.commands import show as verb

    _answer(ctx, verb.run(_context(ctx), version), verb.render, as_json)


@cli.command()
@click.argument("version")
@click.option("--dry-run", is_flag=True, help="Print the plan (Dockerfile, context, tag, labels).")
@click.option("--force", is_flag=True, help="Build even if an image of this digest exists.")
@click.option("--push", metavar="REGISTRY", help="Tag and push the image to REGISTRY.")
@json_option
@click.pass_context
def build(
    ctx: click.Context, version: str, dry_run: bool, force: bool, push: str | None, as_json: bool
) -> None:
    """Build the engine image of VERSION through the Docker Engine API."""
    from lifecycle.commands import build as verb

    if dry_run:
        _answer(ctx, verb.dry_run(_context(ctx), version), verb.render_plan, as_json)
    report = verb.run(_context(ctx), version, force=force, push=push)
    _answer(ctx, report, verb.render, as_json)


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
@click.option(
    "--pull", is_flag=True, help="Pull the image by digest if this host has none (see README)."
)
@json_option
@click.pass_context
def boot(
    ctx: click.Context,
    version: str,
    profile: str | None,
    cold: bool,
    hook_names: tuple[str, ...],
    timeout: float | None,
    dry_run: bool,
    pull: bool,
    as_json: bool,
) -> None:
    """Boot the built engine of VERSION with its JIT caches mounted from tracked host dirs."""
    from lifecycle.commands import boot as verb

    options = verb.BootOptions(version, profile, cold, hook_names, timeout, pull)
    if dry_run:
        _answer(ctx, verb.dry_run(_context(ctx), options), verb.render_spec, as_json)
    _answer(ctx, verb.run(_context(ctx), options), verb.render, as_json)


def _listing_options(states: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """--from and the filters every listing takes (`states`: what --state may say)."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        for option in reversed(
            [
                click.option(
                    "--from", "source", metavar="S3_URL",
                    help="List what this archive holds, whichever host archived it (no ledger).",
                ),
                click.option("--manifest", metavar="NAME", help="Only of this manifest."),
                click.option("--arch", metavar="ARCH", help="Only of this GPU arch (e.g. 90a)."),
                click.option("--state", metavar="STATE", help=f"Only in this state: {states}."),
                click.option("--older-than", metavar="DURATION", help="Only older (2h, 3d)."),
                click.option("--newer-than", metavar="DURATION", help="Only newer (2h, 3d)."),
            ]
        ):  # fmt: skip
            command = option(command)
        return command

    return decorate


def _filters(params: dict[str, Any]) -> Any:
    from lifecycle.commands.filters import Filters
    from lifecycle.teardown.plan import parse_duration

    def duration(name: str) -> Any:
        text = params[name]
        return None if text is None else parse_duration(text, f"--{name.replace('_', '-')}")

    return Filters(
        params["manifest"], params["arch"], params["state"],
        duration("older_than"), duration("newer_than"),
    )  # fmt: skip


@cli.command()
@_listing_options("live, archived, torn-down, missing; with --from: restorable, evidence")
@json_option
@click.pass_context
def caches(ctx: click.Context, /, source: str | None, as_json: bool, **filters: Any) -> None:
    """List tracked JIT caches: size, files, boots that used them, state, age; with --from,
    every cache an archive holds and its versions."""
    from lifecycle.commands import listing

    if source is not None:
        found = listing.list_archived_caches(_context(ctx), source, _filters(filters))
        _answer(ctx, found, listing.render_archived_caches, as_json)
    report = listing.list_caches(_context(ctx), _filters(filters))
    _answer(ctx, report, listing.render_caches, as_json)


@cli.command()
@_listing_options("running, ok, failed, interrupted, aborted")
@json_option
@click.pass_context
def boots(ctx: click.Context, /, source: str | None, as_json: bool, **filters: Any) -> None:
    """List boots: when, which profile, outcome, caches cold/warm, hooks, instrumented; with
    --from, every boot an archive holds."""
    from lifecycle.commands import listing

    if source is not None:
        found = listing.list_archived_boots(_context(ctx), source, _filters(filters))
        _answer(ctx, found, listing.render_archived_boots, as_json)
    _answer(
        ctx, listing.list_boots(_context(ctx), _filters(filters)), listing.render_boots, as_json
    )


@cli.command()
@click.argument("boot_id", metavar="BOOT")
@click.option("--against", metavar="BOOT", help="The boot to compare with (default: best warm).")
@json_option
@click.pass_context
def why(ctx: click.Context, boot_id: str, against: str | None, as_json: bool) -> None:
    """Why BOOT was cold or partly warm: what changed against a warm boot."""
    from lifecycle.commands import why as verb

    _answer(ctx, verb.run(_context(ctx), boot_id, against), verb.render, as_json)


@cli.command()
@click.argument("cache_ids", nargs=-1, metavar="[CACHE]...", type=GIVEN)
@click.option("--archive", "archive_first", is_flag=True, help="Archive caches not archived yet.")
@click.option("--with-content", is_flag=True, help="With --archive: archive file content too.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing anywhere.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--images", is_flag=True, help="Also remove engine images no cache refers to.")
@click.option(
    "--drop-withheld",
    is_flag=True,
    help="Also remove caches holding files no archive may hold (a secret's value in them).",
)
@click.option(
    "--manifest", type=GIVEN, metavar="NAME", help="Only caches (and images) of this manifest."
)
@click.option(
    "--older-than", type=GIVEN, metavar="DURATION", help="Only caches older than this (2h, 3d)."
)
@click.option("--state", type=click.Choice(["live", "archived"]), help="Only caches in this state.")
@click.option(
    "--to", type=GIVEN, metavar="S3_URL", help="Where --archive writes (s3://BUCKET/PREFIX)."
)
@click.option(
    "--hook", "hook_names", multiple=True, type=GIVEN, metavar="NAME", help="Attach hooks/NAME."
)
@json_option
@click.pass_context
def teardown(
    ctx: click.Context,
    cache_ids: tuple[str, ...],
    archive_first: bool,
    with_content: bool,
    dry_run: bool,
    yes: bool,
    images: bool,
    drop_withheld: bool,
    manifest: str | None,
    older_than: str | None,
    state: str | None,
    to: str | None,
    hook_names: tuple[str, ...],
    as_json: bool,
) -> None:
    """Remove boot caches whose archive verifies in S3 now; kept ones are shown with why."""
    from lifecycle.commands import teardown as verb
    from lifecycle.table import human_bytes
    from lifecycle.teardown.report import plan_json, plan_text

    options = verb.TeardownOptions(
        cache_ids, archive_first, with_content, dry_run, images, manifest, older_than, state, to,
        hook_names, drop_withheld,
    )  # fmt: skip

    def show(plan: TeardownPlan) -> None:
        if not as_json:
            click.echo(plan_text(plan, dry_run=dry_run), nl=False)

    def agree(plan: TeardownPlan) -> None:
        if yes:
            return
        if not sys.stdin.isatty():
            if as_json:
                click.echo(json.dumps({"plan": plan_json(plan), "result": None}, indent=2))
            raise LifecycleError("nothing removed: no terminal to confirm on; pass --yes")
        question = f"remove {len(plan.removing)} caches ({human_bytes(plan.bytes_to_free)})?"
        click.confirm(question, default=False, abort=True, err=True)

    report = verb.run(_context(ctx), options, show=show, agree=agree)
    _answer(ctx, report, verb.render, as_json)


@cli.command()
@click.option("--remote", is_flag=True, help="Collect in the archive (the only kind there is).")
@click.option(
    "--from", "source", type=GIVEN, metavar="S3_URL",
    help="The archive (default: LIFECYCLE_ARCHIVE).",
)  # fmt: skip
@click.option(
    "--keep-last", type=int, metavar="N", help="Keep each cache's N newest versions (trees)."
)
@click.option(
    "--older-than", type=GIVEN, metavar="DURATION", help="Remove only what is older (3d, 2w)."
)
@click.option(
    "--grace", type=GIVEN, metavar="DURATION", default="1h", show_default=True,
    help="Never remove what was written this recently (another host may be archiving).",
)  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the plan; remove nothing.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_context
def gc(
    ctx: click.Context,
    remote: bool,
    source: str | None,
    keep_last: int | None,
    older_than: str | None,
    grace: str,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Remove from an archive every object no kept record needs; never what is behind a pinned
    result. The plan is shown first; a stopped run is completed by the next."""
    from lifecycle.commands import gc as verb
    from lifecycle.teardown.plan import parse_duration

    if not remote:
        raise click.UsageError("only `gc --remote` exists: teardown removes this host's caches")
    options = verb.GcOptions(
        source, keep_last,
        parse_duration(older_than, "--older-than") if older_than is not None else None,
        parse_duration(grace, "--grace"), dry_run,
    )  # fmt: skip

    def show(report: verb.GcReport) -> None:
        if not as_json:
            click.echo(verb.plan_text(report), nl=False)

    def agree(report: verb.GcReport) -> None:
        if yes:
            return
        if not sys.stdin.isatty():
            if as_json:
                click.echo(json.dumps(report.to_json(), indent=2))
            raise LifecycleError("nothing removed: no terminal to confirm on; pass --yes")
        count = len(report.plan.remove)
        click.confirm(f"remove {count} objects from {report.location}?", abort=True, err=True)

    report = verb.run(_context(ctx), options, verb.Consent(show, agree))
    _answer(ctx, report, verb.render, as_json)


@cli.command()
@click.argument("target", metavar="CACHE|RESULT")
@click.option(
    "--reason", help="Why it is kept.", show_default="pinned by hand; for RESULT: result <id>"
)
@click.option(
    "--to", metavar="S3_URL", help="Pin a RESULT in this archive too (default: LIFECYCLE_ARCHIVE)."
)
@json_option
@click.pass_context
def pin(ctx: click.Context, target: str, reason: str | None, to: str | None, as_json: bool) -> None:
    """Make CACHE (or every cache behind RESULT) a GC root: teardown keeps it until unpinned.

    A pin is this host's: it keeps the caches still here and is kept in this host's ledger.
    """
    from lifecycle.commands import pin as verb

    _answer(ctx, verb.run_pin(_context(ctx), target, reason, to), verb.render, as_json)


@cli.command()
@click.argument("target", metavar="CACHE|RESULT", type=GIVEN)
@click.option("--reason", type=GIVEN, help="Remove only the pin with this reason.")
@click.option("--to", type=GIVEN, metavar="S3_URL", help="Unpin a RESULT in this archive too.")
@json_option
@click.pass_context
def unpin(
    ctx: click.Context, target: str, reason: str | None, to: str | None, as_json: bool
) -> None:
    """Remove CACHE's pins (or the one with --reason); teardown may then remove it.

    For RESULT, only the pins that result put on its caches come off; other pins stay.
    """
    from lifecycle.commands import pin as verb

    _answer(ctx, verb.run_unpin(_context(ctx), target, reason, to), verb.render, as_json)


@cli.command()
@click.argument("cache_ids", nargs=-1, metavar="[CACHE]...")
@click.option("--all", "every", is_flag=True, help="Every live cache; re-verify archived ones.")
@click.option("--with-content", is_flag=True, help="Archive the cache's files too (restorable).")
@click.option("--to", metavar="S3_URL", help="Archive location (default: LIFECYCLE_ARCHIVE).")
@click.option("--dry-run", is_flag=True, help="Show what would be uploaded; write nothing.")
@json_option
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
    from lifecycle.commands import archive as verb

    report = verb.run_archive(
        _context(ctx), cache_ids, every=every, with_content=with_content, to=to, dry_run=dry_run
    )
    if report is not None:  # None: nothing is recorded on this host (a note said so)
        _answer(ctx, report, verb.render_archive, as_json)


@cli.command()
@click.argument("target", metavar="CACHE[@TREE]", required=False)
@click.option("--from", "source", metavar="S3_URL", help="Archive location (as for archive --to).")
@click.option(
    "--best",
    metavar="MANIFEST",
    help="For each cache of MANIFEST, the newest complete version a boot here would reuse.",
)
@click.option("--cache", "cache_name", metavar="NAME", help="With --best: only this cache.")
@click.option("--file", "file_path", metavar="PATH", help="Only this file of the cache...")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="...written to this new file (nothing else is downloaded; the ledger is untouched).",
)
@click.option(
    "--into",
    type=click.Path(file_okay=False, path_type=Path),
    help="Rebuild CACHE[@TREE] in this new dir instead, beside the cache (which is untouched).",
)
@json_option
@click.pass_context
def restore(
    ctx: click.Context,
    target: str | None,
    source: str | None,
    best: str | None,
    cache_name: str | None,
    file_path: str | None,
    output: Path | None,
    into: Path | None,
    as_json: bool,
) -> None:
    """Rebuild CACHE's dir from an archived version's files (the newest, or the one of TREE, a
    tree digest), verified, and mark it live; or with --into DIR, in a new dir beside it; or
    with --best, what a boot here would reuse; or with --file PATH --output FILE, one file."""
    from lifecycle.commands import restore as verb

    if (target is None) == (best is None) or (cache_name and not best):
        raise click.UsageError("give CACHE[@TREE], or --best MANIFEST [--cache NAME]")
    if (file_path is None) != (output is None) or (file_path and target is None):
        raise click.UsageError("--file PATH goes with --output FILE and CACHE[@TREE]")
    if into is not None and (target is None or file_path is not None):
        raise click.UsageError("--into DIR goes with CACHE[@TREE] alone")
    if file_path is not None and output is not None and target is not None:
        single = verb.run_restore_file(_context(ctx), target, source, file_path, output)
        _answer(ctx, single, verb.render_file, as_json)
    if best is not None:
        found = verb.run_best(_context(ctx), best, cache_name, source)
        _answer(ctx, found, verb.render_best, as_json)
    assert target is not None
    report = verb.run_restore(_context(ctx), target, source, into)
    _answer(ctx, report, verb.render_restore, as_json)


@cli.command()
@click.option(
    "--record",
    "record_kind",
    type=click.Choice(sorted(RECORD_KINDS)),
    help="The JSON Schema of an archive record format (or a format's full name) instead.",
)
def schema(record_kind: str | None) -> None:
    """Print the manifest JSON Schema (for editors' YAML language servers), or a record's."""
    from lifecycle.commands.schema import manifest_json_schema, record_json_schema

    schema = record_json_schema(record_kind) if record_kind else manifest_json_schema()
    click.echo(json.dumps(schema, indent=2))


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
@json_option
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
    from lifecycle.commands import port as verb
    from lifecycle.port.plan import PortFlags

    flags = PortFlags(dry_run, keep_going, branch, release, allow_dirty, force)
    options = verb.PortOptions(old, new, resume, abort, flags)
    _answer(ctx, verb.run(_context(ctx), options, Path.cwd()), verb.render, as_json)


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
@json_option
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
    from lifecycle.commands import result as verb
    from lifecycle.results.add import ResultRequest
    from lifecycle.results.model import parse_metric

    request = ResultRequest(
        boot_id,
        name,
        status,
        metrics=dict(parse_metric(text) for text in metrics),
        note=note,
        document=verb.read_result_file(document) if document else None,
        document_where=str(document),
    )
    report = verb.run_add(_context(ctx), request, to=to)
    _answer(ctx, report, verb.render_add, as_json)


@cli.command("results")
@_listing_options("pass, fail, inconclusive")
@json_option
@click.pass_context
def results_list(ctx: click.Context, /, source: str | None, as_json: bool, **filters: Any) -> None:
    """List results: name, status, boot, metrics, archived; instrumented ones are flagged; with
    --from, every result an archive holds."""
    from lifecycle.commands import result as verb

    if source is not None:
        found = verb.run_archived(_context(ctx), source, _filters(filters))
        _answer(ctx, found, verb.render_archived, as_json)
    _answer(ctx, verb.run_list(_context(ctx), _filters(filters)), verb.render_list, as_json)


@cli.group("audit")
def audit_group() -> None:
    """Which caches, image, manifest and patches stand behind a result; what stands on a cache."""


@audit_group.command("result")
@click.argument("result_id", metavar="RESULT")
@archive_only_option
@click.option(
    "--provenance",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the chain as an in-toto Statement v1 to this file.",
)
@json_option
@click.pass_context
def audit_result(
    ctx: click.Context, result_id: str, source: str | None, provenance: Path | None, as_json: bool
) -> None:
    """The chain: result, boot, caches, image, manifest, patches."""
    from lifecycle.commands import audit as verb

    report = verb.run_result(_context(ctx), result_id, source, provenance)
    _answer(ctx, report, verb.render_result, as_json)


@audit_group.command("cache")
@click.argument("cache_id", metavar="CACHE")
@archive_only_option
@json_option
@click.pass_context
def audit_cache(ctx: click.Context, cache_id: str, source: str | None, as_json: bool) -> None:
    """Every boot that used CACHE and every result that stands on it."""
    from lifecycle.commands import audit as verb

    _answer(ctx, verb.run_cache(_context(ctx), cache_id, source), verb.render_cache, as_json)


@cli.command()
@click.argument("plan", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--dry-run", is_flag=True, help="Show the cells in order; boot nothing, run no acting hook."
)
@click.option(
    "--rerun",
    multiple=True,
    type=GIVEN,
    metavar="CELL",
    help="Run this cell again (a pattern: 'demo/0.2:batch:*').",
)
@click.option(
    "--new", is_flag=True, help="A new night, even if this plan's last one did not finish."
)
@click.option(
    "--recover", is_flag=True, help="Bring production back wherever a night left it down."
)
@click.option(
    "--to", type=GIVEN, metavar="S3_URL", help="Archive location (default: LIFECYCLE_ARCHIVE)."
)
@json_option
@click.pass_context
def night(
    ctx: click.Context,
    plan: Path | None,
    dry_run: bool,
    rerun: tuple[str, ...],
    new: bool,
    recover: bool,
    to: str | None,
    as_json: bool,
) -> None:
    """Run the acceptance night PLAN: every cell a recorded boot with its results, production
    down for the night and always brought back, the ladders' values written, the evidence
    archived; resumes where a stopped night left off.

    Exit 0 when every pin passes and every ladder wrote its value, 1 otherwise.
    """
    from lifecycle.commands import night as verb

    options = verb.NightOptions(plan, dry_run, rerun, new, recover, to)
    _answer(ctx, verb.run(_context(ctx), options), verb.render, as_json)


@cli.command()
@click.argument("version")
@click.argument("ladder", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--revalidate", is_flag=True, help="Measure each carried value again by its recorded ladder."
)
@click.option("--dry-run", is_flag=True, help="Show the rungs; boot nothing.")
@click.option(
    "--new", is_flag=True, help="Start over, even if this ladder's last run did not finish."
)
@click.option("--to", metavar="S3_URL", help="Archive location (default: LIFECYCLE_ARCHIVE).")
@json_option
@click.pass_context
def tune(
    ctx: click.Context,
    version: str,
    ladder: Path | None,
    revalidate: bool,
    dry_run: bool,
    new: bool,
    to: str | None,
    as_json: bool,
) -> None:
    """Climb a LADDER of a tuned engine argument on VERSION: predictions registered first,
    every rung cold and warm at a forced shape, the highest value whose margin clears the floor
    in both written as validated. --revalidate re-measures carried values instead.

    Exit 0 when a value was written, 1 when none clears or a new value is proposed.
    """
    from lifecycle.commands import night as night_verb
    from lifecycle.commands import tune as verb

    options = verb.TuneOptions(version, ladder, revalidate, dry_run, new, to)
    _answer(ctx, verb.run(_context(ctx), options), night_verb.render, as_json)


@cli.command()
@click.argument("target", metavar="CACHE[@TREE]|RESULT")
@archive_only_option
@click.option(
    "--all-versions", "every", is_flag=True,
    help="Every version and boot record, not only those needed now.",
)  # fmt: skip
@json_option
@click.pass_context
def verify(ctx: click.Context, target: str, source: str | None, every: bool, as_json: bool) -> None:
    """Hash the live cache and the archived objects needed now again; name whatever differs.
    What a gc removed by rule is reported as collected, older versions as history.

    Exit 1 when anything needed differs, 3 when the archive cannot be reached.
    """
    from lifecycle.commands import verify as verb

    _answer(ctx, verb.run(_context(ctx), target, source, every), verb.render, as_json)


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
    _exit(code if isinstance(code, int) else 0)


def _exit(code: int) -> NoReturn:
    """Exit with `code` after what Python's exit does that anyone sees (its exit handlers, the
    flush of stdout and stderr), but without its teardown: clearing every module and garbage
    collecting all they made (pydantic's schemas, the docker SDK) costs ~55 ms after a boot,
    and frees memory the kernel takes back at once. Everything lifecycle keeps was closed,
    synced and committed before; a thread still running (none should be) gets Python's own
    exit, which waits for it."""
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: Python's exit says so, and sets the status
        sys.exit(code)
    os._exit(code)
