"""`lifecycle archive`: caches (and the results they complete) to the S3 archive."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.archive.config import resolve_location
from lifecycle.archive.run import ArchiveReport, NotAllArchived, archive_caches
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.commands.teardown import docker_if_it_answers, settle_dead
from lifecycle.errors import EXIT_NO, EXIT_OK, LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import all_caches, dead_boots
from lifecycle.report import Report
from lifecycle.results.archive import with_results
from lifecycle.table import human_bytes, lines_text


@dataclass(frozen=True)
class ArchiveRunReport(Report):
    """What one `lifecycle archive` did (or, in a dry run, would do), cache by cache."""

    FORMAT: ClassVar[str] = "lifecycle-archive/1"
    location: str  # s3://bucket/prefix
    dry_run: bool
    caches: tuple[ArchiveReport, ...]
    skipped: tuple[str, ...]  # caches --all left out, each with why
    failed: Mapping[str, str] = field(default_factory=dict)  # cache id -> why not archived

    @property
    def exit_code(self) -> int:
        return EXIT_NO if self.failed else EXIT_OK

    @property
    def totals(self) -> dict[str, int]:
        """The sums over every cache of the run."""
        sums = {
            key: sum(getattr(c, key) for c in self.caches)
            for key in ("blobs", "blobs_uploaded", "bytes_uploaded", "blobs_present")
        }
        return {"caches": len(self.caches), **sums}

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "failed": dict(self.failed), "totals": self.totals}

    def text(self) -> str:
        """A line per cache, then the summary line."""
        lines = [f"skipped {why}" for why in self.skipped]
        verb = "would upload" if self.dry_run else "uploaded"
        for cache in self.caches:
            state = "verified" if cache.verified else "not verified (dry run)"
            lines.append(
                f"{cache.cache_id}: {cache.blobs} blobs, {verb} {cache.blobs_uploaded}"
                f" ({human_bytes(cache.bytes_uploaded)}); {state}"
            )
        total = self.totals
        caches = f"{total['caches']} cache{'' if total['caches'] == 1 else 's'}"
        sent = human_bytes(total["bytes_uploaded"])
        if self.dry_run:
            lines.append(
                f"dry run, nothing written: {caches}, {total['blobs']} blobs,"
                f" {total['blobs_uploaded']} to upload ({sent}),"
                f" {total['blobs_present']} already there; {self.location}"
            )
        else:
            lines.append(
                f"archived {caches}: {total['blobs']} blobs, {total['blobs_uploaded']} new"
                f" ({sent} sent); verified; {self.location}"
            )
        lines += [f"NOT archived {cache_id}: {why}" for cache_id, why in self.failed.items()]
        return lines_text(lines)  # S3's errors


def check_selection(names: Sequence[str], every: bool) -> None:
    """Cache ids or --all, one of the two."""
    if bool(names) == every:
        raise LifecycleError("name the caches to archive, or pass --all (not both)")


def select_caches(ledger: Ledger, names: Sequence[str], every: bool) -> tuple[list[str], list[str]]:
    """(cache ids to archive, why others were skipped): the named ones, or with --all every
    live cache and every archived one (re-verified), less those a running boot holds."""
    if names:
        return list(dict.fromkeys(names)), []
    chosen, skipped = [], []
    for cache in reversed(all_caches(ledger)):  # oldest first
        if cache.state not in ("live", "archived"):
            continue
        if cache.in_use_by:
            skipped.append(f"{cache.id}: in use by boot {cache.in_use_by}")
        elif not Path(cache.host_path).is_dir():
            skipped.append(f"{cache.id}: missing (its dir {cache.host_path} is gone)")
        else:
            chosen.append(cache.id)
    return chosen, skipped


def run(ctx: Context, request: verbs.Archive) -> ArchiveRunReport:
    """Archive the selected caches (and the results they complete); in a home that has
    recorded nothing yet, none (and a note), its report `--json` too."""
    names, every, dry_run = request.cache_ids, request.every, request.dry_run
    location = resolve_location(request.to, ctx.environ, ctx.project)
    check_selection(names, every)
    client = ctx.s3()
    if not ctx.recorded(f"unknown cache {names[0]!r}" if names else None):
        return ArchiveRunReport(location.url(), dry_run, (), ())
    with ctx.ledger(create=False) as ledger:
        if not dry_run and dead_boots(ledger, ctx.home):
            # Their engines may run on, writing the caches this would archive: stopped first.
            docker, _ = docker_if_it_answers(ctx.environ)
            at = ctx.now().isoformat(timespec="seconds")
            for line in settle_dead(docker, ledger, ctx.home, at):
                ctx.say(line)
        cache_ids, skipped = select_caches(ledger, names, every)
        failed: Mapping[str, str] = {}
        try:
            archived = archive_caches(
                ledger, ctx.home, client, location, cache_ids, host_env=ctx.environ,
                with_content=request.with_content, dry_run=dry_run, progress=ctx.say,
            )  # fmt: skip
        except NotAllArchived as exc:  # the others are archived: their results go too
            archived, failed = exc.archived, exc.failed
        reports = with_results(ledger, client, location, archived, ctx.say, ctx.environ)
    return ArchiveRunReport(location.url(), dry_run, tuple(reports), tuple(skipped), failed)
