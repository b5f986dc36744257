"""Audit facts from this host's ledger and the snapshots its boots kept."""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import read_snapshot
from lifecycle.audit.chain import ArchiveFacts, CacheAuditFacts, CacheFacts, ChainFacts
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of
from lifecycle.ledger.boots import (
    all_caches,
    cache_by_id,
    cache_uses,
    hook_runs_of,
)
from lifecycle.ledger.results import ResultRecord, all_results, result_by_id, results_of_cache
from lifecycle.records import FileBlob, HookRun, ImageSnapshot, ManifestSnapshot
from lifecycle.results.add import find_boot
from lifecycle.results.model import canonical_result


def find_result(ledger: Ledger, result_id: str) -> ResultRecord:
    """The result, or an error naming the closest id and how to ask S3 instead."""
    result = result_by_id(ledger, result_id)
    if result is not None:
        return result
    close = difflib.get_close_matches(result_id, [r.id for r in all_results(ledger)], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise LifecycleError(
        f"no result {result_id!r} in the ledger at {ledger.home}{hint}"
        " (recorded elsewhere, or the ledger is gone? add --from s3://BUCKET/PREFIX)"
    )


def result_facts(ledger: Ledger, result_id: str) -> ChainFacts:
    """The chain's facts for one result, as this ledger knows them."""
    result = find_result(ledger, result_id)
    boot = find_boot(ledger, result.boot_id)
    caches = []
    for use in cache_uses(ledger, boot_id=boot.id):
        cache = cache_by_id(ledger, use.cache_id)
        assert cache is not None, "a cache use refers to a cache row (foreign key)"
        caches.append(CacheFacts(cache.row(), use, archive_facts(ledger, cache.id)))
    runs = [
        HookRun(name=run.name, event=run.event, exit_code=run.exit_code)
        for run in hook_runs_of(ledger, boot.id)
    ]
    home = ledger.home
    image = read_snapshot(home.image_snapshot(boot.image_id))
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
    )


def cache_facts(ledger: Ledger, cache_id: str) -> CacheAuditFacts:
    """A cache, the boots that used it and the results on them, as this ledger knows them."""
    cache = cache_by_id(ledger, cache_id)
    if cache is None:
        close = difflib.get_close_matches(cache_id, [c.id for c in all_caches(ledger)], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise LifecycleError(
            f"no cache {cache_id!r} in the ledger at {ledger.home}{hint}"
            " (archived from another host? add --from s3://BUCKET/PREFIX)"
        )
    boots = []
    for use in (u for u in cache_uses(ledger) if u.cache_id == cache.id):
        boots.append((find_boot(ledger, use.boot_id), use))
    results = []
    for result in results_of_cache(ledger, cache.id):
        results.append({**canonical_result(result), "digest": result.digest})
    archive = archive_facts(ledger, cache.id)
    return CacheAuditFacts(cache.row(), cache.state, archive, boots, results)


def archive_facts(ledger: Ledger, cache_id: str) -> ArchiveFacts | None:
    """Where the cache's record is (as this ledger last archived and verified it)."""
    archive = archive_of(ledger, cache_id)
    if archive is None:
        return None
    bucket = ArchiveLocation.parse(archive.location).bucket
    return {
        "location": archive.location,
        "record": f"s3://{bucket}/{archive.record_key}",
        "record_sha256": archive.record_sha256,
        "with_content": archive.with_content,
    }


def _file_digest(path: Path) -> FileBlob | None:
    """A kept evidence file as the archive names its blob."""
    if not path.is_file():
        return None
    data = path.read_bytes()  # a boot's log: small enough to read whole
    return FileBlob(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
