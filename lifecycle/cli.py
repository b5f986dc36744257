"""The `lifecycle` command line: parse, call lifecycle.commands.<verb>, print, exit.

Each verb's arguments and options are its request class in lifecycle.commands.verbs; the
click commands are built from those. A verb's function gets the Context (where things are,
how to reach the services) and the request, and returns a report: printed here (its `text`,
or `--json`), its notes on stderr, exit with its code. Nothing else happens here.

Verb modules are imported when their verb runs, so that `lifecycle --help` loads neither
pydantic nor docker nor boto3: start-up time is paid only by the verb that needs it.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from lifecycle import __version__
from lifecycle.commands.verbs import GROUPS, REQUIRED, TEXT, VERBS, GivenPath, Param, Request
from lifecycle.errors import EXIT_CODES, EXIT_INTERNAL, LifecycleError
from lifecycle.table import visible_lines

if TYPE_CHECKING:
    from lifecycle.commands.context import Context
    from lifecycle.home import Home
    from lifecycle.report import Report


EXIT_CLOSED_PIPE = 128 + 13  # as a shell tells a process SIGPIPE ended


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
                _print_traceback()
            from lifecycle.home import HomeUnusable

            if not isinstance(exc, HomeUnusable):  # else it says the same, as its cause
                _say_unreadable(ctx)
            for line in exc.lines():
                _stderr(line)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # Whoever read stdout went (`| head`): end as a shell's SIGPIPE death reads, 141,
            # not as a bug; Python's exit would try the closed pipe again, so it gets /dev/null.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(EXIT_CLOSED_PIPE)
        except KeyboardInterrupt as exc:
            # Interrupted (from a hook session) knows its signal: exit 130 or 143 like a shell.
            click.echo(f"lifecycle: {exc or 'interrupted'}; what was done is recorded", err=True)
            ctx.exit(getattr(exc, "exit_code", 130))
        except Exception as exc:  # the last resort: a bug, told in one line and a file
            if not ctx.params.get("debug"):
                _if_environment(ctx, exc)
            if ctx.params.get("debug"):
                _print_traceback()
                ctx.exit(EXIT_INTERNAL)
            _unexpected(exc, (ctx.obj or {}).get("home"))
            ctx.exit(EXIT_INTERNAL)


def _if_environment(ctx: click.Context, exc: Exception) -> None:
    """The host's state, not a bug, though no code before here expected it: a write finding the
    disk full (a traceback file would not fit either), dockerd no longer answering mid-command
    (a read timed out, the connection broke). One line, exit 3."""
    from lifecycle.dockerd import stopped_answering
    from lifecycle.errors import EXIT_ENVIRONMENT, DiskFull, no_room

    if isinstance(exc, OSError) and no_room(exc):
        full = DiskFull(exc.filename or "a file system this command writes to")
        _stderr(str(full))
        ctx.exit(full.exit_code)
    said = stopped_answering(exc, os.environ)
    if said:
        _stderr(f"lifecycle: {said}")
        ctx.exit(EXIT_ENVIRONMENT)


def _print_traceback() -> None:
    import traceback  # here: only --debug prints one, and it costs `--help` 7 ms

    traceback.print_exc()


def _stderr(line: str) -> None:
    """A line on stderr, with any secret of the environment's redacted."""
    from lifecycle.crash import known_secrets
    from lifecycle.redact import redact

    click.echo(_bounded(redact(line, known_secrets(os.environ))), err=True)


def _bounded(text: str) -> str:
    """`text` for stderr: made visible, each line clipped (after redaction: a clip may not cut
    a secret in two, leaving a piece redaction cannot recognise)."""
    from lifecycle.errors import clip_line

    return "\n".join(clip_line(line) for line in visible_lines(text).split("\n"))


def _unexpected(exc: Exception, home: Home | None) -> None:
    """One line; the traceback into the command's Home (made here if the bug came first)."""
    from lifecycle.crash import write_traceback
    from lifecycle.home import Home, default_home

    summary = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    try:
        home = home or Home(default_home(os.environ))
        where = f"traceback in {write_traceback(exc, home, os.environ)}"
    except OSError:
        where = "no traceback file could be written; rerun with --debug"
    _stderr(f"lifecycle: unexpected error (a bug): {summary}; {where}")


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
    type=GivenPath(file_okay=False, path_type=Path),
    envvar="LIFECYCLE_MANIFESTS",
    help="Directory of manifests/<version>/manifest.yaml (default: ./manifests, searched upward).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, manifests_dir: Path | None) -> None:
    """Build, boot, archive and port patched vLLM engines, keeping their JIT caches' evidence."""
    from lifecycle.home import Home, default_home

    if manifests_dir is not None:
        _check_manifests_dir(manifests_dir)
    home = Home(default_home(os.environ))  # the one Home of this command
    ctx.obj = {
        "debug": debug,
        "manifests_dir": manifests_dir or _find_manifests_dir(Path.cwd()),
        "home": home,
    }
    _warn_if_production_down(home, ctx.obj)


def _say_unreadable(ctx: click.Context) -> None:
    """Why the ledger could not be asked whether a night left production down, if so."""
    why = (ctx.find_root().obj or {}).get("unreadable")
    if why:
        _stderr(f"lifecycle: warning: cannot tell whether a night left production down: {why}")


def _warn_if_production_down(home: Home, obj: dict[str, Any]) -> None:
    """Whatever the verb: say so when a night left production down (a SIGKILL, a reboot, a
    failed up hook). Read-only. A ledger that cannot be read is said once the verb is done
    (`validate` needs no ledger), unless the verb failed on it, saying the same itself."""
    from lifecycle.home import HomeUnusable
    from lifecycle.ledger.nights import production_left_down_in

    if not home.root.is_dir():  # no night ran here; a verb that needs the home says so
        return
    try:
        events = production_left_down_in(home.root)
    except HomeUnusable as exc:
        obj["unreadable"] = str(exc)
        return
    if events:  # the wording needs the night package; the common case imports none of it
        from lifecycle.night.production import is_down
        from lifecycle.night.run import night_running

        running = night_running(home)
        for event in events:
            click.echo(f"lifecycle: {is_down(event, running)}", err=True)


def _check_manifests_dir(given: Path) -> None:
    """A --manifests no manifest can be found in (a name too long, a symlink loop) is a usage
    error here, once, rather than in whichever of the verb's probes meets it first."""
    from lifecycle.errors import path_fault, quoted

    fault = path_fault(given)
    if fault:
        raise click.BadParameter(f"{quoted(str(given))}: {fault}", param_hint="'--manifests'")


def _find_manifests_dir(start: Path) -> Path:
    for directory in (start, *start.parents):
        if (directory / "manifests").is_dir():
            return directory / "manifests"
    return start / "manifests"


def _context() -> Context:
    from lifecycle.commands.context import Context

    ask = _confirm if sys.stdin.isatty() else None
    obj = click.get_current_context().find_root().obj
    return Context(
        os.environ, obj["manifests_dir"], obj["home"], say=_say, note=_note, out=_out, ask=ask
    )


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
    click.echo(_bounded(f"lifecycle: {line}"), err=True)


def _out(text: str) -> None:
    click.echo(visible_lines(text), nl=False)  # a plan's text, before its confirmation


def _confirm(question: str) -> None:
    click.confirm(question, default=False, abort=True, err=True)


def _answer(ctx: click.Context, report: Report | None, as_json: bool) -> NoReturn:
    """Print the report (its text, or `--json`), its notes on stderr; exit its code. None: the
    verb printed its answer itself (a note said why there is no report)."""
    _say_unreadable(ctx)
    if report is None:
        ctx.exit(0)
    if as_json:
        for piece in report.json_text():  # JSON escapes what it holds
            click.echo(piece, nl=False)
        click.echo()
    else:
        # Records from a shared bucket, an engine's errors, a user's notes are in the text: none
        # may drive the terminal. A field's newline is escaped where the report makes its lines
        # (lifecycle.table.lines_text, a table's cells); here they are lifecycle's own.
        click.echo(visible_lines(report.text()), nl=False)
    for line in report.notes:
        click.echo(_bounded(line), err=True)
    ctx.exit(report.exit_code)


def _command(request: type[Request]) -> click.Command:
    """The click command of a verb, from its request's fields and docstring."""

    def callback(**given: Any) -> None:
        module, _, function = request.RUN.partition(":")
        verb = getattr(importlib.import_module(f"lifecycle.commands.{module}"), function)
        asked = request(**given)
        _answer(click.get_current_context(), verb(_context(), asked), asked.as_json)

    states = getattr(request, "STATES", "")
    params = [_parameter(param, states) for param in request.PARAMS.values()]
    name = request.VERB.rpartition(" ")[2]
    return click.Command(name, params=params, help=request.__doc__, callback=callback)


def _parameter(param: Param, states: str) -> click.Parameter:
    settings = {k: v for k, v in param.settings.items() if k != "argument"}
    many = param.kind.startswith("tuple[")
    if param.kind.startswith(("str", "tuple[str")):
        settings.setdefault("type", TEXT)
    if param.is_argument:
        required = param.default is REQUIRED
        nargs = -1 if many else 1
        return click.Argument([param.name], required=required and not many, nargs=nargs, **settings)
    if "help" in settings:
        settings["help"] = settings["help"].format(states=states)
    if param.kind == "bool":
        settings["is_flag"] = True
    elif param.kind.startswith("int"):
        settings.setdefault("type", int)
    elif param.kind.startswith("float"):
        settings.setdefault("type", float)
    flags = param.decls or (f"--{param.name.replace('_', '-')}",)
    return click.Option([*flags, param.name], default=param.default, multiple=many, **settings)


for _request in VERBS:
    _group_name, _, _ = _request.VERB.rpartition(" ")
    if _group_name and _group_name not in cli.commands:
        cli.add_command(click.Group(_group_name, help=GROUPS[_group_name]))
    _parent = cli.commands[_group_name] if _group_name else cli
    assert isinstance(_parent, click.Group)
    _parent.add_command(_command(_request))


def main() -> None:
    """Console-script entry point: click's usage errors as one line each, exit 2 (click would
    print the usage and a hint around it); LifecycleError is handled in _Group."""
    try:
        code = cli.main(prog_name="lifecycle", auto_envvar_prefix=None, standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "lifecycle"
        click.echo(_bounded(f"{where}: {exc.format_message()} (see '{where} -h')"), err=True)
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        code = 1
    _exit(code if isinstance(code, int) else 0)


def _no_collection_at_start(seconds: float = 1.0) -> None:
    """No cyclic garbage collection in a command's first second. Loading click, pydantic with
    the manifest models and the docker SDK makes a few hundred thousand objects, and each full
    collection they set off walks all of them again: ~30 ms of a 0.6 s warm boot. They are
    modules, classes and schemas, not garbage. A command that runs longer gets the collector
    back after the second, and it collects then whatever the start left (Mercurial turns the
    collector off around its big loads for the same reason)."""
    gc.disable()
    back = threading.Timer(seconds, gc.enable)
    back.daemon = True  # never waited for at exit (see _exit)
    back.start()


def _exit(code: int) -> NoReturn:
    """Exit with `code` after what Python's exit does that anyone sees (its exit handlers, the
    flush of stdout and stderr), but without its teardown: clearing every module and garbage
    collecting all they made (pydantic's schemas, the docker SDK) costs ~55 ms after a boot,
    and frees memory the kernel takes back at once. Everything lifecycle keeps was closed,
    synced and committed before; a thread still running (none should be) gets Python's own
    exit, which waits for it."""
    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # whoever read the output went before its end (`| head`)
        code = EXIT_CLOSED_PIPE
    except (OSError, ValueError):  # another failure: Python's exit says so, and sets the status
        sys.exit(code)
    os._exit(code)
