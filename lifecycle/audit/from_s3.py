"""Audit facts from the archive alone: no ledger, no evidence dir, not even this host.

A result's record gives the result, its boot, the image and the manifest; each cache's record
gives that cache and how the boot used it. Every record read is checked (format, and a
result against its digest) and a break in the chain is an error naming the object.
"""

from __future__ import annotations

import hashlib

from lifecycle.archive.record import load_record
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.audit.chain import ArchiveFacts, CacheAuditFacts, CacheFacts, ChainFacts
from lifecycle.records import CacheRecordV1, ResultRecordV1
from lifecycle.results.archive import get_object, load_result_record, result_key, results_of_cache


def read_result(store: BlobStore, result_id: str) -> tuple[ResultRecordV1, bytes]:
    """A result's record (checked) and its bytes; an error when there is none."""
    key = result_key(store, result_id)
    body = get_object(store, key)
    if body is None:
        raise ArchiveError(
            f"{store.url(key)}: missing: no result {result_id!r} archived at {store.location.url()}"
        )
    return load_result_record(body, store.url(key)), body


def read_cache(store: BlobStore, cache_id: str) -> tuple[CacheRecordV1, bytes]:
    """A cache's record (checked) and its bytes; an error when there is none."""
    url = store.url(store.record_key(cache_id))
    body = store.get_record(cache_id)
    if body is None:
        raise ArchiveError(f"{url}: missing: no cache {cache_id!r} archived there")
    return load_record(body, url), body


def result_facts(store: BlobStore, result_id: str) -> ChainFacts:
    """The chain's facts for one result, from its record and its caches' records."""
    document, _ = read_result(store, result_id)
    boot = document.boot
    caches = []
    for cache_id in document.caches:
        record, body = read_cache(store, cache_id)
        use = next((b.use for b in record.boots if b.boot.id == boot.boot.id), None)
        if use is None:
            where = store.url(store.record_key(cache_id))
            raise ArchiveError(f"{where}: does not list boot {boot.boot.id}: the chain breaks here")
        caches.append(CacheFacts(record.cache, use, archive_facts(store, cache_id, record, body)))
    return ChainFacts(
        result=document.result,
        digest=document.digest,
        boot=boot.boot,
        hook_runs=list(boot.hook_runs),
        log=boot.log,
        caches=caches,
        image=document.image,
        manifest=document.manifest,
    )


def cache_facts(store: BlobStore, cache_id: str) -> CacheAuditFacts:
    """A cache, the boots its record lists and the results marked as standing on it."""
    record, body = read_cache(store, cache_id)
    boots = [(entry.boot, entry.use) for entry in record.boots]
    results = []
    for result_id in results_of_cache(store, cache_id):
        found = get_object(store, result_key(store, result_id))
        if found is None:
            continue  # a marker whose record was never written: that archive did not finish
        document = load_result_record(found, store.url(result_key(store, result_id)))
        results.append({**document.result, "digest": document.digest})
    archive = archive_facts(store, cache_id, record, body)
    return CacheAuditFacts(record.cache, None, archive, boots, results)


def archive_facts(
    store: BlobStore, cache_id: str, record: CacheRecordV1, body: bytes
) -> ArchiveFacts:
    """Where the cache's record is: as the ledger's archive row would say it."""
    return {
        "location": store.location.url(),
        "record": store.url(store.record_key(cache_id)),
        "record_sha256": hashlib.sha256(body).hexdigest(),
        "with_content": record.with_content,
    }
