"""The `lifecycle` command line: parse, call lifecycle.commands.<verb>, print, exit.

Verb modules are imported inside each verb so that `lifecycle --help` loads neither
pydantic nor docker nor boto3: start-up time is paid only by the verb that needs it.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lifecycle import __version__
from lifecycle.errors import LifecycleError

if TYPE_CHECKING:
    from lifecycle.boot.run import BootRequest
    from lifecycle.ledger import Ledger

EXIT_USAGE = 2


class _Group(click.Group):
    """Renders LifecycleError as its lines on stderr, exit 2; the traceback only with --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LifecycleError as exc:
            if ctx.params.get("debug"):
                traceback.print_exc()
            for line in exc.lines():
                click.echo(line, err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            # Interrupted (from a hook session) knows its signal: exit 130 or 143 like a shell.
            click.echo(f"lifecycle: {exc or 'interrupted'}; what was done is recorded", err=True)
            ctx.exit(getattr(exc, "exit_code", 130))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
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
                    "problems": [p.render() for p in r.problems],
                }
                for r in results
            ]
        )
    for result in results:
        for problem in result.problems:
            click.echo(problem.render(), err=True)
        if not result.problems and not as_json:
            click.echo(f"ok {result.file} sha256:{result.digest}")
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

    with _ledger() as ledger:
        report = run(
            plan,
            connect(os.environ),
            ledger,
            force=force,
            push=push,
            on_line=lambda line: click.echo(f"  | {line}", err=True),
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
@click.option("--timeout", type=float, help="Stop the engine after this many seconds.")
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
            lambda line: click.echo(f"  | {line}", err=True),
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

    with _ledger() as ledger:
        rows = list_caches(ledger, datetime.now(UTC))
    _emit_json(rows) if as_json else click.echo(caches_table(rows), nl=False)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def boots(as_json: bool) -> None:
    """List boots: when, which profile, outcome, caches cold/warm, hooks, instrumented."""
    from lifecycle.commands.listing import boots_table, list_boots

    with _ledger() as ledger:
        rows = list_boots(ledger)
    _emit_json(rows) if as_json else click.echo(boots_table(rows), nl=False)


@contextmanager
def _ledger() -> Iterator[Ledger]:
    from lifecycle.ledger import Ledger, default_home

    ledger = Ledger.open(default_home(dict(os.environ)))
    try:
        yield ledger
    finally:
        ledger.close()


@cli.command()
def schema() -> None:
    """Print the manifest JSON Schema (for editors' YAML language servers)."""
    from lifecycle.commands.schema import manifest_json_schema

    _emit_json(manifest_json_schema())


def main() -> None:
    """Console-script entry point."""
    # Click maps its own usage errors to exit 2 already; LifecycleError is handled in _Group.
    cli.main(prog_name="lifecycle", auto_envvar_prefix=None)
