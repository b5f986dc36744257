"""Verify a cache or a result: everything behind it, as the ledger knows it or from S3 alone."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from lifecycle.archive.layout import (
    CACHE_KINDS,
    RESULT_KINDS,
    Key,
    cache_prefix,
    check_id,
    legacy_cache_key,
    legacy_result_key,
    parse_key,
    records_of,
)
from lifecycle.archive.objects import Listing
from lifecycle.archive.record import read_as, read_legacy_cache, stood_on
from lifecycle.archive.restore import TreeAmbiguous, check_cache_id, check_tree
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.audit.verify import (
    BlobChecker,
    Finding,
    archived_record,
    live_cache,
    result_document,
    result_record,
)
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import (
    ArchiveRecord,
    BootArchiveRow,
    VersionRow,
    archive_of,
    boot_archives,
    versions_of,
)
from lifecycle.ledger.boots import CacheRecord, CacheUse, cache_by_id, cache_uses
from lifecycle.ledger.results import ResultRecord, result_archives, results_of_cache
from lifecycle.records import CacheVersion, ResultRecordV2
from lifecycle.results.archive import results_on_cache
from lifecycle.results.model import canonical_result, result_digest

StoreFor = Callable[[str], BlobStore]  # an archive location (s3://bucket/prefix) -> its store
Row = VersionRow | ArchiveRecord | BootArchiveRow  # a record this host wrote or read, by key
_NOT_CHECKED = "not checked (--all-versions checks it)"
_SUPERSEDED = f"history: superseded, and no result here stands on it; {_NOT_CHECKED}"
_UNNEEDED_BOOT = f"history: a boot that touched no version needed now; {_NOT_CHECKED}"
_SUPERSEDED_THERE = f"history: superseded, and no result there stands on it; {_NOT_CHECKED}"


@dataclass(frozen=True)
class VerifyReport:
    """What was checked for one target, and every difference found."""

    target: str
    kind: str  # cache | result | baked image | engine image
    source: str  # "ledger" or the archive location it was verified from alone
    findings: tuple[Finding, ...]

    def __post_init__(self) -> None:
        # A blob several records name (a boot's log, a patch) is checked once, reported once.
        object.__setattr__(self, "findings", tuple(dict.fromkeys(self.findings)))

    @property
    def problems(self) -> list[Finding]:
        """The findings that differ from what was recorded."""
        return [f for f in self.findings if f.problem is not None]

    def marked(self, status: str) -> list[Finding]:
        """The findings that differ from nothing recorded, of one status: `ok`, `collected` or
        `history`."""
        return [f for f in self.findings if f.problem is None and f.status == status]


def verify_cache(
    ledger: Ledger,
    cache: CacheRecord,
    store_for: StoreFor,
    checker: BlobChecker,
    *,
    tree: str | None = None,
    every: bool = False,
) -> list[Finding]:
    """The live cache (if still here) and the records of it this host wrote or read that are
    needed now: its newest version, the version each result here stands on, and the record of
    every boot that started from or left one of those. Older versions and boots are history,
    checked only with `every`; with `tree`, that version alone. Each record is checked exactly
    as this host wrote or read it, whatever other hosts archived since."""
    every = every and tree is None  # a tree asked for is that version alone
    findings = _live(cache, tree)
    uses = cache_uses(ledger, cache_id=cache.id)
    archive = archive_of(ledger, cache.id)
    versions: list[VersionRow | ArchiveRecord] = [*versions_of(ledger, cache.id)]
    if archive is not None and archive.tree_digest is None:  # the previous release's record
        versions.append(archive)
    if not versions and tree is None:
        findings.append(Finding(f"archive of cache {cache.id}", None, "not archived"))
    needed = {tree} if tree is not None else _needed_trees(ledger, cache.id, archive, uses)
    rows: list[tuple[Row, str | None]] = [
        (v, None if every or v.tree_digest in needed else _SUPERSEDED) for v in versions
    ]
    for use in uses:
        touched = {use.tree_digest_before, use.tree_digest_after} - {None}
        why = None if every or touched & needed else _UNNEEDED_BOOT
        rows += [(row, why) for row in boot_archives(ledger, use.boot_id)]
    for row, history in rows:
        store = store_for(row.location)
        relative = store.relative(row.record_key)
        if history is None:
            findings += archived_record(store, relative, row.record_sha256, checker)
        elif tree is None:  # with a tree, the other versions are not what was asked about
            findings.append(Finding(store.where(relative), None, history, "history"))
    return findings


def _needed_trees(
    ledger: Ledger, cache_id: str, archive: ArchiveRecord | None, uses: list[CacheUse]
) -> set[str | None]:
    """The trees of a cache needed now: the newest this host archived or restored (None: a
    record of the previous release), and the one each result recorded here stands on."""
    trees: set[str | None] = {archive.tree_digest} if archive is not None else set()
    with_results = {result.boot_id for result in results_of_cache(ledger, cache_id)}
    trees |= {u.tree_digest_after for u in uses if u.boot_id in with_results}
    return trees


def _live(cache: CacheRecord, tree: str | None) -> list[Finding]:
    """The cache dir, re-hashed, when it is here, free, and (with `tree`) holds that tree."""
    subject = f"live cache {cache.id}"
    if cache.state == "torn-down" or not Path(cache.host_path).exists():
        return [Finding(subject, None, "not on this host (torn down): archive only")]
    if tree is not None and cache.tree_digest != tree:
        return [Finding(subject, None, f"holds tree {cache.tree_digest} now: archive only")]
    if cache.in_use_by:
        note = f"in use by boot {cache.in_use_by}: not re-hashed while a boot may write it"
        return [Finding(subject, None, note)]
    return live_cache(cache.id, cache.host_path, cache.scan_path, cache.tree_digest)


def verify_result(
    ledger: Ledger,
    result: ResultRecord,
    store_for: StoreFor,
    checker: BlobChecker,
    *,
    every: bool = False,
) -> list[Finding]:
    """The result's digest and document, its archived records and the records they name,
    then the exact version of each cache behind it (every version with `every`)."""
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
        findings += result_record(store, relative, archive.record_sha256, result.digest, checker)
    if not archives:
        findings.append(Finding(f"archive of result {result.id}", None, "not archived"))
    for use in cache_uses(ledger, boot_id=result.boot_id):
        cache = cache_by_id(ledger, use.cache_id)
        assert cache is not None, "a cache use refers to a cache row (foreign key)"
        tree = None if every else use.tree_digest_after  # None: it left no tree; the needed ones
        findings += verify_cache(ledger, cache, store_for, checker, tree=tree, every=every)
    return findings


def tree_in_ledger(ledger: Ledger, cache: CacheRecord, prefix: str) -> str:
    """The tree of the cache that `prefix` names among those this host holds or archived."""
    trees = {v.tree_digest for v in versions_of(ledger, cache.id)}
    if cache.tree_digest is not None and cache.state != "torn-down":
        trees.add(cache.tree_digest)
    return one_tree(prefix, trees, cache.id, f"in {ledger}")


def one_tree(prefix: str, trees: Iterable[str | None], cache_id: str, where: str) -> str:
    """The one tree digest among `trees` that starts with `prefix`; else what is wrong."""
    check_tree(prefix)
    found = {tree for tree in trees if tree is not None and tree.startswith(prefix)}
    if len(found) > 1:
        what = f"{len(found)} versions of {cache_id}"
        raise TreeAmbiguous(f"{prefix!r} names {what}: give more digits")
    if not found:
        raise LifecycleError(f"no version {prefix} of cache {cache_id} {where}")
    return found.pop()


def verify_archived(
    store: BlobStore, target: str, checker: BlobChecker, *, every: bool = False
) -> VerifyReport:
    """A result, a cache or one version of it (`CACHE@TREE`) from the archive alone: every
    record and blob behind it; one no longer there, as what gc's records say they collected."""
    url = store.location.url()
    cache_id, at, tree = target.partition("@")
    # The id becomes part of a key: its form is checked before any request (`../../etc`).
    if at:
        check_cache_id(cache_id)
        found = _archived_cache(store, cache_id, checker, tree=tree, every=every)
        return VerifyReport(target, "cache", url, tuple(found))
    check_id(target, "cache or result")
    keys = [item.key for item in store.list(records_of("results", target))]
    if not keys and store.head(store.key(legacy_result_key(target)), checksum=False):
        keys = [legacy_result_key(target)]
    if keys:
        findings = [
            f for relative in keys for f in result_record(store, relative, None, None, checker)
        ]
        return VerifyReport(target, "result", url, tuple(findings))
    found = _archived_cache(store, target, checker, every=every)
    if found:
        return VerifyReport(target, "cache", url, tuple(found))
    gone = _collected(store, checker, target, RESULT_KINDS | CACHE_KINDS)
    if not gone:  # a well-formed id the archive never held: not archived there (exit 1)
        raise ArchiveError(
            f"no cache or result {target!r} at {url}: none archived there, none collected by a gc"
        )
    kind = "result" if any(key.kind in RESULT_KINDS for key in gone) else "cache"
    return VerifyReport(target, kind, url, tuple(gone.values()))


def _archived_cache(
    store: BlobStore,
    cache_id: str,
    checker: BlobChecker,
    *,
    tree: str | None = None,
    every: bool = False,
) -> list[Finding]:
    """The versions of a cache the archive holds that are needed now: the newest written and
    each one a result there stands on (all of them with `every`; with `tree`, that one, or
    what a gc collected of it); or its previous-format record; none when it holds neither."""
    every = every and tree is None  # a tree asked for is that version alone
    listed = {item.key: item for item in store.list(cache_prefix(cache_id, "versions/"))}
    versions = {k: v for k in listed if (v := parse_key(k)) is not None and v.kind == "version"}
    url = store.location.url()
    needed: set[str | None]
    if tree is not None:
        check_tree(tree)
        if not any((v.tree or "").startswith(tree) for v in versions.values()):
            legacy = read_legacy_cache(store, cache_id)  # its tree is in its fingerprint
            if legacy is not None and legacy[2].fingerprint.tree_digest.startswith(tree):
                return archived_record(store, legacy[0], None, checker)
            gone = _collected(store, checker, cache_id, {"version"})
            if not any((key.tree or "").startswith(tree) for key in gone):
                # Well formed, and not archived there: the answer no (exit 1), as restore says.
                raise ArchiveError(
                    f"no version {tree} of cache {cache_id} at {url}: none archived there,"
                    " none collected by a gc"
                )
            full = one_tree(tree, (key.tree for key in gone), cache_id, f"at {url}")
            return [finding for key, finding in gone.items() if key.tree == full]
        needed = {one_tree(tree, (v.tree for v in versions.values()), cache_id, f"at {url}")}
    elif versions:
        needed = {_newest(store, versions, listed)} | _trees_behind_results(store, cache_id)
    elif store.head(store.key(legacy_cache_key(cache_id)), checksum=False):
        return archived_record(store, legacy_cache_key(cache_id), None, checker)
    else:
        return []
    findings: list[Finding] = []
    for key, version in sorted(versions.items()):
        if every or version.tree in needed:
            findings += archived_record(store, key, None, checker)
        elif tree is None:
            findings.append(Finding(store.where(key), None, _SUPERSEDED_THERE, "history"))
    return findings


def _collected(
    store: BlobStore, checker: BlobChecker, target: str, kinds: Set[str]
) -> dict[Key, Finding]:
    """The records of `target` of these kinds that gc's records say a gc removed, each as
    collected: what the ledger's view says of them too. Read from gc's own records (listed and
    read once per location), not from a listing of the whole archive. None is there: one a
    result there stands on is missing, whatever they say (`stood_on`)."""
    stood = stood_on(store, target) if kinds & CACHE_KINDS else {}
    lost = {
        key: Finding(store.where(key.key), f"missing: result {stood[key.key]} there stands on it")
        for key in map(parse_key, stood)
        if key is not None and key.kind in kinds
    }
    return lost | {
        key: Finding(store.where(key.key), None, removal.describe(), "collected")
        for key, removal in checker.gc.of(store, target, kinds).items()
        if key.key not in stood
    }


def _newest(store: BlobStore, versions: dict[str, Key], listed: dict[str, Listing]) -> str | None:
    """The tree of the version archived last, as its record says (one that cannot be read, as
    the server stored it: its check names what is wrong with it). Two archives of one time are
    told apart by lineage: a version another grew from is older."""

    def read(key: str) -> CacheVersion | None:
        try:
            return read_as(store, CacheVersion, key)
        except S3Unavailable:
            raise
        except ArchiveError:  # unreadable: the server's time stands for its own
            return None

    records = {key: read(key) for key in versions}
    parents = {record.parent for record in records.values() if record is not None}

    def archived(key: str) -> datetime:
        record = records[key]
        try:
            return datetime.fromisoformat(record.archived_at) if record else stored(key)
        except ValueError:  # no time in `archived_at`
            return stored(key)

    def stored(key: str) -> datetime:
        # S3 lists times to the second: within it, a record it stored may be the last written
        # (an archive's stamp has milliseconds), and one that cannot be read is checked, never
        # passed over as history by a rounding.
        return listed[key].modified.replace(microsecond=999_999)

    order = {key: (archived(key), versions[key].tree not in parents, key) for key in versions}
    return versions[max(versions, key=order.__getitem__)].tree


def _trees_behind_results(store: BlobStore, cache_id: str) -> set[str | None]:
    """The trees of the cache that the results archived at this location stand on."""
    return {
        ref.tree_digest
        for document in results_on_cache(store, cache_id)
        if isinstance(document, ResultRecordV2)
        for ref in document.caches
        if ref.cache_id == cache_id
    }
