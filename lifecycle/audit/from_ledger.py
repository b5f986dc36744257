"""Audit facts from this host's ledger and the snapshots its boots kept."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.plans import image_snapshot, read_snapshot
from lifecycle.audit.chain import ArchiveFacts, CacheAuditFacts, CacheFacts, ChainFacts
from lifecycle.errors import LifecycleError, did_you_mean
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import ArchiveRecord, VersionRow, archive_of, versions_of
from lifecycle.ledger.boots import (
    CacheUse,
    all_caches,
    baked_uses,
    cache_by_id,
    cache_uses,
    hook_runs_of,
)
from lifecycle.ledger.results import (
    ResultRecord,
    all_results,
    result_archives,
    result_by_id,
    results_of_cache,
)
from lifecycle.records import FileBlob, HookRun, ImageSnapshot, ManifestSnapshot
from lifecycle.results.model import canonical_result, find_boot


def find_result(ledger: Ledger, result_id: str) -> ResultRecord:
    """The result, or an error naming the closest id and how to ask S3 instead."""
    result = result_by_id(ledger, result_id)
    if result is not None:
        return result
    hint = did_you_mean(result_id, (r.id for r in all_results(ledger)))
    raise LifecycleError(
        f"no result {result_id!r} in {ledger}{hint}"
        " (recorded elsewhere, or the ledger is gone? add --from s3://BUCKET/PREFIX)"
    )


def result_facts(ledger: Ledger, home: Home, result_id: str) -> ChainFacts:
    """The chain's facts for one result, as this ledger knows them."""
    result = find_result(ledger, result_id)
    boot = find_boot(ledger, result.boot_id)
    where = [a.location for a in result_archives(ledger, result.id)]
    caches = []
    for use in cache_uses(ledger, boot_id=boot.id):
        cache = cache_by_id(ledger, use.cache_id)
        assert cache is not None, "a cache use refers to a cache row (foreign key)"
        caches.append(CacheFacts(cache.row(), use, _stood_on(ledger, use, where)))
    for baked in baked_uses(ledger, boot.id):  # in its image's layers (lifecycle bake)
        cache = cache_by_id(ledger, baked.cache_id)
        if cache is None:
            raise LifecycleError(
                f"cache {baked.cache_id} was baked into image {boot.image_id[:19]} on another"
                " host: audit this result from the archive (--from s3://BUCKET/PREFIX)"
            )
        use = baked.as_use()
        caches.append(CacheFacts(cache.row(), use, _stood_on(ledger, use, where)))
    runs = [
        HookRun(name=run.name, event=run.event, exit_code=run.exit_code)
        for run in hook_runs_of(ledger, boot.id)
    ]
    image = image_snapshot(ledger, home, boot.image_id)
    manifest = read_snapshot(home.manifest_snapshot(boot.manifest_digest))
    return ChainFacts(
        result=canonical_result(result),
        digest=result.digest,
        boot=boot,
        hook_runs=runs,
        log=_file_digest(Path(boot.log_path)) if boot.log_path else None,
        caches=caches,
        image=None if image is None else ImageSnapshot.model_validate(image),
        manifest=None if manifest is None else ManifestSnapshot.model_validate(manifest),
        provenance=read_snapshot(home.provenance(boot.image_id)),
    )


def cache_facts(ledger: Ledger, cache_id: str) -> CacheAuditFacts:
    """A cache, the boots that used it and the results on them, as this ledger knows them."""
    cache = cache_by_id(ledger, cache_id)
    if cache is None:
        hint = did_you_mean(cache_id, (c.id for c in all_caches(ledger)))
        raise LifecycleError(
            f"no cache {cache_id!r} in {ledger}{hint}"
            " (archived from another host? add --from s3://BUCKET/PREFIX)"
        )
    uses = cache_uses(ledger, cache_id=cache.id)
    boots = [(find_boot(ledger, use.boot_id), use) for use in uses]
    results = [
        {**canonical_result(r), "digest": r.digest} for r in results_of_cache(ledger, cache.id)
    ]
    rows = versions_of(ledger, cache.id)
    archive = archive_of(ledger, cache.id)
    parent = next((r.parent for r in rows if archive and r.record_key == archive.record_key), None)
    newest = _facts(archive, parent) if archive else None
    versions = [_facts(row, row.parent) for row in rows]
    return CacheAuditFacts(cache.row(), cache.state, newest, boots, results, versions)


def _stood_on(ledger: Ledger, use: CacheUse, where: list[str]) -> ArchiveFacts | None:
    """The archived version of the tree a boot left a cache holding: the first record of it
    where the result was archived (the one its record names), else the first anywhere; for a
    cache archived only in the previous format, that one record."""
    same = [r for r in versions_of(ledger, use.cache_id) if r.tree_digest == use.tree_digest_after]
    preferred = [row for location in where for row in same if row.location == location] + same
    if preferred:
        return _facts(preferred[0], preferred[0].parent)
    archive = archive_of(ledger, use.cache_id)
    if archive is not None and archive.tree_digest is None:
        return _facts(archive, None)
    return None


def _facts(row: ArchiveRecord | VersionRow, parent: str | None) -> ArchiveFacts:
    """Where a cache's record is, as this ledger keeps it."""
    bucket = ArchiveLocation.parse(row.location).bucket
    return {
        "location": row.location,
        "record": f"s3://{bucket}/{row.record_key}",
        "record_sha256": row.record_sha256,
        "with_content": row.with_content,
        "tree_digest": row.tree_digest,
        "parent": parent,
    }


def _file_digest(path: Path) -> FileBlob | None:
    """A kept evidence file as the archive names its blob."""
    if not path.is_file():
        return None
    with path.open("rb") as log:  # in chunks: a chatty engine's log runs to gigabytes
        sha256 = hashlib.file_digest(log, "sha256").hexdigest()
        return FileBlob(sha256=sha256, size=os.fstat(log.fileno()).st_size)
