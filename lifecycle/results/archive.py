"""A result's record in S3 (`lifecycle-result-record/1`), next to the caches' records.

Two kinds of object join the archive layout (lifecycle.archive.store):

- `results/<result>.json`: the record, written **last** as the commit marker, and only once
  the record of every cache the result's boot used lists that boot, so the chain an audit
  follows from it is whole in S3;
- `results-by-cache/<cache>/<result>`: one empty marker per cache, written before the
  record, so `audit cache --from` lists a cache's results without reading every record.

The record is one JSON object, keys sorted:

    format        "lifecycle-result-record/1"
    result_id     the result's id; digest: sha256 of `result` in canonical JSON
    result        the canonical result (lifecycle.results.model.canonical_result)
    boot          {boot (row), hook_runs, log: {sha256, size} | null}
    caches        the ids of the caches the boot used, sorted
    image         the image snapshot (id, tags, labels) or null
    manifest      the resolved-manifest snapshot (digest, file, canonical, patches) or null
    blobs         [{sha256, size, md5}]: the result's document and the boot's log
    host, tool_version, archived_at
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.record import (
    BlobSource,
    RecordPlan,
    boot_facts,
    evidence_blob,
    load_record,
    parse_record,
    read_snapshot,
    render_record,
    same_record,
)
from lifecycle.archive.store import ArchiveError, BlobStore, b64_sha256
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of
from lifecycle.ledger.boots import cache_uses
from lifecycle.ledger.results import (
    ResultArchiveRecord,
    ResultRecord,
    record_result_archive,
    unarchived_results,
)
from lifecycle.records import RESULT_FORMAT, RecordInvalid, ResultRecordV1, parse_result_record
from lifecycle.results.add import find_boot
from lifecycle.results.model import canonical_result, result_digest

FORMAT = RESULT_FORMAT
Say = Callable[[str], None]


def result_key(store: BlobStore, result_id: str) -> str:
    """`PREFIX/results/<result>.json`."""
    return store.location.key("results", f"{result_id}.json")


def marker_prefix(store: BlobStore, cache_id: str) -> str:
    """`PREFIX/results-by-cache/<cache>/`: one empty object per result of the cache."""
    return store.location.key("results-by-cache", cache_id) + "/"


@dataclass
class Coverage:
    """Which boots each cache's record in S3 lists, asked once per cache per run."""

    store: BlobStore
    boots: dict[str, set[str] | None] = field(default_factory=dict)  # None: no record there

    def problem(self, cache_id: str, boot_id: str) -> str | None:
        """None when the cache's record lists the boot; else why the chain breaks there."""
        if cache_id not in self.boots:
            body = self.store.get_record(cache_id)
            where = self.store.url(self.store.record_key(cache_id))
            document = None if body is None else load_record(body, where)
            listed = document.boot_ids() if document else None
            self.boots[cache_id] = listed
        listed = self.boots[cache_id]
        if listed is None:
            return f"cache {cache_id} has no record at {self.store.location.url()}"
        if boot_id not in listed:
            return f"the archived record of cache {cache_id} predates boot {boot_id}"
        return None


def archive_result(
    ledger: Ledger, store: BlobStore, result: ResultRecord, *, host: str, tool_version: str
) -> ResultArchiveRecord:
    """Upload the result's blobs, its markers, then its record; read back; record it."""
    boot = find_boot(ledger, result.boot_id)
    cache_ids = sorted(u.cache_id for u in cache_uses(ledger, boot_id=boot.id))
    sources: dict[str, BlobSource] = {}
    if result.document_path is not None:
        ref = evidence_blob(Path(result.document_path), f"document of {result.id}", sources)
        if ref["sha256"] != result.document_sha256:
            raise ArchiveError(f"{result.document_path}: changed since result {result.id} took it")
    canonical = canonical_result(result)
    document = {
        "format": FORMAT,
        "result_id": result.id,
        "result": canonical,
        "digest": result_digest(canonical),
        "boot": boot_facts(ledger, boot, sources),
        "caches": cache_ids,
        "image": read_snapshot(ledger.home.image_snapshot(boot.image_id)),
        "manifest": read_snapshot(ledger.home.manifest_snapshot(boot.manifest_digest)),
        "host": host,
        "tool_version": tool_version,
    }
    for source in sources.values():
        if source.data is not None:
            store.put_blob(source.sha256, source.data)
        elif not store.has_blob(source.sha256):
            with source.open() as handle:
                store.upload_blob(source.sha256, handle)
        problem = store.verify_blob(source.sha256, size=source.size)
        if problem:
            raise ArchiveError(f"not verified after upload: {problem} ({source.what})")
    for cache_id in cache_ids:
        _put(store, marker_prefix(store, cache_id) + result.id, b"")
    md5s = {sha: source.md5 or "" for sha, source in sources.items()}
    body = render_record(RecordPlan(document, sources), md5s, _stamp())
    key = result_key(store, result.id)
    load_result_record(body, store.url(key))  # what is written must read back
    existing = get_object(store, key)
    if existing is not None and same_record(existing, body):
        body = existing
    else:
        _put(store, key, body, "application/json")
        if get_object(store, key) != body:
            raise ArchiveError(f"{store.url(key)}: reads back different")
    archived_at = json.loads(body)["archived_at"]
    sha = hashlib.sha256(body).hexdigest()
    record = ResultArchiveRecord(result.id, store.location.url(), key, sha, archived_at)
    record_result_archive(ledger, record)
    return record


def archive_pending_results(
    ledger: Ledger, store: BlobStore, say: Say, *, host: str, tool_version: str
) -> dict[str, tuple[str, ...]]:
    """Archive every result not yet here whose caches' records here list its boot.

    Results whose caches were never archived here are left alone without a word (they may go
    elsewhere); one whose caches were, but before its boot, is named with what it waits for.
    Returns result id -> the caches behind it, for each result archived.
    """
    url = store.location.url()
    coverage = Coverage(store)
    done: dict[str, tuple[str, ...]] = {}
    for result in unarchived_results(ledger, url):
        caches = [u.cache_id for u in cache_uses(ledger, boot_id=result.boot_id)]
        archives = [archive_of(ledger, cache_id) for cache_id in caches]
        if any(a is None or a.location != url for a in archives):
            continue
        problems = [p for c in caches if (p := coverage.problem(c, result.boot_id))]
        if problems:
            say(f"result {result.id}: not archived yet: {problems[0]}; archive that cache again")
            continue
        record = archive_result(ledger, store, result, host=host, tool_version=tool_version)
        say(f"result {result.id}: record {store.url(record.record_key)}")
        done[result.id] = tuple(sorted(caches))
    return done


def load_result_record(body: bytes, where: str) -> ResultRecordV1:
    """A result record, checked against its format; refused when its result is not the one
    its digest names (altered)."""
    try:
        document = parse_result_record(parse_record(body, where, FORMAT))
    except RecordInvalid as exc:
        raise ArchiveError(f"{where}: not a valid {FORMAT} record: {exc}") from None
    if result_digest(document.result) != document.digest:
        raise ArchiveError(f"{where}: the result is not the one its digest names (altered)")
    return document


def results_of_cache(store: BlobStore, cache_id: str) -> list[str]:
    """The ids of every result whose record marks it as standing on the cache."""
    prefix = marker_prefix(store, cache_id)
    found: list[str] = []
    try:
        pages = store.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=store.location.bucket, Prefix=prefix):
            found.extend(item["Key"][len(prefix) :] for item in page.get("Contents", []))
    except (BotoCoreError, ClientError) as exc:
        raise store.error(exc, prefix) from exc
    return sorted(name for name in found if name and "/" not in name)


def get_object(store: BlobStore, key: str) -> bytes | None:
    """A small object's bytes, or None when it is absent."""
    sink = io.BytesIO()
    return None if store.download_sha256(key, sink) is None else sink.getvalue()


def _put(store: BlobStore, key: str, body: bytes, content_type: str = "text/plain") -> None:
    # With ChecksumSHA256, as every write to the archive: the server refuses a damaged body.
    try:
        store.client.put_object(
            Bucket=store.location.bucket,
            Key=key,
            Body=body,
            ContentLength=len(body),
            ContentType=content_type,
            ChecksumSHA256=b64_sha256(hashlib.sha256(body).hexdigest()),
        )
    except (BotoCoreError, ClientError) as exc:
        raise store.error(exc, key) from exc


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
