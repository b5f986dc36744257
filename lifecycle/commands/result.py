"""`lifecycle result add` and `lifecycle results`: record what a boot did, list what was found.

A result is written to the ledger first (that is the commit); then, when an archive location
is configured (--to, LIFECYCLE_ARCHIVE, `archive:` in lifecycle.yaml), it is archived at once,
with whichever of its caches need archiving first for its chain to be whole in S3. Without a
location, or if S3 fails, the next `lifecycle archive` takes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.archive.config import optional_location
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import UNREAD_PIN
from lifecycle.archive.store import ArchiveError
from lifecycle.commands import verbs
from lifecycle.commands.boot import HookEntry
from lifecycle.commands.context import Context
from lifecycle.commands.filters import Facts, Filters, open_archive
from lifecycle.errors import EXIT_OK, read_given
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import all_boots, boot_arches, used_pairs
from lifecycle.ledger.removal import pins
from lifecycle.ledger.results import (
    ResultArchiveRecord,
    ResultRecord,
    all_results,
    result_archives,
)
from lifecycle.report import Listing, Report, Row, plain
from lifecycle.results.archive import ArchivedResult, archived_results, publish_result
from lifecycle.results.model import (
    MAX_DOCUMENT_BYTES,
    STATUSES,
    ResultRequest,
    Scalar,
    add_result,
    canonical_result,
    is_pin_of,
    metrics_text,
    parse_metric,
    pin_reason,
    read_document,
    refuse_secrets,
)
from lifecycle.table import lines_text
from lifecycle.withheld import secrets_on_host

METRICS_WIDTH = 40  # characters of `k=v, …` in the table; --json has them all


def read_result_file(path: Path) -> bytes:
    """`--file`'s bytes, checked as a result document before the ledger is opened: a regular
    file (not /dev/zero or a FIFO, which would never end) of at most 16 MiB, one JSON object."""
    where = f"--file {path}"
    data = read_given(path, where, MAX_DOCUMENT_BYTES)
    read_document(data, where)
    return data


@dataclass(frozen=True)
class ResultView:
    """One result as `result add` and `results` show it."""

    id: str
    boot_id: str
    name: str
    status: str
    metrics: dict[str, Scalar]
    note: str | None
    source: str
    instrumented: bool
    document: dict[str, Any] | None  # {sha256, size} of the attached JSON
    created_at: str
    digest: str
    manifest_name: str
    profile: str
    hooks: tuple[HookEntry, ...]
    document_path: str | None
    caches: tuple[str, ...]
    pinned: tuple[str, ...]  # the caches behind it that this result pinned
    archives: tuple[ResultArchiveRecord, ...]  # where its record is in S3, verified


@dataclass(frozen=True)
class ResultAddReport(Report):
    """A result recorded, and archived when a location was set (else why not)."""

    FORMAT: ClassVar[str] = "lifecycle-result/1"
    result: ResultView
    not_archived: str | None = None  # why it was recorded but not archived
    not_archived_exit: int = EXIT_OK  # 1, or 3 when S3 could not be reached

    @property
    def exit_code(self) -> int:
        return self.not_archived_exit

    @property
    def notes(self) -> tuple[str, ...]:
        return (f"lifecycle: {self.not_archived}",) if self.not_archived else ()

    def to_json(self) -> dict[str, Any]:
        return {"format": self.FORMAT, **plain(self.result), "not_archived": self.not_archived}

    def text(self) -> str:
        """The result recorded: its verdict, digest, what it is instrumented by, where archived."""
        r = self.result
        lines = [
            f"result {r.id} {r.name!r}: {r.status} on boot {r.boot_id}"
            f" ({r.manifest_name}, {r.profile})",
            f"  digest sha256:{r.digest}",
        ]
        if r.instrumented:
            hooks = ", ".join(h.name for h in r.hooks if h.observing)
            lines.append(
                f"  INSTRUMENTED: the boot ran with observing hook {hooks}, which can change what"
                " it observes; this is a result of the engine plus the hook"
            )
        if r.metrics:
            lines.append(f"  metrics: {metrics_text(r.metrics, None)}")
        for archive in r.archives:
            bucket = ArchiveLocation.parse(archive.location).bucket
            lines.append(f"  archived: s3://{bucket}/{archive.record_key}")
        return lines_text(lines)


def add(ctx: Context, asked: verbs.ResultAdd) -> ResultAddReport:
    """Record the result; archive it when a location is set (--to, LIFECYCLE_ARCHIVE,
    lifecycle.yaml)."""
    document = asked.document
    request = ResultRequest(
        asked.boot_id,
        asked.name,
        asked.status,
        metrics=dict(parse_metric(text) for text in asked.metrics),
        note=asked.note,
        document=read_result_file(document) if document else None,
        document_where=str(document),
    )
    where = optional_location(asked.to, ctx.environ, ctx.project)
    with ctx.ledger(create=False, missing=f"unknown boot {request.boot_id!r}") as ledger:
        refuse_secrets(request, secrets_on_host(ledger, ctx.environ))
        result = add_result(ledger, request, ctx.now())
        problem = None
        if where is not None:
            try:
                publish_result(
                    ledger,
                    ctx.home,
                    ctx.s3(),
                    where,
                    result,
                    host_env=ctx.environ,
                    progress=ctx.say,
                )
            except ArchiveError as exc:
                problem = exc
        [view] = describe(ledger, [result])
    if problem is None:
        return ResultAddReport(view)
    return ResultAddReport(view, str(problem), problem.exit_code)


RESULT_COLUMNS = "RESULT CREATED NAME STATUS BOOT MANIFEST METRICS ARCHIVED FLAGS"


def _result_cells(r: ResultView) -> list[object]:
    """A result's row; instrumented and pinned ones are flagged on it."""
    return [
        r.id, r.created_at, r.name, r.status, r.boot_id, r.manifest_name,
        metrics_text(r.metrics, METRICS_WIDTH), "yes" if r.archives else "no",
        flags(r.instrumented, bool(r.pinned)),
    ]  # fmt: skip


ARCHIVED_RESULT_COLUMNS = "RESULT CREATED NAME STATUS BOOT MANIFEST HOST METRICS FLAGS"


def _archived_result_cells(listed: ListedArchivedResult) -> list[object]:
    found, result = listed.result, listed.result.result
    return [
        result["id"], result["created_at"], result["name"], result["status"], result["boot_id"],
        found.manifest_name, found.host, metrics_text(result["metrics"], METRICS_WIDTH),
        flags(bool(result["instrumented"]), bool(found.pins)),
    ]  # fmt: skip


def results(ctx: Context, request: verbs.Results) -> Listing:
    """`lifecycle results`: this host's, or with --from an archive's."""
    filters = Filters.of(request)
    if request.source is not None:
        return run_archived(ctx, request.source, filters)
    filters.check_state(STATUSES, "results")
    if not ctx.recorded():
        return Listing("lifecycle-results/1", "results", (), RESULT_COLUMNS, _result_cells)
    now = ctx.now()
    with ctx.ledger(create=False) as ledger:
        arches = boot_arches(ledger)
        views = []
        for view in describe(ledger, all_results(ledger)):
            facts = {
                "manifest": view.manifest_name,
                "arch": ", ".join(arches.get(view.boot_id, [])),
            }
            if filters.keeps(now, **facts, state=view.status, at=view.created_at):
                views.append(view)
        rows = tuple(views)
        return Listing("lifecycle-results/1", "results", rows, RESULT_COLUMNS, _result_cells)


@dataclass(frozen=True)
class ListedArchivedResult(Row):
    """One result an archive holds, as `lifecycle results --from` lists it."""

    result: ArchivedResult

    def to_json(self) -> dict[str, Any]:
        """The canonical result, then what the archive adds: its digest, what it ran, who
        archived it, its team pins."""
        facts: dict[str, Any] = plain(self.result)
        return {**facts.pop("result"), **facts}


def run_archived(ctx: Context, source: str, filters: Filters) -> Listing:
    """Every result the archive at `source` holds, whichever host archived it."""
    store, now = open_archive(ctx, source, filters, STATUSES, "results")
    found, unread = archived_results(store)
    kept = filters.select(
        now,
        found,
        lambda r: Facts(r.manifest_name, r.arch, r.result["status"], r.result["created_at"]),
    )
    return Listing(
        "lifecycle-archived-results/1", "results", tuple(map(ListedArchivedResult, kept)),
        ARCHIVED_RESULT_COLUMNS, _archived_result_cells, store.location.url(), _unread_pins,
        unread,
    )  # fmt: skip


def _unread_pins(listed: ListedArchivedResult) -> str | None:
    """A line under the table for a result pinned by a pin that cannot be read."""
    found = listed.result
    unread = [pin for pin in found.pins if pin.startswith(UNREAD_PIN)]
    return "\n".join(f"{found.result['id']}: pinned by {pin}" for pin in unread) or None


def describe(ledger: Ledger, results: list[ResultRecord]) -> list[ResultView]:
    """Results with their boots' manifest, profile and hooks, their caches, pins and archives;
    the ledger is read once for all of them."""
    boots = {boot.id: boot for boot in all_boots(ledger)}
    caches: dict[str, list[str]] = {}
    for boot_id, cache_id in used_pairs(ledger):  # not every use's whole row: ~80,000 a year
        caches.setdefault(boot_id, []).append(cache_id)
    archives: dict[str, list[ResultArchiveRecord]] = {}
    for archive in result_archives(ledger):
        archives.setdefault(archive.result_id, []).append(archive)
    held = pins(ledger)
    views = []
    for result in results:
        boot, mine = boots[result.boot_id], pin_reason(result.id)
        used = tuple(caches.get(boot.id, ()))
        pinned = tuple(sorted(c for c in used if any(is_pin_of(r, mine) for r in held.get(c, []))))
        views.append(
            ResultView(
                **canonical_result(result),
                digest=result.digest,
                manifest_name=boot.manifest_name,
                profile=boot.profile,
                hooks=tuple(HookEntry(**hook) for hook in json.loads(boot.hooks)),
                document_path=result.document_path,
                caches=used,
                pinned=pinned,
                archives=tuple(archives.get(result.id, ())),
            )
        )
    return views


def flags(instrumented: bool, pinned: bool) -> str:
    """INSTRUMENTED (a result of the engine plus an observing hook), pinned."""
    return " ".join(["INSTRUMENTED"] * instrumented + ["pinned"] * pinned)
