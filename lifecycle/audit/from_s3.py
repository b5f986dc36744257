"""Audit facts from the archive alone: no ledger, no evidence dir, not even this host.

A result's record names its boot's record and the exact version of each cache behind it,
each by key and sha256; every record read is checked (format, its own name, and a result
against its digest) and a break in the chain is an error naming the object. Records of the
previous release (one per cache, one per result) are read too.
"""

from __future__ import annotations

from dataclasses import replace

from lifecycle.archive.layout import (
    CACHE_KINDS,
    RESULT_KINDS,
    cache_prefix,
    check_id,
    legacy_cache_key,
    parse_key,
    records_of,
)
from lifecycle.archive.record import (
    GcRecords,
    Unread,
    follow,
    pushed_images,
    read_legacy_cache,
    readable,
    stood_on,
)
from lifecycle.archive.restore import check_cache_id
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.audit.chain import (
    ArchiveFacts,
    CacheAuditFacts,
    CacheFacts,
    ChainFacts,
    Collected,
)
from lifecycle.records import (
    BootRecordV1,
    CacheRecordV1,
    CacheVersion,
    ImageSnapshot,
    ManifestSnapshot,
    ResultBoot,
    ResultRecordV1,
    ResultRecordV2,
)
from lifecycle.report import unread_lines
from lifecycle.results.archive import archived_result, no_result, results_on_cache
from lifecycle.table import visible


def result_facts(store: BlobStore, result_id: str) -> ChainFacts | Collected:
    """The chain's facts for one result, from its record and the records it names; a record
    of it that cannot be read beside the one that does is left out, and a warning names it.
    A result whose records a gc removed by rule (gc's records say so) is collected."""
    check_id(result_id, "result")  # it becomes part of a key: checked before any request
    found, unread = archived_result(store, result_id)
    if found is None:
        # Only when no record of it is there at all: one that cannot be read is not collected.
        gone = {} if unread else GcRecords().of(store, result_id, RESULT_KINDS)
        if not gone:
            raise no_result(store, result_id, unread)
        records = {store.where(key.key): removal.describe() for key, removal in gone.items()}
        return Collected(result_id, "result", records)
    facts = _result_facts(store, found[1])
    return replace(facts, left_out=unread_lines(unread) + facts.left_out)


def _result_facts(store: BlobStore, document: ResultRecordV1 | ResultRecordV2) -> ChainFacts:
    if isinstance(document, ResultRecordV1):
        return _legacy_result_facts(store, document)
    boot = follow(store, BootRecordV1, document.boot)
    if boot.boot_id != document.canonical().boot_id:
        raise ArchiveError(f"{store.where(document.boot.key)}: not the record of the result's boot")
    rows = {row.id: row for row in boot.caches}
    uses = {use.cache_id: use for use in boot.uses}
    baked = {use.cache_id: use.as_use() for use in boot.baked}  # in its image's layers
    caches = []
    for ref in document.caches:
        mounted = ref.cache_id in uses and ref.cache_id in rows
        if not mounted and (ref.cache_id not in baked or ref.record is None):
            where = store.where(document.boot.key)
            raise ArchiveError(
                f"{where}: does not list cache {ref.cache_id}: the chain breaks here"
            )
        archive, version = None, None
        if ref.record is not None:
            version = follow(store, CacheVersion, ref.record)
            archive = version_facts(store, ref.record.key, ref.record.sha256, version)
        if mounted:
            caches.append(CacheFacts(rows[ref.cache_id], uses[ref.cache_id], archive))
        else:  # baked: the row as the host that archived the version had it
            assert version is not None, "a baked cache is followed by its record"
            caches.append(CacheFacts(version.cache, baked[ref.cache_id], archive))
    facts = _chain(document, boot, caches, boot.image, boot.manifest)
    if not baked:
        return facts
    # A pushed bake's Statement, from its image record (the newest that holds one); a record
    # that cannot be read may have held it: a warning names it.
    records, unread = pushed_images(store, boot.boot.manifest_digest)
    pushed = [r.provenance for r in records if r.image_id == boot.boot.image_id and r.provenance]
    provenance = pushed[0] if pushed else None
    return replace(facts, provenance=provenance, left_out=unread_lines(unread))


def cache_facts(store: BlobStore, cache_id: str) -> CacheAuditFacts | Collected:
    """A cache, its versions, the boots that used it and the results standing on it; a
    version's or a boot's record that cannot be read is left out and named (`unreadable`), as
    every read of the archive does: one damaged record does not hide the rest. A cache none
    of whose versions the archive holds, as gc's records say a gc removed them by rule, is
    collected."""
    check_cache_id(cache_id)  # it becomes part of a key: checked before any request, as restore
    versions, unread = _versions(store, cache_id)
    if not versions and unread:
        # A why may hold the record's own fields, which the bucket's writer chose.
        named = "; ".join(f"{visible(url)}: {visible(why)}" for url, why in unread.items())
        raise ArchiveError(f"cache {cache_id}: no version of it can be read: {named}")
    if not versions:
        legacy = read_legacy_cache(store, cache_id)
        return _legacy_cache_facts(store, legacy) if legacy else _collected_cache(store, cache_id)
    boots = []
    index = cache_prefix(cache_id, "boots/")
    for boot_id in sorted(item.key[len(index) :] for item in store.list(index)):
        record, unread_boot = _first_boot_record(store, boot_id)
        unread |= unread_boot
        use = next((u for u in record.uses if u.cache_id == cache_id), None) if record else None
        if record is not None and use is not None:
            boots.append((record.boot, use))
    archives = [version_facts(store, key, _sha(key), version) for key, version in versions]
    newest = versions[-1][1]
    return CacheAuditFacts(
        newest.cache, None, archives[-1], boots, _results(store, cache_id), archives, unread
    )


def _collected_cache(store: BlobStore, cache_id: str) -> Collected:
    """Each version of a cache the archive no longer holds that gc's records say a gc removed;
    missing when they name none, or when a result there stands on one (`stood_on`)."""
    if stood := stood_on(store, cache_id):
        key, result_id = min(stood.items())
        raise ArchiveError(f"{store.where(key)}: missing: result {result_id} there stands on it")
    gone = GcRecords().of(store, cache_id, CACHE_KINDS)
    if not gone:  # no record of it in any form: named as verify --from names it
        where = f"{store.location.url()}: none archived there, none collected by a gc"
        raise ArchiveError(f"no cache {cache_id!r} at {where}")
    records = {store.where(key.key): removal.describe() for key, removal in gone.items()}
    return Collected(cache_id, "cache", records)


def version_facts(
    store: BlobStore, relative: str, sha256: str, version: CacheVersion | CacheRecordV1
) -> ArchiveFacts:
    """Where a cache's record is and what it holds: as the ledger's rows would say it."""
    return {
        "location": store.location.url(),
        "record": store.where(relative),
        "record_sha256": sha256,
        "with_content": version.with_content,
        "tree_digest": version.fingerprint.tree_digest,
        "parent": version.parent if isinstance(version, CacheVersion) else None,
    }


def _versions(store: BlobStore, cache_id: str) -> tuple[list[tuple[str, CacheVersion]], Unread]:
    """Every version record of the cache that reads, oldest first; and those that do not
    (s3:// URL -> why)."""
    found, unread = readable(store, CacheVersion, cache_prefix(cache_id, "versions/"), "version")
    versions = sorted(found.items(), key=lambda pair: (pair[1].archived_at, pair[0]))
    return versions, {store.where(key): why for key, why in unread.items()}


def _first_boot_record(store: BlobStore, boot_id: str) -> tuple[BootRecordV1 | None, Unread]:
    """A boot's record (the first written: any other says the same), and those of its records
    that cannot be read (s3:// URL -> why); None when its marker was written and its record
    not (that archive did not finish), or none of its records can be read."""
    found, unread = readable(store, BootRecordV1, records_of("boots", boot_id), "boot")
    first = min(found.values(), key=lambda r: r.archived_at) if found else None
    return first, {store.where(key): why for key, why in unread.items()}


def _results(store: BlobStore, cache_id: str) -> list[dict[str, object]]:
    return [{**d.result, "digest": d.digest} for d in results_on_cache(store, cache_id)]


def _sha(relative: str) -> str:
    key = parse_key(relative)
    assert key is not None and key.sha256 is not None, "a record's key names its sha256"
    return key.sha256


# --- the previous release's records: one per cache, one per result ------------------------


def _legacy_cache(store: BlobStore, cache_id: str) -> tuple[str, CacheRecordV1]:
    """(sha256 of its bytes, record) of the cache's one record; missing is an error here."""
    found = read_legacy_cache(store, cache_id)
    if found is None:
        raise _no_cache(store, cache_id)
    return found[1], found[2]


def _no_cache(store: BlobStore, cache_id: str) -> ArchiveError:
    where = store.where(legacy_cache_key(cache_id))
    return ArchiveError(f"{where}: missing: no cache {cache_id!r} archived there")


def _legacy_result_facts(store: BlobStore, document: ResultRecordV1) -> ChainFacts:
    boot = document.boot
    caches = []
    for cache_id in document.caches:
        sha, record = _legacy_cache(store, cache_id)
        use = next((b.use for b in record.boots if b.boot.id == boot.boot.id), None)
        if use is None:
            where = store.where(legacy_cache_key(cache_id))
            raise ArchiveError(f"{where}: does not list boot {boot.boot.id}: the chain breaks here")
        archive = version_facts(store, legacy_cache_key(cache_id), sha, record)
        caches.append(CacheFacts(record.cache, use, archive))
    return _chain(document, boot, caches, document.image, document.manifest)


def _chain(
    document: ResultRecordV1 | ResultRecordV2,
    boot: ResultBoot | BootRecordV1,
    caches: list[CacheFacts],
    image: ImageSnapshot | None,
    manifest: ManifestSnapshot | None,
) -> ChainFacts:
    """The chain from a result's record of either format and the boot it names."""
    return ChainFacts(
        result=document.result,
        digest=document.digest,
        boot=boot.boot,
        hook_runs=list(boot.hook_runs),
        log=boot.log,
        caches=caches,
        image=image,
        manifest=manifest,
    )


def _legacy_cache_facts(store: BlobStore, found: tuple[str, str, CacheRecordV1]) -> CacheAuditFacts:
    _, sha, record = found
    cache_id = record.cache_id
    boots = [(entry.boot, entry.use) for entry in record.boots]
    archive = version_facts(store, legacy_cache_key(cache_id), sha, record)
    return CacheAuditFacts(record.cache, None, archive, boots, _results(store, cache_id), [archive])
