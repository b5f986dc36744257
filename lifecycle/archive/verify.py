"""Checking archived records and every object they name against the server: what this host's
ledger says it archived (`fetch_verified`, for teardown and verify), and what an archive relies
on that is there already, put right from this host's files when damaged (how and why that is
safe: docs/bucket.md, "Damage is put right by the next archive").
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from lifecycle.archive import packs, transfer
from lifecycle.archive.layout import blob_key, cache_prefix, pack_key, parse_key
from lifecycle.archive.plans import BlobSource, RecordPlan, plan_boot_record
from lifecycle.archive.record import (
    CacheOrBoot,
    GcRecords,
    load_by_key,
    names_of,
    record_blobs,
    record_packs,
)
from lifecycle.archive.store import ArchiveError, BlobRef, BlobStore, Listed, S3Unavailable
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import (
    ArchiveRecord,
    BootArchiveRow,
    VersionRow,
    boot_archive,
    honest_packs,
    pack_indexes,
)
from lifecycle.ledger.boots import BootRecord, CacheRecord, boot_by_id, cache_uses
from lifecycle.parallel import pool_map
from lifecycle.records import BootRecordV1, CacheRecordV1, CacheVersion


@dataclass(frozen=True)
class Inspected:
    """A record as the server holds it now, and each object it names that is not intact."""

    relative: str  # its key under the prefix
    problems: tuple[str, ...]  # of the record itself: missing, other bytes, not a record
    document: CacheOrBoot | None
    blobs: dict[str, str]  # sha256 of a single blob -> its problem
    packs: dict[str, str]  # sha256 of a pack -> its problem
    wrong_bytes: bool  # there, but not the bytes its name says
    gone: bool = False  # not there at all: lost, or collected by a gc (GcRecords tells)

    def lines(self) -> list[str]:
        """Every problem, one line each naming its object."""
        return [*self.problems, *sorted([*self.blobs.values(), *self.packs.values()])]


def inspect_record(
    store: BlobStore, relative: str, expected_sha256: str | None, workers: int = 8
) -> Inspected:
    """Read a record (by its key under the prefix; against the sha256 recorded, if given) and
    check every object it names on the server."""
    found = read_record(store, relative, expected_sha256)
    if found.document is None:
        return found
    blobs = store.check_blobs(record_blobs(found.document), workers)
    held = store.check_packs(record_packs(found.document), workers)
    return replace(found, blobs=_problems(blobs), packs=_problems(held))


def read_record(store: BlobStore, relative: str, expected_sha256: str | None) -> Inspected:
    """A record read and checked by its bytes alone (`inspect_record` checks what it names)."""
    where = store.where(relative)
    body = store.read(relative)
    if body is None:
        missing = (f"{where}: missing",)
        return Inspected(relative, missing, None, {}, {}, wrong_bytes=False, gone=True)
    problems = []
    found = hashlib.sha256(body).hexdigest()
    if expected_sha256 and found != expected_sha256:
        problems.append(f"{where}: sha256 {found}, not the {expected_sha256} recorded")
    name = parse_key(relative)
    wrong = name is not None and name.sha256 not in (None, found)
    try:
        document = load_by_key(body, relative, where)
    except ArchiveError as exc:
        return Inspected(relative, (*problems, str(exc)), None, {}, {}, wrong)
    return Inspected(relative, tuple(problems), document, {}, {}, wrong)


def _problems(checked: Mapping[str, str | None]) -> dict[str, str]:
    return {sha: problem for sha, problem in checked.items() if problem}


@dataclass
class Relied:
    """What one archive found of the objects it relies on, and how it puts them right."""

    named: dict[str, int] = field(default_factory=dict)  # every blob they name -> its size
    found: list[str] = field(default_factory=list)  # each damaged object, one line
    set_aside: dict[str, str] = field(default_factory=dict)  # key -> the sha256 it names
    alone: dict[str, BlobSource] = field(default_factory=dict)  # blobs to send again
    rebuilt: dict[str, list[BlobSource]] = field(default_factory=dict)  # pack -> its blobs
    forget: list[VersionRow] = field(default_factory=list)  # versions whose record is set aside
    superseded: list[VersionRow] = field(default_factory=list)  # not to be put right from here
    passed_over: list[str] = field(default_factory=list)  # packs whose index lies, one line each
    hashed: set[str] = field(default_factory=set)  # packs whose every blob was hashed true
    listed: set[str] | None = None  # every pack at the location, when they were listed
    # Indexes read from the server of packs known honest, checked whole: sha -> (size, text).
    indexes: dict[str, tuple[int, bytes]] = field(default_factory=dict)

    def damaged_record(self, found: Inspected) -> None:
        """A record that does not stand: named (by its last problem, the plainest), and set
        aside when its bytes are wrong."""
        self.found.append(found.problems[-1])
        name = parse_key(found.relative)
        if found.wrong_bytes and name is not None and name.sha256 is not None:
            self.set_aside[found.relative] = name.sha256

    def damaged_objects(self, blobs: Mapping[str, str], held: Mapping[str, str]) -> None:
        """Blobs and packs that are not intact: named, and set aside (a missing one is
        passed over then)."""
        self.found += sorted([*blobs.values(), *held.values()])
        self.set_aside |= {blob_key(sha): sha for sha in blobs}
        self.set_aside |= {pack_key(sha): sha for sha in held}


def standing_version(
    store: BlobStore,
    rows: Sequence[VersionRow],
    tree: str,
    with_content: bool,
    plan: Callable[[], RecordPlan],
    relied: Relied,
    workers: int,
) -> tuple[VersionRow, CacheVersion] | None:
    """(row, record) of a version of `tree` this host wrote (or restored) at the store's
    location, holding the files if `with_content`, whose record stands and whose damaged
    objects this host can put right (`plan()` gives their bytes); None when there is none, and
    a new one is written."""
    for row in rows:
        if (row.tree_digest, row.location) != (tree, store.location.url()):
            continue
        if with_content and not row.with_content:
            continue
        found = inspect_record(store, store.relative(row.record_key), row.record_sha256, workers)
        document = found.document
        if found.problems or not isinstance(document, CacheVersion):
            if found.wrong_bytes:  # not that record: it goes, and so does the ledger's row
                relied.damaged_record(found)
                relied.forget.append(row)
            continue
        sources = plan().sources if found.blobs or found.packs else {}
        sizes = {pack.sha256: pack.size for pack in document.packs}
        rebuilt = {sha: rebuild(document, sha, sizes[sha], sources) for sha in found.packs}
        if any(sha not in sources for sha in found.blobs) or None in rebuilt.values():
            # Not all of it can be put right from here (a pack that also held another host's
            # blobs): a new version, and this one is forgotten once that is written.
            relied.superseded.append(row)
            continue
        relied.damaged_objects(found.blobs, found.packs)
        relied.alone |= {sha: sources[sha] for sha in found.blobs}
        relied.rebuilt |= {sha: blobs for sha, blobs in rebuilt.items() if blobs is not None}
        relied.named |= {blob.sha256: blob.size for blob in document.blobs}
        return row, document
    return None


def unrecorded_version(
    ledger: Ledger,
    store: BlobStore,
    cache: CacheRecord,
    tree: str,
    rows: Sequence[VersionRow],
    plan: Callable[[], RecordPlan],
    relied: Relied,
    workers: int,
) -> tuple[VersionRow, CacheVersion] | None:
    """(row, record) of a version of `tree` this host wrote at the store's location and never
    recorded (an archive killed between its record and its ledger row), taken as the version
    rather than a second record of one tree written beside it. Taken only whole, naming
    exactly the blobs `plan()` would, each packed one where the index of
    a pack this host knows honest places it: what this host would have written, so relied on
    as if the ledger had said so. None when there is none such, and a new one is written."""
    host = socket.gethostname()
    known = {store.relative(row.record_key) for row in rows}
    prefix = f"{cache_prefix(cache.id, 'versions/')}{tree}."
    for item in store.list(prefix):
        key = parse_key(item.key)
        if key is None or key.kind != "version" or key.key in known:
            continue
        found = inspect_record(store, key.key, key.sha256, workers)
        document = found.document
        if found.lines() or not isinstance(document, CacheVersion):
            continue  # not whole: a new record, as ever
        if (document.host, document.cache.host_path) != (host, cache.host_path):
            continue  # another host's (or another home's on this one)
        if {b.sha256 for b in document.blobs} != plan().sources.keys():
            continue  # not what this run would write: with or without the files, withheld
        if not _placed_honestly(ledger, store, document):
            continue
        relied.named |= {blob.sha256: blob.size for blob in document.blobs}
        row = VersionRow(
            cache.id, tree, store.location.url(), store.key(key.key), str(key.sha256),
            document.with_content, document.parent, document.archived_at,
        )  # fmt: skip
        return row, document
    return None


def _placed_honestly(ledger: Ledger, store: BlobStore, document: CacheVersion) -> bool:
    """Every packed blob of the record lies where the index of its pack, one this host wrote
    or hashed, says (an index the ledger kept, else the pack's own)."""
    sizes = record_packs(document)
    if honest_packs(ledger, sizes.keys()) != sizes.keys():
        return False
    kept = pack_indexes(ledger, sizes.keys())
    indexes = {
        sha: packs.parse_index(kept[sha][1], sha, size)
        if sha in kept and kept[sha][0] == size
        else packs.read_index(store, sha, size)
        for sha, size in sizes.items()
    }
    return all(
        indexes[b.pack].get(b.sha256) == packs.Placed(b.pack, b.offset, b.size)
        for b in document.blobs
        if b.pack is not None and b.offset is not None
    )


def rebuild(
    document: CacheVersion, pack: str, size: int, sources: Mapping[str, BlobSource]
) -> list[BlobSource] | None:
    """The blobs of `pack` in the order they lie in it, when the version places one at every
    byte of it before its index and this host holds each: packed again, they are the very
    bytes its name says. None otherwise (it holds blobs other records put there)."""
    laid = sorted(
        (b.offset, b.sha256, b.size)
        for b in document.blobs
        if b.pack == pack and b.offset is not None
    )
    end = 0
    for offset, sha, length in laid:
        if offset != end or sha not in sources:
            return None
        end += length
    if end + len(packs.tail((sha, at, n) for at, sha, n in laid)) != size:
        return None
    return [sources[sha] for _, sha, _ in laid]


def packed_already(
    ledger: Ledger,
    store: BlobStore,
    sources: Mapping[str, BlobSource],
    indexes: dict[str, packs.Index],
    relied: Relied,
    workers: int,
) -> tuple[dict[str, packs.Placed], dict[str, int]]:
    """The packable blobs some intact, honest pack at the location already holds (whichever
    cache or host wrote it), and the sizes of those packs. `indexes`: those read before in the
    run. Left in `relied` to remember: the packs hashed and found honest here, the indexes of
    honest packs read from the server, and the listing (what the ledger's indexes are pruned to)."""
    wanted = {sha for sha, source in sources.items() if packs.packable(source)}
    if not wanted:
        return {}, {}
    listing = store.list_packs()
    relied.listed = set(listing)
    fresh = _kept_indexes(ledger, listing, indexes)
    known = packs.known_blobs(store, listing, workers, indexes)
    placed = {sha: known[sha] for sha in wanted if sha in known}
    sizes = {pack: listing[pack][0] for pack in {p.pack for p in placed.values()}}
    read = {sha for sha in fresh if indexes.get(sha) is not None}
    honest = honest_packs(ledger, sizes.keys() | read)
    # A pack is checked whole (its ChecksumSHA256): one that is not what its name says holds
    # none of the blobs its index claims; they are packed again, and it is set aside (the
    # same blobs packed again may make the same pack). So is one with no index to read whose
    # bytes are not its name either: else every archive here would read it again. An honest
    # pack's index just read is checked so too: then it is the pack's own, and kept.
    unreadable = {sha: listing[sha][0] for sha in listing if indexes.get(sha) is None}
    to_keep = {sha: listing[sha][0] for sha in read & honest}
    checked = store.check_packs(sizes | unreadable | to_keep, workers)
    bad = {sha: p for sha, p in checked.items() if p}
    relied.damaged_objects({}, bad)
    placed = {sha: p for sha, p in placed.items() if p.pack not in bad}
    # A pack whose bytes are its name can still hold other bytes where its index places a
    # blob (another host wrote it so): no record of ours names a blob there unhashed. Its
    # bytes never change (they are its name), so one this host wrote or hashed before is
    # not hashed again: a re-archive pays nothing for the packs it shares.
    relied_on = {p.pack for p in placed.values()}
    unknown: dict[str, dict[str, packs.Placed]] = {}
    for sha in relied_on - honest:
        index = indexes[sha]
        assert index is not None, "a pack that places a blob has an index"
        unknown[sha] = index
    lying = lying_packs(store, unknown, workers)
    for sha, why in lying.items():
        indexes[sha] = None  # it offers no blob for the rest of the run
        relied.passed_over.append(why)
    relied.hashed |= unknown.keys() - lying.keys()
    for sha in (to_keep.keys() - bad.keys()) | (unknown.keys() - lying.keys()):
        index = indexes[sha]
        assert index is not None, "an honest pack has an index"
        relied.indexes[sha] = (listing[sha][0], packs.index_text(index))
    placed = {sha: p for sha, p in placed.items() if p.pack not in lying}
    unused = bad.keys() | lying.keys()
    return placed, {pack: size for pack, size in sizes.items() if pack not in unused}


def _kept_indexes(
    ledger: Ledger, listing: Mapping[str, Listed], indexes: dict[str, packs.Index]
) -> set[str]:
    """Into `indexes`, the ledger's of the listed packs not in it yet; the rest of those, whose
    index is read from the server. One listed at another size than its pack's is not that
    pack's bytes: it is read, and checked, as any other."""
    asked = [sha for sha in listing if sha not in indexes]
    for sha, (size, text) in pack_indexes(ledger, asked).items():
        if listing[sha][0] == size:
            indexes[sha] = packs.parse_index(text, sha, size)
    return {sha for sha in asked if sha not in indexes}


def lying_packs(
    store: BlobStore, unknown: Mapping[str, Mapping[str, packs.Placed]], workers: int
) -> dict[str, str]:
    """The packs (sha256 -> why, one line) among `unknown` (each with its index) whose bytes
    where their index places a blob are not that blob: every blob of the index fetched and
    hashed, as a restore would, so one found honest is honest for whatever record names it
    later; a pack gone meanwhile is passed over too (the blobs are packed anew)."""

    def judge(region: transfer.Region) -> tuple[str, str | None]:
        try:
            for _ in transfer.fetch_region(store, region):
                pass
        except S3Unavailable:
            raise
        except ArchiveError as exc:
            return region.pack, f"{exc}: its index is not relied on"
        return region.pack, None

    # No pack of lifecycle's holds a blob over PACK_BLOB_MAX: an index that places one lies,
    # and is not read (a region is held in memory whole while it is hashed).
    too_big = {
        pack: f"{store.url(store.pack_key(pack))} at {p.offset}: {p.size} bytes, more than a"
        " packed blob holds: its index is not relied on"
        for pack, index in unknown.items()
        for p in index.values()
        if p.size > packs.PACK_BLOB_MAX
    }
    regions = [
        region
        for pack, index in unknown.items()
        if pack not in too_big
        for region in transfer.regions(index)
    ]
    judged = pool_map(judge, regions, workers, "pack-check")
    return too_big | {pack: why for pack, why in judged if why is not None}


def boots_to_write(
    ledger: Ledger,
    home: Home,
    store: BlobStore,
    cache_id: str,
    relied: Relied,
    seen: set[str],
    *,
    host: str,
    tool_version: str,
    workers: int,
) -> list[BootRecord]:
    """The finished boots that used the cache whose record is to be written at the store's
    location: none is there yet, or the one there does not stand. The records there are
    checked (each once in a run: `seen`), and their damaged blobs sent again."""
    url = store.location.url()
    due, there = [], []
    for use in cache_uses(ledger, cache_id=cache_id):
        boot = boot_by_id(ledger, use.boot_id)
        if boot is None or boot.outcome == "running":
            continue
        row = boot_archive(ledger, boot.id, url)
        if row is None:
            due.append(boot)
        elif boot.id not in seen:
            there.append((boot, row))
    seen.update(boot.id for boot, _ in there)
    records = pool_map(
        lambda item: read_record(store, store.relative(item[1].record_key), item[1].record_sha256),
        there, workers, "boot-records",
    )  # fmt: skip
    standing = []
    for (boot, _), record in zip(there, records, strict=True):
        if record.problems or record.document is None:
            relied.damaged_record(record)
            due.append(boot)
        else:
            standing.append((boot, record.document.blobs))
    # Their blobs in one check: boots of one cache share most (patches, the same evidence).
    refs = {blob.sha256: blob for _, blobs in standing for blob in blobs}
    asked = [BlobRef(b.sha256, b.size, b.md5) for b in refs.values()]  # a boot's: none packed
    checked = _problems(store.check_blobs(asked, workers))
    for boot, blobs in standing:
        relied.named |= {blob.sha256: blob.size for blob in blobs}
        damaged = {blob.sha256: checked[blob.sha256] for blob in blobs if blob.sha256 in checked}
        if damaged:
            _send_again(ledger, home, boot, damaged, relied, host=host, tool_version=tool_version)
    return sorted(due, key=lambda boot: boot.started_at)


def _send_again(
    ledger: Ledger,
    home: Home,
    boot: BootRecord,
    damaged: dict[str, str],
    relied: Relied,
    *,
    host: str,
    tool_version: str,
) -> None:
    """A boot's damaged blobs, to send again from this host's copies of them."""
    plan = plan_boot_record(ledger, home, boot, host=host, tool_version=tool_version)
    lacking = sorted(sha for sha in damaged if sha not in plan.sources)
    if lacking:
        raise ArchiveError(
            f"{damaged[lacking[0]]}: named by the record of boot {boot.id}, and this host no"
            " longer holds its bytes to send again"
        )
    relied.damaged_objects(damaged, {})
    relied.alone |= {sha: plan.sources[sha] for sha in damaged}


def set_aside(store: BlobStore, named: Mapping[str, str], workers: int) -> list[str]:
    """Delete each object (key under the prefix -> the sha256 its name says) whose bytes a
    look just before finds are not that sha256, and only those very bytes; the keys deleted."""

    def one(item: tuple[str, str]) -> str | None:
        relative, sha256 = item
        key = store.key(relative)
        head = store.head(key, checksum=True)
        if head is None or store.judge(key, sha256, head) is None:
            return None  # gone, or put right meanwhile
        return relative if store.delete_if_match(relative, str(head["ETag"])) else None

    done = pool_map(one, sorted(named.items()), workers, "set-aside")
    return [relative for relative in done if relative is not None]


@dataclass(frozen=True)
class Covered:
    """What a verified archive of a cache holds: its tree, its files or not, and the boots
    whose records verify there (or, in a record of the previous format, that it lists)."""

    tree_digest: str
    with_content: bool
    boot_ids: frozenset[str]


@dataclass(frozen=True)
class VerifiedRecord:
    """A cache's archive as the server holds it now, and every object of it that does not verify."""

    problems: tuple[str, ...]  # () when the record and every blob it names are intact
    document: Covered | None  # what it covers, when there is a record that parses
    answered: bool = True  # False: the server could not be asked, so nothing is known
    relied: frozenset[str] = frozenset()  # the keys (relative) checked: records, blobs, packs
    # Records gone that gc's records say a gc removed by rule, a line each (`s3://…: collected
    # by gc g-… on HOST …`): no damage, but no evidence there either.
    collected: tuple[str, ...] = ()


def fetch_verified(
    store: BlobStore,
    archive: ArchiveRecord,
    boots: Sequence[BootArchiveRow] = (),
    *,
    gc: GcRecords | None = None,
    workers: int = 8,
) -> VerifiedRecord:
    """Read the cache's archived record (and the records of `boots` at the same location) and
    check them and every blob they name against the server. With `gc`, a record gone that
    gc's records say a gc removed by rule is collected, not a problem."""
    relative = store.relative(archive.record_key)
    collected: list[str] = []

    def problems_of(found: Inspected) -> list[str]:
        removal = None
        if gc is not None and found.gone:
            removal = gc.removal(store, found.relative)
        elif gc is not None and (found.blobs or found.packs):  # swept with them since it was read?
            removal = gc.swept_since(store, found.relative)
        if removal is None:
            return found.lines()
        collected.append(f"{store.where(found.relative)}: {removal.describe()}")
        return []

    try:
        found = inspect_record(store, relative, archive.record_sha256, workers)
        problems, document = problems_of(found), found.document
        if document is None:
            return VerifiedRecord(tuple(problems), None, collected=tuple(collected))
        if isinstance(document, BootRecordV1):
            raise ArchiveError(f"{archive.record_key} is a boot's record, not a cache's")
        verified: set[str] = set()
        relied = {relative} | names_of(document)
        if isinstance(document, CacheRecordV1):  # the previous format lists its boots itself
            verified, boots = document.boot_ids(), ()
        for row in boots:
            boot = inspect_record(store, store.relative(row.record_key), row.record_sha256)
            problems += problems_of(boot)
            relied.add(store.relative(row.record_key))
            if boot.document is not None:
                relied |= names_of(boot.document)
            if boot.document is not None and not boot.lines():
                verified.add(row.boot_id)
    except S3Unavailable:
        raise
    except ArchiveError as exc:
        return VerifiedRecord((f"{store.url(archive.record_key)}: cannot verify: {exc}",), None)
    covered = Covered(document.fingerprint.tree_digest, document.with_content, frozenset(verified))
    return VerifiedRecord(tuple(problems), covered, True, frozenset(relied), tuple(collected))
