"""Verify a cache or a result: everything behind it, as the ledger knows it or from S3 alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lifecycle.archive.layout import (
    cache_prefix,
    legacy_cache_key,
    legacy_result_key,
    records_of,
)
from lifecycle.archive.store import BlobStore
from lifecycle.audit.blobs import BlobChecker
from lifecycle.audit.verify import (
    Finding,
    archived_record,
    behind_result,
    live_cache,
    result_document,
    result_record,
)
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import (
    ArchiveRecord,
    BootArchiveRow,
    VersionRow,
    archive_of,
    boot_archives,
    versions_of,
)
from lifecycle.ledger.boots import CacheRecord, cache_by_id, cache_uses
from lifecycle.ledger.results import ResultRecord, result_archives
from lifecycle.results.model import canonical_result, result_digest

StoreFor = Callable[[str], BlobStore]  # an archive location (s3://bucket/prefix) -> its store


@dataclass(frozen=True)
class VerifyReport:
    """What was checked for one target, and every difference found."""

    target: str
    kind: str  # cache | result
    source: str  # "ledger" or the archive location it was verified from alone
    findings: tuple[Finding, ...]

    def __post_init__(self) -> None:
        # A blob several records name (a boot's log, a patch) is checked once, reported once.
        object.__setattr__(self, "findings", tuple(dict.fromkeys(self.findings)))

    @property
    def problems(self) -> list[Finding]:
        """The findings that differ from what was recorded."""
        return [f for f in self.findings if f.problem is not None]


def verify_cache(
    ledger: Ledger, cache: CacheRecord, store_for: StoreFor, checker: BlobChecker
) -> list[Finding]:
    """The live cache (if still here), every version of it this host archived or restored,
    and the record of every boot of it this host archived: each exactly as this host wrote or
    read it, whatever other hosts archived since."""
    subject = f"live cache {cache.id}"
    findings = []
    if cache.state == "torn-down" or not Path(cache.host_path).exists():
        findings.append(Finding(subject, None, "not on this host (torn down): archive only"))
    elif cache.in_use_by:
        note = f"in use by boot {cache.in_use_by}: not re-hashed while a boot may write it"
        findings.append(Finding(subject, None, note))
    else:
        findings += live_cache(cache.id, cache.host_path, cache.scan_path, cache.tree_digest)
    records: list[VersionRow | ArchiveRecord | BootArchiveRow] = [*versions_of(ledger, cache.id)]
    archive = archive_of(ledger, cache.id)
    if archive is not None and archive.tree_digest is None:  # the previous release's record
        records.append(archive)
    elif archive is None and not records:
        findings.append(Finding(f"archive of cache {cache.id}", None, "not archived"))
    for use in (u for u in cache_uses(ledger) if u.cache_id == cache.id):
        records += boot_archives(ledger, use.boot_id)
    for row in records:
        store = store_for(row.location)
        relative = store.relative(row.record_key)
        findings += archived_record(store, relative, row.record_sha256, checker)
    return findings


def verify_result(
    ledger: Ledger, result: ResultRecord, store_for: StoreFor, checker: BlobChecker
) -> list[Finding]:
    """The result's digest and document, its archived records and the records they name,
    then every cache behind it."""
    # An instrumented result says so here too: its verdict is the engine's plus a hook's.
    subject = f"result {result.id}" + (" [INSTRUMENTED]" if result.instrumented else "")
    digest = result_digest(canonical_result(result))
    if digest != result.digest:
        findings = [Finding(subject, f"its row has digest {digest} now, {result.digest} recorded")]
    else:
        findings = [Finding(subject, None, f"digest sha256:{digest} as recorded")]
    findings += result_document(result.document_path, result.document_sha256, result.document_size)
    archives = result_archives(ledger, result.id)
    for archive in archives:
        store = store_for(archive.location)
        relative = store.relative(archive.record_key)
        found, document = result_record(
            store, relative, archive.record_sha256, result.digest, checker
        )
        findings += found
        if document is not None:
            findings += behind_result(store, document, checker)
    if not archives:
        findings.append(Finding(f"archive of result {result.id}", None, "not archived"))
    for use in cache_uses(ledger, boot_id=result.boot_id):
        cache = cache_by_id(ledger, use.cache_id)
        assert cache is not None, "a cache use refers to a cache row (foreign key)"
        findings += verify_cache(ledger, cache, store_for, checker)
    return findings


def verify_archived(store: BlobStore, target: str, checker: BlobChecker) -> VerifyReport:
    """A result or a cache from the archive alone: every record and blob behind it."""
    url = store.location.url()
    keys = [item.key for item in store.list(records_of("results", target))]
    if not keys and store.head(store.key(legacy_result_key(target)), checksum=False):
        keys = [legacy_result_key(target)]
    if not keys:
        return VerifyReport(target, "cache", url, tuple(_archived_cache(store, target, checker)))
    findings: list[Finding] = []
    for relative in keys:
        found, document = result_record(store, relative, None, None, checker)
        findings += found
        if document is not None:  # else unreadable or altered: the findings say so
            findings += behind_result(store, document, checker)
    return VerifyReport(target, "result", url, tuple(findings))


def _archived_cache(store: BlobStore, cache_id: str, checker: BlobChecker) -> list[Finding]:
    """Every version of a cache the archive holds (or its previous-format record)."""
    listed = store.list(cache_prefix(cache_id, "versions/"))
    keys = [item.key for item in listed] or [legacy_cache_key(cache_id)]
    return [f for key in keys for f in archived_record(store, key, None, checker)]
