"""`lifecycle verify`: hash again what was recorded, and say exactly what differs.

A live cache is re-hashed file by file (no scan is trusted); every archived object a record
names is downloaded and hashed, at most once per run: unlike teardown's check (listing, ETag,
stored checksum), verify trusts nothing the server says, so it also catches an object
overwritten in place. A record found missing is looked up in what gc recorded removing.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from lifecycle.archive.layout import legacy_cache_key
from lifecycle.archive.record import (
    GcRecords,
    blob_roles,
    load_by_key,
    names_of,
    record_blobs,
    record_packs,
)
from lifecycle.archive.store import RECORD_MAX, ArchiveError, BlobStore, S3Unavailable
from lifecycle.errors import LifecycleError
from lifecycle.fingerprint import Entry, Fingerprint, ScanError, scan
from lifecycle.parallel import pool_map
from lifecycle.records import (
    BootRecordV1,
    CacheRecordV1,
    CacheVersion,
    ResultRecordV1,
    ResultRecordV2,
)
from lifecycle.results.archive import load_result_record


@dataclass(frozen=True)
class Finding:
    """One thing checked: what it is, and what differs (None: as recorded)."""

    subject: str
    problem: str | None
    note: str | None = None
    # When nothing differs: "ok" (checked), "collected" (a gc removed it by rule, its record
    # says so) or "history" (a record no longer needed, not checked without --all-versions).
    # With a problem: UNREAD when it could not be read to be compared, else it differs.
    status: str = "ok"


UNREAD = "unread"


def live_cache(
    cache_id: str, host_path: str, scan_path: str | None, tree: str | None
) -> list[Finding]:
    """Re-hash every file of a cache dir and compare it with the fingerprint recorded for it."""
    subject = f"live cache {cache_id} at {host_path}"
    if scan_path is None or not Path(scan_path).is_file():
        return [Finding(subject, "no recorded fingerprint to compare with")]
    try:
        recorded = Fingerprint.from_json(Path(scan_path).read_text())
    except LifecycleError as exc:
        return [Finding(subject, str(exc))]
    try:
        # No earlier scan given: every file is read and hashed; its masked names kept masked.
        now = scan(Path(host_path), masked_like=recorded)
    except ScanError as exc:  # not re-hashed: nothing is known to differ, nor to be as recorded
        return [Finding(subject, str(exc), status=UNREAD)]
    findings = []
    if tree is not None and recorded.tree_digest != tree:
        problem = f"fingerprint of tree {recorded.tree_digest}, the ledger says {tree}"
        findings.append(Finding(scan_path, problem))
    diff = recorded.diff(now)
    old = {e.path: e for e in recorded.entries}
    new = {e.path: e for e in now.entries}
    root = host_path.rstrip("/")
    findings += [Finding(f"cache file {root}/{p}", _changed(old[p], new[p])) for p in diff.changed]
    findings += [
        Finding(f"cache file {root}/{p}", "added since it was recorded") for p in diff.added
    ]
    findings += [Finding(f"cache file {root}/{p}", "missing: recorded, gone") for p in diff.removed]
    if not diff:
        note = f"{now.files} files re-hashed; tree digest {now.tree_digest} as recorded"
        findings.append(Finding(subject, None, note))
    return findings


def archived_record(
    store: BlobStore, relative: str, record_sha256: str | None, checker: BlobChecker
) -> list[Finding]:
    """A cache's or a boot's record by its key under the prefix, against the sha256 the ledger
    kept (if any) and its own name, and every blob it names, downloaded and hashed (a cache's
    files named by their path, found in its archived fingerprint)."""
    url = store.where(relative)
    findings: list[Finding] = []
    try:
        body = _read(store, relative, record_sha256, findings, checker)
        if body is None:
            return findings
        record = load_by_key(body, relative, url)
        roles = blob_roles(record)
        if not isinstance(record, BootRecordV1):
            fingerprint = _archived_fingerprint(store, record, findings)
            for e in fingerprint.entries if fingerprint else ():
                if e.sha256 is not None:
                    roles.setdefault(e.sha256, f"cache file {e.path} of {record.cache_id}")
        claims = [
            BlobClaim(b.sha256, b.size, roles.get(b.sha256, "blob")) for b in record_blobs(record)
        ]
        # A packed blob is read back with its pack: the pack's sha256 covers its bytes, and
        # the pack was built from blobs each hashed on the way in.
        claims += [
            BlobClaim(sha, size, "pack of cache files", pack=True)
            for sha, size in record_packs(record).items()
        ]
        problems = checker.check(store, claims)
        if swept := checker.swept(store, relative, problems):
            return [swept]
    except S3Unavailable:  # the environment, not the archive: exit 3
        raise
    except ArchiveError as exc:  # unreadable, not a record, or the server did not answer
        return [*findings, Finding(url, str(exc).removeprefix(f"{url}: "))]
    findings += [Finding(subject, problem) for subject, problem in problems]
    if not findings:
        note = f"record and its {len(claims)} blobs downloaded and hashed: as recorded"
        findings.append(Finding(url, None, note))
    return findings


def result_document(path: str | None, sha256: str | None, size: int | None) -> list[Finding]:
    """The result's document as this host kept it, hashed again."""
    if sha256 is None:
        return []
    if path is None or not Path(path).is_file():
        return [Finding(f"document {path}", "missing")]
    data = Path(path).read_bytes()
    found = hashlib.sha256(data).hexdigest()
    if found != sha256 or len(data) != size:
        return [Finding(f"document {path}", f"sha256 {found} ({len(data)} bytes), not {sha256}")]
    return [Finding(f"document {path}", None, "as recorded")]


def result_record(
    store: BlobStore,
    relative: str,
    record_sha256: str | None,
    digest: str | None,
    checker: BlobChecker,
) -> list[Finding]:
    """A result's record: its bytes, its own name, its result's digest, the blobs it names;
    then the records it names (`behind_result`)."""
    url = store.where(relative)
    findings: list[Finding] = []
    try:
        body = _read(store, relative, record_sha256, findings, checker)
        if body is None:
            return findings
        document = load_result_record(body, relative, url)
        if digest is not None and document.digest != digest:
            findings.append(Finding(url, f"result digest {document.digest}, not {digest}"))
        claims = [
            BlobClaim(b.sha256, b.size, _result_role(document, b.sha256)) for b in document.blobs
        ]
        problems = checker.check(store, claims)
        if swept := checker.swept(store, relative, problems):
            return [swept]
        checker.named_by(store, relative, document)
    except S3Unavailable:  # the environment, not the archive: exit 3
        raise
    except ArchiveError as exc:  # unreadable, altered, or the server did not answer
        return [*findings, Finding(url, str(exc).removeprefix(f"{url}: "))]
    findings += [Finding(subject, problem) for subject, problem in problems]
    if not findings:
        note = "record and its blobs downloaded and hashed: as recorded"
        findings.append(Finding(url, None, note))
    return findings + behind_result(store, document, checker)


def behind_result(
    store: BlobStore, document: ResultRecordV1 | ResultRecordV2, checker: BlobChecker
) -> list[Finding]:
    """The records a result's record names (its boot's, each cache's exact version), each
    checked against the sha256 the result's record gives it; the previous release's result
    names its caches' one record each."""
    if isinstance(document, ResultRecordV1):
        return [
            f
            for cache_id in document.caches
            for f in archived_record(store, legacy_cache_key(cache_id), None, checker)
        ]
    findings = archived_record(store, document.boot.key, document.boot.sha256, checker)
    for ref in document.caches:
        if ref.record is None:
            note = f"tree {ref.tree_digest} was not archived before the cache changed again"
            findings.append(Finding(f"version of cache {ref.cache_id}", None, note))
        else:
            findings += archived_record(store, ref.record.key, ref.record.sha256, checker)
    return findings


def _read(
    store: BlobStore,
    relative: str,
    record_sha256: str | None,
    findings: list[Finding],
    checker: BlobChecker,
) -> bytes | None:
    """A record's bytes, noting in `findings` what differs from the sha256 recorded for it;
    None (and a finding) when it is not there: collected, when a gc's record says it removed
    it and no record read here that names it is there still, else missing."""
    url = store.where(relative)
    body = store.read(relative)
    if body is None:
        removal = checker.gc.removal(store, relative, checker.named.get(url))
        if removal is not None:
            findings.append(Finding(url, None, removal.describe(), "collected"))
        else:
            findings.append(Finding(url, "missing"))
        return None
    found = hashlib.sha256(body).hexdigest()
    if record_sha256 is not None and found != record_sha256:
        findings.append(Finding(url, f"sha256 {found}, not the {record_sha256} recorded"))
    return body


def _archived_fingerprint(
    store: BlobStore, record: CacheRecordV1 | CacheVersion, findings: list[Finding]
) -> Fingerprint | None:
    """The record's fingerprint blob, read back; its tree digest must be the record's."""
    described = record.fingerprint
    sink = io.BytesIO()
    key = store.blob_key(described.sha256)
    if store.download_sha256(key, sink, cap=RECORD_MAX) != described.sha256:
        return None  # the blob check names it
    try:
        fingerprint = Fingerprint.from_json(sink.getvalue().decode())
    except (LifecycleError, UnicodeDecodeError) as exc:
        findings.append(Finding(store.url(key), f"archived fingerprint: {exc}"))
        return None
    if fingerprint.tree_digest != described.tree_digest:
        problem = f"tree digest {fingerprint.tree_digest}, the record says {described.tree_digest}"
        findings.append(Finding(store.url(key), problem))
    return fingerprint


def _result_role(document: ResultRecordV1 | ResultRecordV2, sha256: str) -> str:
    if isinstance(document, ResultRecordV1):
        log = document.boot.log
        if log is not None and log.sha256 == sha256:
            return f"log of boot {document.boot.boot.id}"
    return f"document of result {document.result_id}"


def _changed(old: Entry, new: Entry) -> str:
    """What differs in one path between the recorded fingerprint and the files now."""
    if old.kind != new.kind:
        return f"was a {old.kind}, now a {new.kind}"
    parts = []
    if old.sha256 != new.sha256:
        parts.append(f"content differs: sha256 {new.sha256} now, {old.sha256} recorded")
    if old.size != new.size:
        parts.append(f"{new.size} bytes now, {old.size} recorded")
    if old.mode != new.mode:
        parts.append(f"mode {new.mode:o} now, {old.mode:o} recorded")
    if old.link != new.link:
        parts.append(f"links to {new.link!r} now, {old.link!r} recorded")
    return "; ".join(parts) or "changed"


@dataclass(frozen=True)
class BlobClaim:
    """A blob a record names: its sha256, its size, and what it holds (for the message)."""

    sha256: str
    size: int | None
    what: str
    pack: bool = False  # a pack of small blobs, not a blob


class _Counter:
    """A sink that only counts the bytes written to it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


@dataclass
class BlobChecker:
    """Download-and-hash with a memory: blobs shared by several records are read once, and
    gc's records at each location once, when a record is first found missing there."""

    workers: int = 8
    seen: dict[tuple[str, str], tuple[str, str] | None] = field(default_factory=dict)
    gc: GcRecords = field(default_factory=GcRecords)
    # s3:// URL of a record -> the key of a result's record read here that names it: one gone
    # that such a record still names was lost, not collected (GcRecords.removal).
    named: dict[str, str] = field(default_factory=dict)

    def named_by(
        self, store: BlobStore, relative: str, document: ResultRecordV1 | ResultRecordV2
    ) -> None:
        """Remember the records a result's record read here names."""
        self.named |= {store.where(key): relative for key in names_of(document)}

    def swept(
        self, store: BlobStore, relative: str, problems: Sequence[tuple[str, str]]
    ) -> Finding | None:
        """A record read a moment ago some of whose blobs are missing now: collected, when it
        is gone too and gc's records say a gc removed it (its sweep ran meanwhile); else None,
        and its blobs are missing, whatever a gc's record says of them."""
        if not any(problem == "missing" for _, problem in problems):
            return None
        removal = self.gc.swept_since(store, relative)
        if removal is None:
            return None
        return Finding(store.where(relative), None, removal.describe(), "collected")

    def check(self, store: BlobStore, claims: Sequence[BlobClaim]) -> list[tuple[str, str]]:
        """(object, what differs) for each claimed blob not on the server with those bytes."""
        todo = [c for c in claims if (store.location.url(), c.sha256) not in self.seen]
        found = pool_map(lambda c: _one(store, c), todo, self.workers, "verify")
        for claim, problem in zip(todo, found, strict=True):
            self.seen[(store.location.url(), claim.sha256)] = problem
        problems = [self.seen[(store.location.url(), c.sha256)] for c in claims]
        return sorted({p for p in problems if p is not None})


def _one(store: BlobStore, claim: BlobClaim) -> tuple[str, str] | None:
    key = (store.pack_key if claim.pack else store.blob_key)(claim.sha256)
    where = f"{store.url(key)} ({claim.what})"
    counter = _Counter()
    try:
        # Only write() is called on the sink: a counter stands in for a file.
        found = store.download_sha256(key, cast(BinaryIO, counter))
    except S3Unavailable:  # the environment, not the archive: exit 3
        raise
    except ArchiveError as exc:
        return where, f"cannot download: {exc}"
    if found is None:
        return where, "missing"
    if found != claim.sha256:
        return where, f"content has sha256 {found}, not the sha256 its key and record name"
    if claim.size is not None and counter.size != claim.size:
        return where, f"{counter.size} bytes, not the {claim.size} recorded"
    return None
