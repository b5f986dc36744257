"""`lifecycle result add`: record what a boot did (`lifecycle results` lists them:
lifecycle.commands.listing).

A result is written to the ledger first (that is the commit); then, when an archive location
is configured (--to, LIFECYCLE_ARCHIVE, `archive:` in lifecycle.yaml), it is archived at once,
with whichever of its caches need archiving first for its chain to be whole in S3. Without a
location, or if S3 fails, the next `lifecycle archive` takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.archive.config import optional_location
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import ArchiveError
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.commands.listing import ResultView, describe
from lifecycle.errors import EXIT_OK, read_given
from lifecycle.report import Report, plain
from lifecycle.results.archive import publish_result
from lifecycle.results.model import (
    MAX_DOCUMENT_BYTES,
    ResultRequest,
    add_result,
    metrics_text,
    parse_metric,
    read_document,
    refuse_secrets,
)
from lifecycle.table import lines_text
from lifecycle.withheld import secrets_on_host


def read_result_file(path: Path) -> bytes:
    """`--file`'s bytes, checked as a result document before the ledger is opened: a regular
    file (not /dev/zero or a FIFO, which would never end) of at most 16 MiB, one JSON object."""
    where = f"--file {path}"
    data = read_given(path, where, MAX_DOCUMENT_BYTES)
    read_document(data, where)
    return data


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
