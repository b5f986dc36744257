"""Archive caches: fresh scan, blobs uploaded and verified, the record last, then the ledger.

The order is the safety argument. Blobs are content-addressed, so uploading one twice is
harmless and a re-run after an interruption sends only what is missing. The record is written
only after every blob it names is verified on the server, so a record's existence means its
archive is complete; the ledger row (which lets teardown consider the cache) is written only
after the record itself is read back. A failure at any point leaves no record and no row.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import __version__
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import (
    BlobSource,
    RecordPlan,
    carry_over,
    load_record,
    plan_record,
    record_blobs,
    render_record,
    same_record,
)
from lifecycle.archive.store import ArchiveError, BlobRef, BlobStore, S3Unavailable, os_problem
from lifecycle.archive.transfer import Progress, digest_all, upload_all
from lifecycle.errors import LifecycleError
from lifecycle.fingerprint import Fingerprint, scan
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import ArchiveRecord, archive_of, known_md5s, record_archive
from lifecycle.ledger.boots import CacheRecord, Scanned, all_caches, cache_by_id, record_scan
from lifecycle.records import CacheRecordV1
from lifecycle.table import human_bytes


@dataclass(frozen=True)
class ArchiveReport:
    """What archiving one cache did (or, in a dry run, would do)."""

    cache_id: str
    location: str  # s3://bucket/prefix
    record_key: str
    blobs: int  # every blob the record refers to
    blobs_uploaded: int  # sent by this run (dry run: would be sent)
    bytes_uploaded: int
    with_content: bool
    verified: bool
    dry_run: bool
    blobs_present: int = 0  # on the server intact (dry run: or sent for an earlier cache)
    bytes_total: int = 0  # of every blob the record refers to
    tree_digest: str | None = None
    record_sha256: str | None = None
    record_written: bool = False  # False when the server's record already said the same
    to_upload: tuple[tuple[str, int, str], ...] = ()  # dry run: (sha256, size, what) of each
    # Results standing on this cache whose records the same run wrote (lifecycle.results).
    results: tuple[str, ...] = ()


def verify_archive(
    store: BlobStore, cache_id: str, expected_record_sha256: str | None, *, workers: int = 8
) -> list[str]:
    """[] when the record (matching the ledger's sha256, if given) and all its blobs are intact.

    Otherwise one line per bad object, naming it; a server that cannot be asked is one line too.
    """
    return list(fetch_verified(store, cache_id, expected_record_sha256, workers=workers).problems)


@dataclass(frozen=True)
class VerifiedRecord:
    """A cache's record as the server holds it now, and every object of it that does not verify."""

    problems: tuple[str, ...]  # () when the record and every blob it names are intact
    document: CacheRecordV1 | None  # the record, when there is one that parses
    answered: bool = True  # False: the server could not be asked, so nothing is known


def fetch_verified(
    store: BlobStore, cache_id: str, expected_record_sha256: str | None, *, workers: int = 8
) -> VerifiedRecord:
    """Read the cache's record and check it and every blob it names against the server."""
    url = store.url(store.record_key(cache_id))
    try:
        body = store.get_record(cache_id)
        if body is None:
            return VerifiedRecord((f"{url}: missing",), None)
        problems = []
        found = hashlib.sha256(body).hexdigest()
        if expected_record_sha256 and found != expected_record_sha256:
            problems.append(f"{url}: sha256 {found}, not the {expected_record_sha256} recorded")
        document = load_record(body, url)
        checked = store.check_blobs(record_blobs(document), workers)
    except S3Unavailable:
        raise
    except ArchiveError as exc:
        return VerifiedRecord((f"{url}: cannot verify: {exc}",), None)
    problems += sorted(problem for problem in checked.values() if problem)
    return VerifiedRecord(tuple(problems), document)


def archive_caches(
    ledger: Ledger,
    client: Any,
    location: ArchiveLocation,
    cache_ids: Sequence[str],
    *,
    with_content: bool,
    dry_run: bool,
    progress: Progress | None,
    workers: int = 8,
) -> list[ArchiveReport]:
    """Archive each cache (all checked archivable first); stops at the first that fails."""
    store = BlobStore(client, location)
    say = progress or (lambda line: None)
    caches = [archivable(ledger, cache_id) for cache_id in cache_ids]
    # A dry run uploads nothing, so what an earlier cache of the run would send is counted
    # as there for the later ones, as it would be.
    sent: set[str] = set()
    reports = [
        _archive(
            ledger, store, cache, with_content, dry_run=dry_run, say=say, workers=workers, sent=sent
        )
        for cache in caches
    ]
    return reports


def archivable(ledger: Ledger, cache_id: str) -> CacheRecord:
    """The cache, if it can be archived now: known, not torn down, no boot writing it."""
    cache = cache_by_id(ledger, cache_id)
    if cache is None:
        import difflib

        known = [c.id for c in all_caches(ledger)]
        near = difflib.get_close_matches(cache_id, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else "; `lifecycle caches` lists them"
        raise LifecycleError(f"no cache {cache_id!r} in the ledger{hint}")
    if cache.in_use_by:
        raise ArchiveError(
            f"cache {cache.id} is in use by boot {cache.in_use_by}: it is archived only while"
            " no boot writes it; archive it after the boot ends"
        )
    if cache.state == "torn-down":
        raise ArchiveError(f"cache {cache.id} was torn down: its files are gone")
    return cache


@dataclass(frozen=True)
class _Planned:
    """One cache's archive worked out: its record, its blobs, what the server lacks."""

    cache: CacheRecord
    plan: RecordPlan
    md5s: dict[str, str]  # known before the upload; the uploads add the rest
    todo: list[BlobSource]  # missing or damaged on the server
    existing: bytes | None  # the server's record of the cache, if any
    report: ArchiveReport


def _archive(
    ledger: Ledger,
    store: BlobStore,
    cache: CacheRecord,
    with_content: bool,
    *,
    dry_run: bool,
    say: Progress,
    workers: int,
    sent: set[str],
) -> ArchiveReport:
    url = store.location.url()
    try:
        planned = _plan(
            ledger, store, cache, with_content, dry_run=dry_run, workers=workers, sent=sent
        )
        report = planned.report
        say(
            f"{cache.id}: {report.blobs} blobs ({human_bytes(report.bytes_total)}),"
            f" {report.blobs_present} already on the server, {report.blobs_uploaded} to upload"
        )
        if dry_run:
            return planned.report
        md5s = planned.md5s | upload_all(store, cache.id, planned.todo, workers, say)
        # The rest were verified on the server by the survey a moment ago, in this same run.
        uploaded = [BlobRef(s.sha256, s.size, md5s[s.sha256]) for s in planned.todo]
        problems = sorted(filter(None, store.check_blobs(uploaded, workers).values()))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ArchiveError(f"not verified after upload: {problems[0]}{more}")
        body, written = _commit_record(store, planned, md5s)
    except ArchiveError as exc:
        raise exc.within(f"archive of {cache.id} to {url} failed") from exc
    except OSError as exc:  # reading the cache or the evidence
        raise ArchiveError(f"archive of {cache.id} to {url} failed: {os_problem(exc)}") from exc
    sha = hashlib.sha256(body).hexdigest()
    archived_at = json.loads(body)["archived_at"]
    record = ArchiveRecord(
        cache.id, url, report.record_key, sha, report.with_content, report.blobs,
        report.bytes_uploaded, archived_at, verified_at=_stamp(),
    )  # fmt: skip
    record_archive(ledger, record, md5s)
    say(f"{cache.id}: verified; record {store.url(report.record_key)}")
    return replace(report, verified=True, record_sha256=sha, record_written=written)


def _plan(
    ledger: Ledger,
    store: BlobStore,
    cache: CacheRecord,
    with_content: bool,
    *,
    dry_run: bool,
    workers: int,
    sent: set[str],
) -> _Planned:
    """Scan, collect the record and its blobs, and ask the server which it already holds."""
    url = store.location.url()
    previous = archive_of(ledger, cache.id)
    # Never downgrade: once a cache's files were archived, every later record of it holds them
    # too (wherever it goes), so a teardown that relies on the newest record never loses them.
    with_content = with_content or bool(previous and previous.with_content)
    fingerprint, cache = _fresh_scan(ledger, cache, keep=not dry_run)
    existing = store.get_record(cache.id)
    where = store.url(store.record_key(cache.id))
    earlier = None if existing is None else load_record(existing, where)
    plan = plan_record(
        ledger,
        cache,
        fingerprint,
        with_content=with_content,
        host=socket.gethostname(),
        tool_version=__version__,
    )
    plan = carry_over(plan, earlier)
    sources = plan.sources
    md5s = {sha: source.md5 for sha, source in sources.items() if source.md5 is not None}
    md5s |= known_md5s(ledger, (sha for sha in sources if sha not in md5s))
    listed = store.survey(sources, workers)
    # The server's ETag of a blob it holds is checked against an md5, so the few held blobs
    # this host never sent are read for theirs; a missing blob's md5 comes with its upload.
    unread = {sha: sources[sha] for sha in sources.keys() - md5s.keys() if listed.get(sha)}
    md5s |= digest_all(unread, workers)
    refs = [BlobRef(sha, source.size, md5s.get(sha)) for sha, source in sources.items()]
    found = store.check_blobs(refs, workers, listed)
    todo = [sources[sha] for sha, problem in found.items() if problem and sha not in sent]
    if dry_run:
        sent.update(source.sha256 for source in todo)
    report = ArchiveReport(
        cache_id=cache.id,
        location=url,
        record_key=store.record_key(cache.id),
        blobs=len(refs),
        blobs_uploaded=len(todo),
        bytes_uploaded=sum(source.size for source in todo),
        with_content=with_content,
        verified=False,
        dry_run=dry_run,
        blobs_present=len(refs) - len(todo),
        bytes_total=sum(ref.size for ref in refs),
        tree_digest=fingerprint.tree_digest,
        to_upload=tuple((s.sha256, s.size, s.what) for s in todo) if dry_run else (),
    )
    return _Planned(cache, plan, md5s, todo, existing, report)


def _fresh_scan(
    ledger: Ledger, cache: CacheRecord, *, keep: bool
) -> tuple[Fingerprint, CacheRecord]:
    """Scan the cache again (cheap when unchanged); a changed scan is kept and recorded."""
    previous = None
    if cache.scan_path and Path(cache.scan_path).is_file():
        with suppress(LifecycleError):  # a damaged scan file only costs a full re-hash
            previous = Fingerprint.from_json(Path(cache.scan_path).read_text())
    try:
        fingerprint = scan(Path(cache.host_path), previous)
    except LifecycleError as exc:
        raise ArchiveError(f"cannot scan: {exc}") from exc
    if fingerprint is previous:
        return fingerprint, cache
    now = _stamp()
    scan_path = cache.scan_path
    if keep:
        name = f"archive-{now.replace(':', '')}.json"
        scan_path = str(
            ledger.keep_evidence(f"scans/{cache.id}", name, fingerprint.to_json().encode())
        )
    updated = replace(
        cache,
        tree_digest=fingerprint.tree_digest,
        files=fingerprint.files,
        bytes=fingerprint.bytes,
        scan_path=scan_path,
        scanned_at=now,
    )
    if keep and scan_path is not None:
        # What the cache holds is a fact whether or not the archive then succeeds.
        facts = Scanned(
            fingerprint.tree_digest, fingerprint.files, fingerprint.bytes, scan_path, now
        )
        record_scan(ledger, cache.id, facts)
    return fingerprint, updated


def _commit_record(store: BlobStore, planned: _Planned, md5s: dict[str, str]) -> tuple[bytes, bool]:
    """Write the record unless the server's says the same; read it back. (body, written)."""
    cache_id, existing = planned.cache.id, planned.existing
    body = render_record(planned.plan, md5s, _stamp())
    load_record(body, store.url(store.record_key(cache_id)))  # what is written must read back
    if existing is not None and same_record(existing, body):
        return existing, False
    store.put_record(cache_id, body)
    # Read back whole: the record is small, and this checks it whatever checksum the server
    # keeps for it.
    if store.get_record(cache_id) != body:
        raise ArchiveError(f"{store.url(store.record_key(cache_id))}: reads back different")
    return body, True


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
