"""`lifecycle result add` and `lifecycle results`: record what a boot did, list what was found.

A result is written to the ledger first (that is the commit); then, when an archive location
is configured (--to, LIFECYCLE_ARCHIVE, `archive:` in lifecycle.yaml), it is archived at once,
with whichever of its caches need archiving first for its chain to be whole in S3. Without a
location, or if S3 fails, the next `lifecycle archive` takes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import ArchiveError
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import cache_uses
from lifecycle.ledger.pins import pins
from lifecycle.ledger.results import ResultRecord, all_results, result_archives
from lifecycle.results.add import ResultRequest, add_result, find_boot
from lifecycle.results.model import (
    canonical_result,
    is_pin_of,
    metrics_text,
    pin_reason,
    read_document,
)
from lifecycle.results.publish import publish_result
from lifecycle.table import render

METRICS_WIDTH = 40  # characters of `k=v, …` in the table; --json has them all
MAX_DOCUMENT_BYTES = 16 * 2**20  # a result document is metrics and notes, not data


def read_result_file(path: Path) -> bytes:
    """`--file`'s bytes, checked as a result document before the ledger is opened: a regular
    file (not /dev/zero or a FIFO, which would never end) of at most 16 MiB, one JSON object."""
    where = f"--file {path}"
    try:
        if not path.is_file():
            raise LifecycleError(f"{where}: not a regular file")
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise LifecycleError(f"{where}: larger than {MAX_DOCUMENT_BYTES // 2**20} MiB")
        data = path.read_bytes()
    except OSError as exc:
        raise LifecycleError(f"{where}: {exc.strerror or exc}") from None
    read_document(data, where)
    return data


def add(
    ledger: Ledger,
    request: ResultRequest,
    now: datetime,
    *,
    location: ArchiveLocation | None,
    client_for: Callable[[], Any],
    progress: Callable[[str], None],
) -> tuple[dict[str, Any], ArchiveError | None]:
    """Record the result, archive it if a location is set; (its report, why not archived)."""
    result = add_result(ledger, request, now)
    problem = None
    if location is not None:
        try:
            publish_result(ledger, client_for(), location, result, progress=progress)
        except ArchiveError as exc:
            problem = exc
    return describe(ledger, result), problem


def describe(ledger: Ledger, result: ResultRecord) -> dict[str, Any]:
    """A result as `results --json` and `result add --json` print it."""
    boot = find_boot(ledger, result.boot_id)
    caches = [u.cache_id for u in cache_uses(ledger, boot_id=boot.id)]
    pinned = pins(ledger)
    mine = pin_reason(result.id)
    return {
        **canonical_result(result),
        "digest": result.digest,
        "manifest_name": boot.manifest_name,
        "profile": boot.profile,
        "hooks": json.loads(boot.hooks),
        "document_path": result.document_path,
        "caches": caches,
        "pinned": sorted(c for c in caches if any(is_pin_of(r, mine) for r in pinned.get(c, []))),
        "archives": [
            {"location": a.location, "record_key": a.record_key, "record_sha256": a.record_sha256}
            for a in result_archives(ledger, result.id)
        ],
    }


def list_results(ledger: Ledger) -> list[dict[str, Any]]:
    """Every result, newest first."""
    return [describe(ledger, result) for result in all_results(ledger)]


def results_table(rows: list[dict[str, Any]]) -> str:
    """The human form of `lifecycle results`; instrumented results are flagged on their row."""
    return render(
        ["RESULT", "CREATED", "NAME", "STATUS", "BOOT", "MANIFEST", "METRICS", "ARCHIVED", "FLAGS"],
        [
            [
                r["id"],
                r["created_at"],
                r["name"],
                r["status"],
                r["boot_id"],
                r["manifest_name"],
                metrics_text(r["metrics"], METRICS_WIDTH),
                "yes" if r["archives"] else "no",
                " ".join(flags(r)),
            ]
            for r in rows
        ],
    )


def add_text(report: dict[str, Any]) -> str:
    """The human form of `result add`."""
    lines = [
        f"result {report['id']} {report['name']!r}: {report['status']} on boot"
        f" {report['boot_id']} ({report['manifest_name']}, {report['profile']})",
        f"  digest sha256:{report['digest']}",
    ]
    if report["instrumented"]:
        hooks = ", ".join(h["name"] for h in report["hooks"] if h["observing"])
        lines.append(
            f"  INSTRUMENTED: the boot ran with observing hook {hooks}, which can change what"
            " it observes; this is a result of the engine plus the hook"
        )
    if report["metrics"]:
        lines.append(f"  metrics: {metrics_text(report['metrics'], None)}")
    for archive in report["archives"]:
        bucket = ArchiveLocation.parse(archive["location"]).bucket
        lines.append(f"  archived: s3://{bucket}/{archive['record_key']}")
    return "\n".join(lines) + "\n"


def flags(row: dict[str, Any]) -> list[str]:
    """INSTRUMENTED (a result of the engine plus an observing hook), pinned."""
    found = ["INSTRUMENTED"] if row["instrumented"] else []
    found += ["pinned"] if row["pinned"] else []
    return found
