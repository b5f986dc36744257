"""`lifecycle port`: move a manifest's patch series to the next upstream release."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import EXIT_OK, LifecycleError
from lifecycle.port import session
from lifecycle.port.outcome import PatchOutcome, PortReport, PortStatus
from lifecycle.port.plan import PortFlags, PortRequest
from lifecycle.proc import CommandFailed
from lifecycle.report import Report
from lifecycle.table import lines_text
from lifecycle.table import render as table

_STOPPED = (PatchOutcome.CONFLICT, PatchOutcome.BLOCKED_BY)


class PortFailed(LifecycleError):
    """git failed in a way a port does not expect (exit 2: exit 1 means conflicts pending)."""


@dataclass(frozen=True)
class PortCommandReport(Report):
    """A port's report (started, continued, or computed in a dry run), or an abort's message."""

    FORMAT: ClassVar[str] = "lifecycle-port/1"
    report: PortReport | None
    aborted: str | None = None
    kept: Path | None = None  # where an abort kept the worktree's edits

    @property
    def exit_code(self) -> int:
        return self.report.exit_code if self.report is not None else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        if self.report is None:
            kept = str(self.kept) if self.kept else None
            return {"format": self.FORMAT, "aborted": True, "message": self.aborted, "kept": kept}
        return {"format": self.FORMAT, **self.report.to_json()}

    def text(self) -> str:
        """The port's human self, or what an abort removed."""
        if self.report is None:
            return f"{self.aborted}\n"
        return render_text(self.report)


def run(ctx: Context, options: verbs.Port) -> PortCommandReport:
    """Start a port (or only compute its report, with `dry_run`); or, run from the current
    dir, continue the stopped one (its worktree is the resolution) or abort it (a line saying
    what went)."""
    home, cwd = ctx.home, Path.cwd()
    flags = PortFlags(
        options.dry_run, options.keep_going, options.branch, options.release,
        options.allow_dirty, options.force,
    )  # fmt: skip
    if options.resume or options.abort:
        # --abort may be tried first (--dry-run); --continue writes what the port would.
        asked = replace(flags, dry_run=False) if options.abort else flags
        others = options.old or options.new or asked != PortFlags()
        if (options.resume and options.abort) or others:
            raise LifecycleError(
                "--continue and --abort take no other arguments or options (--abort: --dry-run)"
            )
        with _git_failures():
            stopped = session.locate(ctx.manifests_dir, home, cwd)
            if options.abort:
                aborted = session.abort(stopped, home, dry_run=options.dry_run)
                return PortCommandReport(None, *aborted)
            return PortCommandReport(session.resume(stopped, home, ctx.checkpoint()))
    if not (options.old and options.new):
        raise LifecycleError("give OLD and NEW (e.g. `lifecycle port 0.30 0.31`)")
    request = PortRequest(ctx.manifests_dir, options.old, options.new, home, flags, ctx.environ)
    with _git_failures():
        return PortCommandReport(session.start(request, ctx.checkpoint()))


@contextmanager
def _git_failures() -> Iterator[None]:
    try:
        yield
    except CommandFailed as exc:
        raise PortFailed(str(exc)) from exc


def render_text(report: PortReport) -> str:
    """The human report: one row per patch, then pins, tuned values and where things are."""
    # The tables escape their cells; every other line holds file names, git's hints and
    # warnings, so it is made one line each by lines_text.
    head = [
        f"port {report.old_ref} -> {report.new_ref} "
        f"({report.old.tag} {report.old.commit[:12]} -> {report.new.tag} {report.new.commit[:12]})",
        "",
    ]
    rows = [(r.file, r.outcome.value, r.detail()) for r in report.results]
    text = lines_text(head) + table(["PATCH", "OUTCOME", "EVIDENCE"], rows)
    text += lines_text(
        f"  {result.file}: hint: {result.conflict.hint}"
        for result in report.results
        if result.outcome is PatchOutcome.CONFLICT and result.conflict and result.conflict.hint
    )
    if report.pins:
        pins = [
            (p.name + (" (!)" if p.flagged else ""), p.old, p.new, p.source) for p in report.pins
        ]
        text += "\n" + table(["PIN", "OLD", "NEW", "FROM"], pins)
    lines: list[str] = []
    carried = {n: f.origin for n, f in report.tuned.items() if f.status == "carried"}
    kept = [n for n, f in report.tuned.items() if f.status == "validated"]
    if carried:
        lines += ["", f"tuned values carried, NOT re-validated on {report.new.version}:"]
        lines += [f"  {name} (measured on {origin})" for name, origin in carried.items()]
    if kept:
        lines += ["", f"tuned values {report.new_ref} had validated, kept: {', '.join(kept)}"]
    lines += [f"warning: {w}" for w in report.warnings]
    lines.append("")
    lines += _where(report)
    return text + lines_text(lines)


def _where(report: PortReport) -> list[str]:
    if report.status is PortStatus.CONFLICTS_PENDING:
        waiting = [r.file for r in report.results if r.outcome in _STOPPED]
        untried = [r.file for r in report.results if r.outcome is PatchOutcome.PENDING]
        lines = [f"conflicts pending: {', '.join(waiting)}"]
        lines += [f"not tried yet: {', '.join(untried)}"] if untried else []
        if report.dry_run:
            return [*lines, "dry run: nothing was written"]
        current = next(r for r in report.results if r.outcome is PatchOutcome.CONFLICT)
        assert current.conflict is not None
        files = ", ".join(f"{report.subdir}/{f.path}" for f in current.conflict.files)
        return [
            *lines,
            f"resolve {current.file} in {report.worktree}: {files} (edit them; keeping "
            "upstream's side drops the patch), then `lifecycle port --continue`; or "
            "`lifecycle port --abort` to restore everything",
        ]
    done = [f"new manifest digest sha256:{report.digest}"]
    if report.dry_run:
        return [
            *done,
            f"dry run: nothing was written (would commit {len(report.files)} files "
            f"on {report.branch or 'the port branch'})",
        ]
    return [
        *done,
        f"committed on branch {report.branch} at {report.commit}:",
        *(f"  {name}" for name in report.files),
    ]
