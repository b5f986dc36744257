"""What a result is (a status, metrics and a note against one boot, and its canonical JSON),
and recording one: checked, its document kept as evidence, its digest taken once.

The canonical JSON (keys sorted, no spaces, UTF-8) is what a result's digest is taken over;
the archive keeps it verbatim, so anyone can recompute the digest from the record alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from lifecycle.errors import LifecycleError, did_you_mean
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord, boot_by_id, boot_ids
from lifecycle.ledger.results import ResultRecord, insert_result, result_named
from lifecycle.redact import redact_values

STATUSES = ("pass", "fail", "inconclusive")
# A result document (`--file`, an acceptance's stdout) is metrics and notes, not data; and an
# acceptance printing without end must not take lifecycle's memory (a night runs many).
MAX_DOCUMENT_BYTES = 16 * 2**20
SOURCES = ("manual", "acceptance")
Scalar = int | float | str | bool | None

_METRIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*")


class ResultError(LifecycleError):
    """A result that cannot be recorded as asked (usage: exit 2)."""


def new_result_id(now: datetime) -> str:
    """`r-<UTC time>-<6 hex>`, sorting by time like boot ids."""
    return f"r-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def parse_metric(text: str) -> tuple[str, Scalar]:
    """`name=value`: a JSON number, true, false or null where the value reads as one, else text."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ResultError(f"--metric {text!r}: expected NAME=VALUE, e.g. --metric margin_mib=174")
    check_metric_name(name)
    try:
        value = json.loads(raw)
    except ValueError:
        return name, raw
    # Only scalars: "[1, 2]" or "{...}" stay text rather than nest structure in a metric.
    return (name, value) if _is_scalar(value) else (name, raw)


def check_metric_name(name: str) -> None:
    """Metric names are plain words (letters, digits, _ . : / -): tables and queries stay sane."""
    if not _METRIC_NAME.fullmatch(name):
        raise ResultError(f"metric name {name!r}: use letters, digits and _ . : / -")


def read_document(data: bytes, where: str) -> tuple[dict[str, Scalar], str | None]:
    """The metrics and note a result document (`--file`, an acceptance's stdout) carries.

    It is one JSON object; its optional `metrics` (an object of scalars) and `note` (text) are
    taken, every other key is kept with the document only.
    """
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise ResultError(f"{where}: not JSON: {exc}") from exc
    except RecursionError:  # json recurses once per nested array or object
        raise ResultError(f"{where}: nested too deep to be a result document") from None
    if not isinstance(document, dict):
        raise ResultError(f"{where}: expected a JSON object, not {type(document).__name__}")
    metrics = document.get("metrics", {})
    if not isinstance(metrics, dict):
        raise ResultError(f"{where}: `metrics` must be an object of NAME: VALUE")
    for name, value in metrics.items():
        check_metric_name(name)
        if not _is_scalar(value):
            raise ResultError(f"{where}: metric {name!r} must be a number, text, bool or null")
    note = document.get("note")
    if note is not None and not isinstance(note, str):
        raise ResultError(f"{where}: `note` must be text")
    return dict(metrics), note


def canonical_result(result: ResultRecord) -> dict[str, Any]:
    """The result as the facts its digest covers (not where it is kept on this host)."""
    document = None
    if result.document_sha256 is not None:
        document = {"sha256": result.document_sha256, "size": result.document_size}
    return {
        "id": result.id,
        "boot_id": result.boot_id,
        "name": result.name,
        "status": result.status,
        "metrics": json.loads(result.metrics),
        "note": result.note,
        "source": result.source,
        "instrumented": result.instrumented,
        "document": document,
        "created_at": result.created_at,
    }


def canonical_bytes(canonical: dict[str, Any]) -> bytes:
    """The bytes the digest is taken over: sorted keys, no spaces, UTF-8."""
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode()


def result_digest(canonical: dict[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON."""
    return hashlib.sha256(canonical_bytes(canonical)).hexdigest()


def metrics_text(metrics: dict[str, Scalar], width: int | None) -> str:
    """`k=v, k2="text"`: values in JSON, as `--metric` reads them; cut to `width` with a "…"."""
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in metrics.items())
    if width is not None and len(text) > width:
        return text[: width - 1] + "…"
    return text or "-"


# A pin reason `result <id>` (`: text`) is a result's: `pin RESULT` writes it (pin_reason),
# gc and `results` read the result from it, `unpin RESULT` takes it off. A hand-made pin may
# not have one (`result r-42 (night)` is no such reason: no result id holds a space).
RESULT_PIN = "result "


def pin_reason(result_id: str, text: str | None = None) -> str:
    """The reason of the pins a result puts on its caches: `result <id>` (`: text`)."""
    return f"{RESULT_PIN}{result_id}" + (f": {text}" if text else "")


def pinned_result(reason: str) -> str | None:
    """The result a pin reason says put the pin there (`result <id>`, `result <id>:…`)."""
    if not reason.startswith(RESULT_PIN):
        return None
    result_id = reason.removeprefix(RESULT_PIN).split(":", 1)[0]
    return result_id if result_id and not any(c.isspace() for c in result_id) else None


def is_pin_of(reason: str, result_reason: str) -> bool:
    """Whether a pin reason is one a result put (`result <id>`, with or without a text)."""
    return reason == result_reason or reason.startswith(result_reason + ": ")


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


def refuse_secrets(request: ResultRequest, secrets: Mapping[str, str]) -> None:
    """A result is kept and archived as given: one whose name, note, a metric or document
    holds a secret's value (in any spelling the redaction knows) is refused at what holds it,
    naming the secret, never showing it."""
    given = {"--name": request.name, "--note": request.note or ""}
    given |= {f"--metric {key}": f"{key}={value}" for key, value in request.metrics.items()}
    if request.document is not None:
        given[request.document_where] = request.document.decode(errors="replace")
    for where, text in given.items():
        for name, value in sorted(secrets.items()):
            if redact_values(text, {name: value}) != text:
                raise ResultError(
                    f"{redact_values(where, secrets)}: holds the value of secret {name} (from"
                    " the host environment); a result is archived as given: leave it out"
                )


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
    if not _NAME.fullmatch(request.name):
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


def _is_scalar(value: object) -> bool:
    # NaN and infinities are not JSON: a canonical form must not depend on a parser's leniency.
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, bool | int | str)
