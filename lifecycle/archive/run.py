"""Archive caches: a fresh scan; each boot that used the cache, its own record; then the
cache's version, its own record; every one verified, then the ledger.

The order is the safety argument (docs/verbs/archive.md, "Why the order is safe"): a record
only after every blob it names verified, the ledger's rows only after the records.
"""

from __future__ import annotations

import functools
import hashlib
import socket
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import __version__
from lifecycle.archive import packs, verify
from lifecycle.archive.layout import marker, marker_body, record_key, version_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.plans import (
    BlobSource,
    RecordPlan,
    plan_boot_record,
    plan_version,
    render_record,
)
from lifecycle.archive.record import load_as, placements, read_legacy_cache, record_packs
from lifecycle.archive.store import ArchiveError, BlobRef, BlobStore, os_problem
from lifecycle.archive.transfer import Progress, Sent, upload_all
from lifecycle.archive.verify import Relied
from lifecycle.boot.caches import damage
from lifecycle.errors import EXIT_ENVIRONMENT, DiskFull, LifecycleError, did_you_mean
from lifecycle.fingerprint import Fingerprint, scan
from lifecycle.home import Home
from lifecycle.leases import lease_held
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import (
    ArchiveRecord,
    BootArchiveRow,
    VersionRow,
    archive_of,
    forget_versions,
    keep_pack_indexes,
    prune_pack_indexes,
    record_boot_archive,
    record_version,
    remember_honest_packs,
    versions_of,
)
from lifecycle.ledger.boots import (
    BootRecord,
    CacheRecord,
    Scanned,
    TaintedFile,
    all_caches,
    cache_by_id,
    last_boot_ended,
    record_damage,
    record_scan,
    settle_dead_boots,
)
from lifecycle.records import BootRecordV1, CacheVersion
from lifecycle.table import human_bytes
from lifecycle.withheld import secrets_in_cache, secrets_on_host


@dataclass(frozen=True)
class ArchiveReport:
    """What archiving one cache did (or, in a dry run, would do)."""

    cache_id: str
    location: str  # s3://bucket/prefix
    record_key: str  # the version's record
    blobs: int  # every blob the records of this run refer to
    blobs_uploaded: int  # sent by this run (dry run: would be sent)
    bytes_uploaded: int
    with_content: bool
    verified: bool
    dry_run: bool
    blobs_present: int = 0  # on the server intact (dry run: or sent for an earlier cache)
    bytes_total: int = 0  # of every blob the records refer to
    tree_digest: str | None = None
    record_sha256: str | None = None
    record_written: bool = False  # False when an intact version of this tree was there
    parent: str | None = None  # the tree this version grew from
    boots: tuple[str, ...] = ()  # boots whose records this run wrote
    to_upload: tuple[tuple[str, int, str], ...] = ()  # dry run: (sha256, size, what) of each
    # Results standing on this cache whose records the same run wrote (lifecycle.results).
    results: tuple[str, ...] = ()
    # Objects the records rely on that were found damaged on the server, and put right.
    repaired: tuple[str, ...] = ()


def archive_caches(
    ledger: Ledger,
    home: Home,
    client: Any,
    location: ArchiveLocation,
    cache_ids: Sequence[str],
    *,
    host_env: Mapping[str, str],
    with_content: bool,
    dry_run: bool,
    progress: Progress | None,
    workers: int = 8,
) -> list[ArchiveReport]:
    """Archive each cache (all checked archivable first). One that cannot be archived (a file
    unread, a secret in its records) does not keep the others: NotAllArchived, at the end,
    names it with what was archived; the environment failing (S3 not answering, a full disk)
    stops the run. `host_env` holds the secrets the scans mask and look for
    (lifecycle.withheld)."""
    say = progress or (lambda line: None)
    secrets = secrets_on_host(ledger, host_env)
    run = _Run(home, BlobStore(client, location), say, workers, dry_run, secrets)
    if not dry_run:
        settle_dead_boots(ledger, home, _stamp())  # a boot that died holds nothing
    caches = [archivable(ledger, home, cache_id) for cache_id in cache_ids]
    if len(caches) == 1:
        return [_archive(ledger, run, caches[0], with_content)]  # its error is the answer
    archived, failed = [], {}
    for cache in caches:
        try:
            archived.append(_archive(ledger, run, cache, with_content))
        except ArchiveError as exc:
            if exc.exit_code == EXIT_ENVIRONMENT:
                raise
            failed[cache.id] = str(exc)
            say(f"{cache.id}: not archived: {exc}")
    if failed:
        raise NotAllArchived(archived, failed)
    return archived


class NotAllArchived(ArchiveError):
    """Some caches of a run could not be archived; the others were (exit 1)."""

    def __init__(self, archived: list[ArchiveReport], failed: Mapping[str, str]) -> None:
        self.archived, self.failed = archived, dict(failed)
        count = f"{len(failed)} of {len(failed) + len(archived)} caches not archived"
        super().__init__(f"{count}: {'; '.join(failed.values())}")

    def within(self, context: str) -> ArchiveError:
        return ArchiveError(f"{context}: {self}")


@dataclass
class _Run:
    """What the archives of one run share."""

    home: Home  # where the boots' snapshots of their manifests, images and patches are
    store: BlobStore
    say: Progress
    workers: int
    dry_run: bool
    secrets: Mapping[str, str]  # name -> value: none of them leaves this host
    # A dry run uploads nothing, so what an earlier cache of the run would send is counted
    # as there for the later ones, as it would be.
    sent: set[str] = field(default_factory=set)
    indexes: dict[str, packs.Index] = field(default_factory=dict)  # read once a run
    checked_boots: set[str] = field(default_factory=set)  # whose records stand (heal)


class CacheInUse(ArchiveError):
    """A live boot writes the cache (it holds its lease): it is archived once the boot ends."""


def archivable(ledger: Ledger, home: Home, cache_id: str) -> CacheRecord:
    """The cache, if it can be archived now: known, not torn down, no live boot writing it
    (one whose process died holds no lease: it is settled first, or in a dry run, would be)."""
    cache = cache_by_id(ledger, cache_id)
    if cache is None:
        known = (c.id for c in all_caches(ledger))
        hint = did_you_mean(cache_id, known, "; `lifecycle caches` lists them")
        raise LifecycleError(f"no cache {cache_id!r} in the ledger{hint}")
    if cache.in_use_by and lease_held(home, cache.id):
        raise CacheInUse(
            f"cache {cache.id} is in use by boot {cache.in_use_by}: it is archived only while"
            " no boot writes it; archive it after the boot ends"
        )
    if cache.state == "torn-down":
        raise ArchiveError(f"cache {cache.id} was torn down: its files are gone")
    return cache


@dataclass(frozen=True)
class _Planned:
    """One cache's archive worked out: its records, their blobs, what the server lacks."""

    cache: CacheRecord
    tree_digest: str
    boots: list[tuple[BootRecord, RecordPlan]]  # boots whose record at the location is due
    version: RecordPlan | None  # None: a version of this tree stands there already
    standing: VersionRow | None  # the version of this tree there, whole (once repaired)
    packed: dict[str, packs.Placed]  # blobs already in a pack the server holds intact
    pack_sizes: dict[str, int]  # of those packs
    todo: list[BlobSource]  # missing or damaged on the server
    relied: Relied  # what is damaged among the objects the records name, and its repair
    report: ArchiveReport


def _archive(ledger: Ledger, run: _Run, cache: CacheRecord, with_content: bool) -> ArchiveReport:
    store, say = run.store, run.say
    url = store.location.url()
    try:
        planned = _plan(ledger, run, cache, with_content)
        report = planned.report
        say(
            f"{cache.id}: {report.blobs} blobs ({human_bytes(report.bytes_total)}),"
            f" {report.blobs_present} already on the server, {report.blobs_uploaded} to upload"
        )
        if run.dry_run:
            return report
        # A pack's name is its bytes: one hashed honest here, or written here, stays honest,
        # and no later archive on this host fetches it again to know so, nor reads its index.
        relied = planned.relied
        remember_honest_packs(ledger, relied.hashed, "hashed", _stamp())
        if relied.listed is not None:
            prune_pack_indexes(ledger, url, relied.listed)
        keep_pack_indexes(ledger, url, relied.indexes)
        _set_aside(ledger, run, relied)
        # The rest were verified on the server by the survey a moment ago, in this same run.
        uploaded = _send(run, cache.id, planned.todo, relied)
        remember_honest_packs(ledger, uploaded.packs.keys(), "written", _stamp())
        keep_pack_indexes(ledger, url, uploaded.indexes)
        booted = [_write_boot(store, boot, plan) for boot, plan in planned.boots]
        run.checked_boots.update(boot.id for boot, _ in planned.boots)
        version, written = _write_version(store, planned, uploaded)
        _resend_removed(run, planned, uploaded)
        for row in booted:
            record_boot_archive(ledger, row)
        _record(ledger, planned, version)
        # A version of this tree that names what is gone for good would otherwise still be
        # checked by `verify` (every version of the tree) and named by a result recorded later
        # (the first version of a tree): the one just verified takes its place.
        forget_versions(ledger, relied.superseded)
    except (ArchiveError, DiskFull) as exc:
        raise exc.within(f"archive of {cache.id} to {url} failed") from exc
    except OSError as exc:  # reading the cache or the evidence
        raise ArchiveError(f"archive of {cache.id} to {url} failed: {os_problem(exc)}") from exc
    say(f"{cache.id}: verified; version {store.url(version.record_key)}")
    return replace(
        report,
        record_key=version.record_key,
        verified=True,
        record_sha256=version.record_sha256,
        record_written=written,
    )


def _plan(ledger: Ledger, run: _Run, cache: CacheRecord, with_content: bool) -> _Planned:
    """Scan, collect the records and their blobs, and ask the server which it already holds;
    check what the records rely on that is there already (lifecycle.archive.verify)."""
    store, workers, dry_run = run.store, run.workers, run.dry_run
    url = store.location.url()
    previous = archive_of(ledger, cache.id)
    # Never downgrade: once a cache's files were archived, every later version of it holds
    # them too (wherever it goes), so a teardown that relies on the newest never loses them.
    with_content = with_content or bool(previous and previous.with_content)
    fingerprint, cache, tainted = _fresh_scan(ledger, cache, run.secrets, keep=not dry_run)
    tree = fingerprint.tree_digest
    host = socket.gethostname()
    relied = Relied()
    due = verify.boots_to_write(
        ledger, run.home, store, cache.id, relied, run.checked_boots,
        host=host, tool_version=__version__, workers=workers,
    )  # fmt: skip
    boots = [
        (boot, plan_boot_record(ledger, run.home, boot, host=host, tool_version=__version__))
        for boot in due
    ]
    for boot, planned in boots:
        _refuse_secrets(f"the record of boot {boot.id}", planned, run.secrets)
    rows = versions_of(ledger, cache.id)
    parent = _parent(rows, previous, tree) or _legacy_parent(store, previous, tree)

    @functools.cache
    def plan() -> RecordPlan:  # the version's record: to write, or to repair the one there
        return plan_version(
            ledger, run.home, cache, fingerprint, with_content=with_content, parent=parent,
            host=host, tool_version=__version__, found=tainted,
        )  # fmt: skip

    there = verify.standing_version(store, rows, tree, with_content, plan, relied, workers)
    there = there or verify.unrecorded_version(
        ledger, store, cache, tree, rows, plan, relied, workers
    )
    standing, version = (there[0], None) if there else (None, plan())
    if version is not None:
        _refuse_secrets(f"the version record of {cache.id}", version, run.secrets)
    sources: dict[str, BlobSource] = {}
    for each in [*(planned for _, planned in boots), *([version] if version else [])]:
        for sha, source in each.sources.items():
            sources.setdefault(sha, source)
    singles = [BlobRef(sha, s.size) for sha, s in sources.items() if not packs.packable(s)]
    found = store.check_blobs(singles, workers)
    packed, pack_sizes = verify.packed_already(ledger, store, sources, run.indexes, relied, workers)
    unpacked = {sha for sha, source in sources.items() if packs.packable(source)} - packed.keys()
    missing = unpacked | {sha for sha, problem in found.items() if problem}
    # In the order of `sources` (a cache's path order), which packs follow.
    todo = [source for sha, source in sources.items() if sha in missing and sha not in run.sent]
    # A blob whose bytes are not the ones its name says is not that blob: it is set aside,
    # and the right bytes take its place.
    damaged = {sha: p for sha, p in found.items() if p and not p.endswith(": missing")}
    relied.damaged_objects({sha: p for sha, p in damaged.items() if sha not in run.sent}, {})
    relied.alone = {sha: s for sha, s in relied.alone.items() if sha not in missing}
    repairs = [*relied.alone.values(), *(s for blobs in relied.rebuilt.values() for s in blobs)]
    if dry_run:
        run.sent.update(source.sha256 for source in [*todo, *repairs])
    named = {sha: s.size for sha, s in sources.items()} | relied.named
    sent = [*todo, *repairs]
    if relied.found:
        more = f" (and {len(relied.found) - 1} more)" if len(relied.found) > 1 else ""
        run.say(f"{cache.id}: damaged on the server, set aside: {relied.found[0]}{more}")
    for why in relied.passed_over:
        run.say(f"{cache.id}: passed over: {why}")
    if relied.superseded:
        stale = store.url(relied.superseded[0].record_key)
        run.say(
            f"{cache.id}: {stale} names objects gone or damaged that this host cannot make"
            " again; a new version takes its place"
        )
    if there:  # the packs the version there names stay named: looked for again at the end
        packed, pack_sizes = packed | placements(there[1]), pack_sizes | record_packs(there[1])
    report = ArchiveReport(
        cache_id=cache.id,
        location=url,
        record_key=standing.record_key if standing else "",
        blobs=len(named),
        blobs_uploaded=len(sent),
        bytes_uploaded=sum(source.size for source in sent),
        with_content=with_content,
        verified=False,
        dry_run=dry_run,
        blobs_present=len(named) - len(sent),
        bytes_total=sum(named.values()),
        tree_digest=tree,
        parent=standing.parent if standing else parent,
        boots=tuple(boot.id for boot, _ in boots),
        to_upload=tuple((s.sha256, s.size, s.what) for s in sent) if dry_run else (),
        repaired=tuple(relied.found),
    )
    return _Planned(cache, tree, boots, version, standing, packed, pack_sizes, todo, relied, report)


class SecretCarried(ArchiveError):
    """A record would carry a secret's value to the server: it is not sent (exit 1)."""


def _refuse_secrets(what: str, plan: RecordPlan, secrets: Mapping[str, str]) -> None:
    refuse_secrets_carried(
        what, plan, secrets, withheld="nothing of this cache is sent",
        way_out="rotate the secret, or take it out of where the boot read it",
    )  # fmt: skip


def refuse_secrets_carried(
    what: str, plan: RecordPlan, secrets: Mapping[str, str], *, withheld: str, way_out: str
) -> None:
    """No record carries a secret's value to the server: refused before anything of it is sent,
    naming where the value is (never the value); `withheld` says what is not sent."""
    carried = plan.secrets_carried(secrets)
    if carried:
        where, name = carried[0]
        raise SecretCarried(
            f"{what}: {where} holds the value of secret {name} (from the host environment):"
            f" {withheld}; a secret's value never leaves this host ({way_out})"
        )


def _parent(rows: Sequence[VersionRow], previous: ArchiveRecord | None, tree: str) -> str | None:
    """The tree a version of `tree` grew from: the parent of an earlier record of the same
    tree, else the tree the cache was last archived as or restored from (a restore of an older
    version makes it that one: not the newest this host archived), else the newest other tree
    this host archived."""
    same = [row for row in rows if row.tree_digest == tree]
    if same:
        return same[0].parent
    if previous is not None and previous.tree_digest not in (None, tree):
        return previous.tree_digest
    others = [row for row in rows if row.tree_digest != tree]
    return others[-1].tree_digest if others else None


def _legacy_parent(store: BlobStore, previous: ArchiveRecord | None, tree: str) -> str | None:
    """A cache this host knows only by the previous release's record (archived before versions,
    or restored from one) grew from the tree that record holds."""
    if previous is None or previous.tree_digest is not None:
        return None
    if previous.location != store.location.url():
        return None
    found = read_legacy_cache(store, previous.cache_id)
    held = found[2].fingerprint.tree_digest if found else None
    return held if held != tree else None


def _fresh_scan(
    ledger: Ledger, cache: CacheRecord, secrets: Mapping[str, str], *, keep: bool
) -> tuple[Fingerprint, CacheRecord, list[TaintedFile]]:
    """Scan the cache again (cheap when unchanged) as a boot's end-of-boot scan does: a path
    or link target holding one of the `secrets`' values masked, and the files changed since
    the last scan that hold one found. A changed scan is kept and recorded, with what it found."""
    previous = None
    if cache.scan_path and Path(cache.scan_path).is_file():
        with suppress(LifecycleError):  # a damaged scan file only costs a full re-hash
            previous = Fingerprint.from_json(Path(cache.scan_path).read_text())
    root = Path(cache.host_path)
    try:
        fingerprint = scan(root, previous, secrets=secrets)
    except LifecycleError as exc:
        raise ArchiveError(f"cannot scan: {exc}") from exc
    if fingerprint is previous:
        return fingerprint, cache, []
    # What the last scan recorded was looked at by it; what changed since (by hand, outside
    # any boot, or unknown when no scan is readable) is read here for the secrets' values.
    diff = previous.diff(fingerprint) if previous is not None else None
    changed = (
        {*diff.added, *diff.changed} if diff is not None else {e.path for e in fingerprint.entries}
    )
    found = [
        TaintedFile(cache.id, path, sha, name, None)
        for path, sha, name in secrets_in_cache(root, fingerprint, changed, secrets)
    ]
    now = _stamp()
    # Nothing of lifecycle's changes a cache between the end of one boot and the next: a
    # tree that moved was changed behind its back, and no boot may reuse it (the scan below
    # would otherwise become the tree the next boot's check compares with).
    damaged = damage(cache, previous, fingerprint, "archive", now) if cache.tree_digest else None
    if keep and damaged is not None and last_boot_ended(ledger, cache.id):
        record_damage(ledger, damaged)
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
        record_scan(ledger, cache.id, facts, tainted=found)
    return fingerprint, updated, found


def archive_boot(
    ledger: Ledger, home: Home, client: Any, location: ArchiveLocation, boot: BootRecord
) -> BootArchiveRow:
    """The record of a boot no cache of this host's carries (its caches were baked into its
    image): its blobs (log, evidence, patches), checked, then the record."""
    run = _Run(home, BlobStore(client, location), lambda line: None, 8, False, secrets={})
    plan = plan_boot_record(ledger, home, boot, host=socket.gethostname(), tool_version=__version__)
    _send(run, boot.id, list(plan.sources.values()))
    row = _write_boot(run.store, boot, plan)
    record_boot_archive(ledger, row)
    return row


def _write_boot(store: BlobStore, boot: BootRecord, plan: RecordPlan) -> BootArchiveRow:
    """The boot's markers (one per cache it used), then its record; the row that says so."""
    body = render_record(plan, _stamp())
    sha = hashlib.sha256(body).hexdigest()
    relative = record_key("boots", boot.id, sha)
    load_as(BootRecordV1, body, store.where(relative))  # what is written must read back
    for use in plan.document["uses"]:
        said = marker_body(boot.id)
        store.create(marker(use["cache_id"], "boots", boot.id), said, "text/plain")
    store.create(relative, body)
    return BootArchiveRow(boot.id, store.location.url(), store.key(relative), sha, _stamp())


def _write_version(store: BlobStore, planned: _Planned, sent: Sent) -> tuple[VersionRow, bool]:
    """Write the version record (unless an intact one of this tree is there); its row, and
    whether this run wrote it."""
    cache, report = planned.cache, planned.report
    if planned.version is None:
        assert planned.standing is not None, "a plan writes a version or re-uses one"
        return planned.standing, False
    now = _stamp()
    placed = {sha: (p.pack, p.offset) for sha, p in (planned.packed | sent.placed).items()}
    sizes = planned.pack_sizes | sent.packs
    body = render_record(planned.version, now, placed, sizes)
    sha = hashlib.sha256(body).hexdigest()
    relative = version_key(cache.id, planned.tree_digest, sha)
    load_as(CacheVersion, body, store.where(relative))  # what is written must read back
    written = store.create(relative, body)
    version = VersionRow(
        cache.id, planned.tree_digest, store.location.url(), store.key(relative), sha,
        report.with_content, report.parent, now,
    )  # fmt: skip
    return version, written


def _resend_removed(run: _Run, planned: _Planned, sent: Sent) -> None:
    """Look once more, now that the records name every blob: a `gc --remote` on another host
    may have removed one it found unneeded between this run's survey and its records. Blobs
    are content-addressed, so sending one again is always right. A pack cannot be: it may
    hold other caches' blobs, so a version naming a pack that went is refused (the ledger
    does not take it, and the next archive packs those blobs anew)."""
    # Every object here was verified by its checksum moments ago: what is asked now is only
    # whether it is still there, which a listing answers for a thousand at a time.
    store, workers = run.store, run.workers
    packed = planned.packed | sent.placed
    listing = store.list_packs()
    sizes = planned.pack_sizes | sent.packs
    gone_packs = sorted(sha for sha, size in sizes.items() if listing.get(sha, (None,))[0] != size)
    if gone_packs:
        raise ArchiveError(
            f"{store.url(store.pack_key(gone_packs[0]))} went while this archive named it (a"
            " `gc --remote` elsewhere?); archive again"
        )
    sources = {sha: s for _, plan in planned.boots for sha, s in plan.sources.items()}
    sources |= planned.version.sources if planned.version else {}
    refs = [BlobRef(sha, source.size) for sha, source in sources.items() if sha not in packed]
    gone = [sources[sha] for sha in sorted(store.absent_blobs(refs, workers))]
    if not gone:
        return
    run.say(f"{planned.cache.id}: {len(gone)} blobs went since the survey; sending them again")
    _send(run, planned.cache.id, gone)


def _send(run: _Run, cache_id: str, todo: list[BlobSource], relied: Relied | None = None) -> Sent:
    """Upload blobs (small cache files in packs) and what `relied` puts right, and check
    each single blob and each pack on the server; what was sent."""
    store, workers = run.store, run.workers
    relied = relied or Relied()
    sent = upload_all(
        store, cache_id, todo, workers, run.say,
        rebuilt=list(relied.rebuilt.values()), alone=list(relied.alone.values()),
    )  # fmt: skip
    uploaded = [BlobRef(sha, size) for sha, size in sent.singles.items()]
    found = store.check_blobs(uploaded, workers) if uploaded else {}
    problems = sorted(
        filter(None, [*found.values(), *store.check_packs(sent.packs, workers).values()])
    )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ArchiveError(f"not verified after upload: {problems[0]}{more}")
    return sent


def _set_aside(ledger: Ledger, run: _Run, relied: Relied) -> None:
    """Delete what is damaged (lifecycle.archive.verify) before its right bytes are sent; the
    ledger forgets the versions whose records went."""
    gone = set(verify.set_aside(run.store, relied.set_aside, run.workers))
    forget_versions(ledger, [r for r in relied.forget if run.store.relative(r.record_key) in gone])
    for relative in gone:
        run.indexes.pop(relied.set_aside[relative], None)  # a pack made again is read anew


def _record(ledger: Ledger, planned: _Planned, version: VersionRow) -> None:
    """The version as this host's newest archive of the cache, in the ledger."""
    report = planned.report
    archive = ArchiveRecord(
        planned.cache.id, version.location, version.record_key, version.record_sha256,
        version.with_content, report.blobs, report.bytes_uploaded, version.archived_at,
        verified_at=_stamp(), tree_digest=version.tree_digest,
    )  # fmt: skip
    record_version(ledger, version, archive)


def _stamp() -> str:
    # Milliseconds: an archive, a change and the next archive of one cache fit in one second,
    # and "the newest version" (what a restore takes) is told by this stamp; its damage mark
    # and scan evidence are named by it too.
    return datetime.now(UTC).isoformat(timespec="milliseconds")
