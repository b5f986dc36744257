"""Every result an archive holds, read by listing it (the team's view, no ledger)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lifecycle.archive.layout import parse_key
from lifecycle.archive.record import pins_at
from lifecycle.archive.store import BlobStore
from lifecycle.parallel import pool_map
from lifecycle.records import ResultRecordV1
from lifecycle.results.archive import read_result


@dataclass(frozen=True)
class ArchivedResult:
    """One result as the archive holds it."""

    result: dict[str, Any]  # the canonical result
    digest: str
    manifest_name: str
    arch: str
    host: str  # the host that archived it
    record: str  # s3:// URL of its record
    pins: tuple[str, ...]  # the team pins' reasons


def archived_results(store: BlobStore, *, workers: int = 8) -> list[ArchivedResult]:
    """Every result with a record in the archive, newest first."""
    ids = sorted(
        {k.id for item in store.list("results/") if (k := parse_key(item.key)) is not None}
    )
    pinned: dict[str, list[str]] = {}
    for pin in pins_at(store).values():
        pinned.setdefault(pin.target, []).append(pin.reason)

    def one(result_id: str) -> ArchivedResult:
        relative, document = read_result(store, result_id)
        if isinstance(document, ResultRecordV1):
            manifest, arch = document.boot.boot.manifest_name, "unknown"
        else:
            manifest, arch = document.manifest_name, document.arch
        return ArchivedResult(
            document.result, document.digest, manifest, arch, document.host,
            store.where(relative), tuple(sorted(pinned.get(result_id, []))),
        )  # fmt: skip

    found = pool_map(one, ids, workers, "catalog")
    return sorted(found, key=lambda r: (r.result["created_at"], r.result["id"]), reverse=True)
