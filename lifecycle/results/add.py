"""Record a result against a boot: checked, its document kept as evidence, digest taken once."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime

from lifecycle.errors import did_you_mean
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord, boot_by_id, boot_ids
from lifecycle.ledger.results import ResultRecord, insert_result, result_named
from lifecycle.results.model import (
    SOURCES,
    STATUSES,
    ResultError,
    Scalar,
    canonical_result,
    new_result_id,
    read_document,
    result_digest,
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")


@dataclass(frozen=True)
class ResultRequest:
    """A result as asked for: flags win over what the attached document says."""

    boot_id: str
    name: str  # unique per boot: a second result of that name is refused
    status: str
    metrics: dict[str, Scalar] = field(default_factory=dict)
    note: str | None = None
    document: bytes | None = None  # a JSON object: its `metrics` and `note` are taken too
    document_where: str = "result document"  # for messages: the file it came from
    source: str = "manual"


def find_boot(ledger: Ledger, boot_id: str) -> BootRecord:
    """The boot, or an error naming the closest id the ledger knows."""
    boot = boot_by_id(ledger, boot_id)
    if boot is not None:
        return boot
    hint = did_you_mean(boot_id, boot_ids(ledger), " (`lifecycle boots` lists them)")
    raise ResultError(f"unknown boot {boot_id!r}{hint}")


def add_result(ledger: Ledger, request: ResultRequest, now: datetime) -> ResultRecord:
    """Check the request, keep its document, record the result; returns the record."""
    if request.status not in STATUSES:
        raise ResultError(f"status {request.status!r}: expected one of {', '.join(STATUSES)}")
    if request.source not in SOURCES:
        raise ResultError(f"source {request.source!r}: expected one of {', '.join(SOURCES)}")
    if not _NAME.match(request.name):
        raise ResultError(f"result name {request.name!r}: use letters, digits and _ . : / -")
    boot = find_boot(ledger, request.boot_id)
    if boot.outcome == "running":
        raise ResultError(
            f"boot {boot.id} has not ended: a result is recorded against what a boot did,"
            " once it is over"
        )
    earlier = result_named(ledger, boot.id, request.name)
    if earlier is not None:
        raise ResultError(
            f"boot {boot.id} already has a result named {request.name!r} ({earlier.id});"
            " results are never changed: give this one another name"
        )
    result_id = new_result_id(now)
    metrics: dict[str, Scalar] = {}
    note = request.note
    document_sha256 = document_size = document_path = None
    if request.document is not None:
        metrics, from_document = read_document(request.document, request.document_where)
        note = note if note is not None else from_document
        kept = ledger.keep_evidence("results", f"{result_id}.json", request.document)
        document_sha256 = hashlib.sha256(request.document).hexdigest()
        document_size, document_path = len(request.document), str(kept)
    metrics.update(request.metrics)
    record = ResultRecord(
        id=result_id,
        boot_id=boot.id,
        name=request.name,
        status=request.status,
        metrics=json.dumps(metrics, sort_keys=True),
        note=note,
        source=request.source,
        # Copied from the boot so that wherever the result travels (table, JSON, archive,
        # provenance) it says that an observing hook may have changed what it measured.
        instrumented=boot.instrumented,
        document_sha256=document_sha256,
        document_size=document_size,
        document_path=document_path,
        created_at=now.isoformat(timespec="seconds"),
        digest="",  # taken below, over everything else
    )
    record = replace(record, digest=result_digest(canonical_result(record)))
    insert_result(ledger, record)
    return record
