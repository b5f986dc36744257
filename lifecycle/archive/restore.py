"""Restore a cache from its archive: rebuilt beside its place, verified, then renamed into it.

Nothing appears at the cache's path until the whole tree is down and matches its archived tree
digest (a half-written `.so` crashes the engine that loads it); the ledger then knows the
version it came from, the parent of the cache's next version.
"""

from __future__ import annotations

import errno
import io
import os
import re
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from lifecycle.archive.layout import CACHE_KINDS, Key, cache_prefix, parse_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.packs import Placed
from lifecycle.archive.partials import partial_prefix, remove_dead_partials, remove_partial
from lifecycle.archive.record import (
    GcRecords,
    Unread,
    placements,
    read_as,
    read_legacy_cache,
    stood_on,
)
from lifecycle.archive.store import (
    RECORD_MAX,
    ArchiveError,
    BlobStore,
    S3Unavailable,
    os_problem,
)
from lifecycle.archive.transfer import download_files, fetch_region, regions
from lifecycle.errors import DiskFull, LifecycleError, no_room
from lifecycle.faults import Checkpoint
from lifecycle.fingerprint import Entry, Fingerprint, scan
from lifecycle.home import Home
from lifecycle.leases import try_lease
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import ArchiveRecord, VersionRow, record_restored
from lifecycle.ledger.boots import CacheRecord, Scanned, cache_by_id
from lifecycle.records import CacheRecordV1, CacheVersion
from lifecycle.redact import is_masked
from lifecycle.report import Report, unread_lines
from lifecycle.table import human_bytes
from lifecycle.withheld import masked_links

# Permission bits a restore keeps: never setuid, setgid or sticky, never writable by others.
SAFE_MODES = 0o775
_CACHE_ID = re.compile(r"[a-z0-9][a-z0-9._-]*-[0-9a-f]{12}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TREE_PREFIX = re.compile(r"[0-9a-f]{8,64}")


@dataclass(frozen=True)
class RestoreReport(Report):
    """Where a cache was restored and what it holds now."""

    cache_id: str
    location: str
    host_path: str  # the ledger's dir for a cache it knows, else a new one under caches/
    tree_digest: str
    files: int
    bytes: int
    known: bool  # the ledger knew the cache (else its row was made from the record)
    already_present: bool  # the cache dir already held exactly the archived tree
    record: str = ""  # s3:// URL of the version record it was restored from
    withheld: tuple[str, ...] = ()  # files and links the archive left out (a secret's value)
    modes_masked: tuple[str, ...] = ()  # entries restored without setuid/setgid/sticky/o+w
    beside: bool = False  # --into: a dir of its own beside the cache; cache and ledger untouched
    # Records of the cache's versions passed over as they could not be read (s3:// URL -> why)
    unreadable: dict[str, str] = field(default_factory=dict)

    FORMAT: ClassVar[str] = "lifecycle-restore/1"

    @property
    def notes(self) -> tuple[str, ...]:
        return unread_lines(self.unreadable, "passed over")

    def text(self) -> str:
        """Where it was restored, what it holds, and what was withheld or masked."""
        done = self
        how = "already in place" if done.already_present else "restored"
        origin = "" if done.known else " (new to this host: its row was made from the record)"
        state = "live"
        if done.beside:
            origin, state = " (beside the cache: it and the ledger are untouched)", "not a cache"
        text = (
            f"{done.cache_id}: {how} at {done.host_path}{origin}\n"
            f"  {done.files} files, {human_bytes(done.bytes)},"
            f" tree digest {done.tree_digest}; {state}; from {done.location}\n"
        )
        if done.withheld:
            text += (
                f"  not restored: {', '.join(done.withheld)} (the archive withheld them: they"
                " held a secret's value; the engine writes them again)\n"
            )
        if done.modes_masked:
            text += (
                f"  modes masked (no setuid, setgid, sticky or world-writable):"
                f" {', '.join(done.modes_masked)}\n"
            )
        return text


def restore_cache(
    ledger: Ledger,
    home: Home,
    client: Any,
    location: ArchiveLocation,
    cache_id: str,
    *,
    tree: str | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int = 8,
) -> RestoreReport:
    """Rebuild the cache dir from an archived version's content (the one of `tree`, a tree
    digest or a prefix of one; else the newest with content) and mark the cache live."""
    say = progress or (lambda line: None)
    check_cache_id(cache_id)  # it names a dir under LIFECYCLE_HOME/caches
    store = BlobStore(client, location)
    # Under the cache's lease, as a boot and a teardown work on it: no two restores of one
    # cache at once, so what a killed one left beside its dir is nobody's and goes.
    lease = try_lease(home, cache_id)
    if lease is None:
        busy = ArchiveError("a boot, a teardown or a restore holds it now")
        raise _failed(busy, cache_id, location)
    with lease:
        return _restore_held(ledger, home, store, cache_id, tree, say, workers)


def _restore_held(
    ledger: Ledger,
    home: Home,
    store: BlobStore,
    cache_id: str,
    tree: str | None,
    say: Callable[[str], None],
    workers: int,
) -> RestoreReport:
    location = store.location
    known = cache_by_id(ledger, cache_id)
    try:
        relative, document, unread = _version_with_files(store, cache_id, tree)
        if known is not None and known.in_use_by:
            raise ArchiveError(f"boot {known.in_use_by} is using the cache")
        target = Path(known.host_path) if known else home.cache_dir(cache_id)
        if document.cache.id != cache_id or document.cache_id != cache_id:
            # Checked before anything is written: its row would name another cache.
            raise ArchiveError(
                f"the record of {cache_id} has the cache row of {document.cache.id!r}"
            )
        # A host that never saw the cache makes its row from the record.
        local = {"host_path": str(target), "state": "live", "in_use_by": None}
        new_row = None if known else CacheRecord(**{**asdict(document.cache), **local})
        archived = _fetch_fingerprint(store, document)
        withheld = _left_out(document, archived)
        wanted = restorable(archived, withheld)
        for partial in target.parent.glob(f".{target.name}.restore-*"):
            remove_partial(partial)  # a restore killed half way; the lease says none runs now
        present = _already_there(target, wanted)
        restored = present or _rebuild(store, wanted, placements(document), target, workers, say)
    except (LifecycleError, OSError) as exc:
        raise _failed(exc, cache_id, location) from exc
    try:
        _record_restored(ledger, store, cache_id, restored, new_row, relative, document)
    except DiskFull as exc:
        # The tree is whole and verified in place. Until the scan is recorded the ledger says
        # what it said before (no boot takes a torn-down cache as warm); the next restore
        # finds the tree there and records it.
        raise exc.within(
            f"restore of {cache_id} from {location.url()}: its files are in place at"
            f" {target}, the ledger not brought up to date"
        ) from exc
    return RestoreReport(
        cache_id=cache_id,
        location=location.url(),
        host_path=str(target),
        tree_digest=restored.tree_digest,
        files=restored.files,
        bytes=restored.bytes,
        known=known is not None,
        already_present=present is not None,
        withheld=tuple(sorted(withheld)),
        modes_masked=tuple(e.path for e in archived.entries if e.mode != _safe_mode(e)),
        record=store.where(relative),
        unreadable=unread,
    )


def _record_restored(
    ledger: Ledger,
    store: BlobStore,
    cache_id: str,
    restored: Fingerprint,
    new_row: CacheRecord | None,
    relative: str,
    document: CacheVersion | CacheRecordV1,
) -> None:
    """The restored tree's scan, the cache live again, and the version it came from: one
    transaction, whenever the process dies."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    name = f"restore-{now.replace(':', '')}.json"
    kept = ledger.keep_evidence(f"scans/{cache_id}", name, restored.to_json().encode())
    facts = Scanned(restored.tree_digest, restored.files, restored.bytes, str(kept), now)
    version, archive = (
        _version_rows(store, relative, document)
        if isinstance(document, CacheVersion)
        else (None, _legacy_archive(store, cache_id))
    )
    record_restored(ledger, cache_id, facts, new_row=new_row, version=version, archive=archive)


def restore_beside(
    client: Any,
    location: ArchiveLocation,
    cache_id: str,
    into: Path,
    *,
    tree: str | None = None,
    progress: Callable[[str], None] | None = None,
    workers: int = 8,
    checkpoint: Checkpoint = lambda point: None,
) -> RestoreReport:
    """Rebuild an archived version's tree (as `pick_version` chooses it) in `into`, a new dir,
    verified as a restore is; the cache, its dir and the ledger stay as they are. So a second
    tree of a cache, the one behind a result, can stand beside the live one to compare."""
    check_cache_id(cache_id)
    remove_dead_partials(into)  # what a killed restore into it left, even when it is there now
    if os.path.lexists(into):
        raise LifecycleError(f"{into}: File exists (--into makes a new dir)")
    store = BlobStore(client, location)
    try:
        relative, document, unread = _version_with_files(store, cache_id, tree)
        archived = _fetch_fingerprint(store, document)
        withheld = _left_out(document, archived)
        wanted = restorable(archived, withheld)
        say = progress or (lambda line: None)
        restored = _rebuild(store, wanted, placements(document), into, workers, say, checkpoint)
    except (LifecycleError, OSError) as exc:
        raise _failed(exc, cache_id, location) from exc
    return RestoreReport(
        cache_id=cache_id,
        location=location.url(),
        host_path=str(into),
        tree_digest=restored.tree_digest,
        files=restored.files,
        bytes=restored.bytes,
        known=False,
        already_present=False,
        record=store.where(relative),
        withheld=tuple(sorted(withheld)),
        modes_masked=tuple(e.path for e in archived.entries if e.mode != _safe_mode(e)),
        beside=True,
        unreadable=unread,
    )


def _version_with_files(
    store: BlobStore, cache_id: str, tree: str | None
) -> tuple[str, CacheVersion | CacheRecordV1, Unread]:
    """`pick_version`'s choice, which must hold the cache's files."""
    relative, document, unread = pick_version(store, cache_id, tree)
    if not document.with_content:
        raise ArchiveError(
            "it was archived without --with-content: the record keeps its evidence,"
            " not its files, so there is nothing to restore"
        )
    return relative, document, unread


def _failed(
    exc: LifecycleError | OSError, cache_id: str, location: ArchiveLocation
) -> LifecycleError:
    """A restore's failure in one line, of the error's family (so its exit code): the
    archive's answer, a full disk, or a tree prefix that said too little; any other error met
    in what the archive holds is the archive's answer (a fingerprint that does not parse)."""
    failed = f"restore of {cache_id} from {location.url()} failed"
    if isinstance(exc, ArchiveError | DiskFull):
        return exc.within(failed)
    if isinstance(exc, TreeAmbiguous):
        return TreeAmbiguous(f"{failed}: {exc}")
    why = os_problem(exc) if isinstance(exc, OSError) else exc
    return ArchiveError(f"{failed}: {why}")


@dataclass(frozen=True)
class FileRestored:
    """One file of an archived cache, written out on its own."""

    cache_id: str
    path: str
    sha256: str
    size: int
    record: str  # s3:// URL of the version record it came from
    unreadable: dict[str, str] = field(default_factory=dict)  # passed over: s3:// URL -> why


def restore_file(
    client: Any,
    location: ArchiveLocation,
    cache_id: str,
    path: str,
    sink: BinaryIO,
    *,
    tree: str | None = None,
    checkpoint: Checkpoint = lambda point: None,
) -> FileRestored:
    """Write one file of an archived version (as `pick_version` chooses it) into `sink`,
    checked against its sha256: the record, the fingerprint, and that file's bytes alone (one
    ranged GET of its pack, or its own blob) are read."""
    check_cache_id(cache_id)
    store = BlobStore(client, location)
    try:
        relative, document, unread = pick_version(store, cache_id, tree)
        if not document.with_content:
            raise ArchiveError("it was archived without --with-content: no files to restore")
        wanted = restorable(_fetch_fingerprint(store, document), ())
        entry = next((e for e in wanted.entries if e.path == path), None)
        if entry is None or entry.kind != "file" or entry.sha256 is None:
            raise ArchiveError(f"{path!r} is not a file of the archived tree")
        if path in {item.path for item in document.withheld}:
            raise ArchiveError(f"{path!r} was withheld: it holds a secret's value")
        placed = placements(document).get(entry.sha256)
        if placed is not None:
            [region] = regions({entry.sha256: placed})  # one ranged GET, its bytes checked
            sink.writelines(blob for _, blob in fetch_region(store, region))
        else:
            store.download_blob(entry.sha256, sink)
        checkpoint("restore-fetched")
    except ArchiveError as exc:
        raise exc.within(f"restore of {cache_id}:{path} from {location.url()} failed") from exc
    return FileRestored(cache_id, path, entry.sha256, entry.size, store.where(relative), unread)


def pick_version(
    store: BlobStore, cache_id: str, tree: str | None
) -> tuple[str, CacheVersion | CacheRecordV1, Unread]:
    """(key, record) of the version to restore: of `tree` (a digest or a prefix of at least 8
    hex digits) if given, preferring one with the cache's files; else the newest with them. A
    cache archived only by the previous release has its one record at `caches/<cache>.json`.
    And the records passed over as they could not be read (s3:// URL -> why)."""
    check_tree(tree)

    def wanted(key: Key) -> bool:
        return tree is None or str(key.tree).startswith(tree)

    keys = [parse_key(item.key) for item in store.list(cache_prefix(cache_id, "versions/"))]
    found = [k for k in keys if k is not None and wanted(k)]
    if not found:
        legacy = read_legacy_cache(store, cache_id)
        if legacy is not None and legacy[2].fingerprint.tree_digest.startswith(tree or ""):
            return legacy[0], legacy[2], {}
        what = f"version {tree} of cache {cache_id}" if tree else f"cache {cache_id}"
        # Gone by a gc's rule, not lost: said as verify says it, from gc's own records.
        gone = GcRecords().of(store, cache_id, CACHE_KINDS)
        stood = stood_on(store, cache_id)  # a version a result there names was lost
        removal = next((r for key, r in gone.items() if wanted(key) and key.key not in stood), None)
        if removal is not None:
            raise ArchiveError(f"nothing to restore: {what} was {removal.describe()}")
        raise ArchiveError(f"no {what} archived at {store.location.url()}")
    trees = {k.tree for k in found}
    if tree is not None and len(trees) > 1:
        raise TreeAmbiguous(f"{tree!r} names {len(trees)} versions of {cache_id}: give more digits")
    records, unread = _readable_versions(store, [k.key for k in found])
    records.sort(key=lambda pair: (pair[1].with_content, pair[1].archived_at, pair[0]))
    return *records[-1], unread


def _readable_versions(
    store: BlobStore, keys: list[str]
) -> tuple[list[tuple[str, CacheVersion]], Unread]:
    """(key, record) of each version record that reads, and s3:// URL -> why of each that does
    not: a record damaged on the server is no candidate, and hides no good one (as the catalog
    passes it over). With none readable, the first one's error: there is nothing to restore."""
    records: list[tuple[str, CacheVersion]] = []
    unread: Unread = {}
    first: ArchiveError | None = None
    for key in keys:
        try:
            records.append((key, read_as(store, CacheVersion, key)))
        except S3Unavailable:
            raise  # the server's fault, not the record's: nothing is passed over
        except ArchiveError as exc:  # its message names the record
            unread[store.where(key)] = str(exc).removeprefix(f"{store.where(key)}: ")
            first = first or exc
    if first is not None and not records:
        raise first
    return records, unread


def _version_rows(
    store: BlobStore, relative: str, document: CacheVersion
) -> tuple[VersionRow, ArchiveRecord]:
    """The version a restore came from, as this host's newest archive of the cache."""
    url = store.location.url()
    key = parse_key(relative)
    assert key is not None and key.sha256 is not None, "a version's key names its sha256"
    sha = key.sha256
    row = VersionRow(
        document.cache_id, document.tree_digest, url, store.key(relative), sha,
        document.with_content, document.parent, document.archived_at,
    )  # fmt: skip
    archive = ArchiveRecord(
        document.cache_id, url, store.key(relative), sha, document.with_content,
        len(document.blobs), 0, document.archived_at, verified_at=None,
        tree_digest=document.tree_digest,
    )  # fmt: skip
    return row, archive


def _legacy_archive(store: BlobStore, cache_id: str) -> ArchiveRecord | None:
    """The previous release's record a restore came from, as this host's newest archive of the
    cache (no tree digest: the ledger's mark of that format), so the next archive of it names
    that record's tree as its parent and a teardown checks that record; None when it was
    removed since it was read (nothing to point at)."""
    found = read_legacy_cache(store, cache_id)
    if found is None:
        return None
    relative, sha, document = found
    return ArchiveRecord(
        cache_id, store.location.url(), store.key(relative), sha, document.with_content,
        len(document.blobs), 0, document.archived_at, verified_at=None,
    )  # fmt: skip


def _left_out(document: CacheVersion | CacheRecordV1, archived: Fingerprint) -> set[str]:
    """What a restore does not make: the files the archive withheld, and the symlinks whose
    name or target held a secret's value (masked in the fingerprint)."""
    return {item.path for item in document.withheld} | set(masked_links(archived))


def restorable(archived: Fingerprint, withheld: Collection[str]) -> Fingerprint:
    """The tree a restore makes of an archived one: without the files the archive withheld, and
    with no mode a crafted record could abuse (setuid, setgid, sticky, world-writable). A masked
    path (its name held a secret's value) is never made: its real name was never kept."""
    return Fingerprint.of(
        replace(e, mode=_safe_mode(e))
        for e in archived.entries
        if e.path not in withheld and not is_masked(e.path)
    )


def _safe_mode(e: Entry) -> int:
    # A symlink's own mode is always 0o777 on Linux and cannot be set: it grants nothing.
    return e.mode if e.kind == "symlink" else e.mode & SAFE_MODES


def _fetch_fingerprint(store: BlobStore, document: CacheVersion | CacheRecordV1) -> Fingerprint:
    """The archived fingerprint, its blob checked by sha256 and its digest by its entries."""
    described = document.fingerprint
    sink = io.BytesIO()
    store.download_blob(described.sha256, sink, cap=RECORD_MAX)
    try:
        fingerprint = Fingerprint.from_json(sink.getvalue().decode())
    except (LifecycleError, ValueError) as exc:
        raise ArchiveError(f"archived fingerprint: {exc}") from exc
    if fingerprint.tree_digest != described.tree_digest:
        raise ArchiveError("the archived fingerprint is not the one its record names")
    _check_paths(fingerprint.entries)
    return fingerprint


def _check_paths(entries: tuple[Entry, ...]) -> None:
    """Refuse a tree that would write outside the cache dir or through one of its own links,
    or that the file system cannot take (a NUL in a name, a mode beyond 0o7777, a file blob
    that is no sha256), before a single entry is made."""
    dirs = {e.path for e in entries if e.kind == "dir"}
    for e in entries:
        parts = e.path.split("/")
        parent = e.path.rpartition("/")[0]
        if any(p in ("", ".", "..") for p in parts) or (parent and parent not in dirs):
            raise ArchiveError(f"archived fingerprint has an unsafe path {e.path!r}")
        if "\0" in e.path or (e.link is not None and "\0" in e.link):
            raise ArchiveError(f"archived fingerprint has a NUL byte in {e.path!r}")
        if not 0 <= e.mode <= 0o7777:
            raise ArchiveError(f"archived fingerprint has mode {e.mode:o} for {e.path!r}")
        if e.kind == "file" and not (e.sha256 and _SHA256.fullmatch(e.sha256) and e.size >= 0):
            raise ArchiveError(f"archived fingerprint has no sha256 and size for {e.path!r}")


def _already_there(target: Path, wanted: Fingerprint) -> Fingerprint | None:
    """The target's fingerprint if it already is the archived tree; None if it is absent."""
    if not os.path.lexists(target):
        return None
    found = scan(target)
    if found.tree_digest != wanted.tree_digest:
        raise ArchiveError(
            f"{target} exists and holds another tree ({found.files} files); move it away first"
        )
    return found


def _rebuild(
    store: BlobStore,
    wanted: Fingerprint,
    placed: Mapping[str, Placed],
    target: Path,
    workers: int,
    say: Callable[[str], None],
    checkpoint: Checkpoint = lambda point: None,
) -> Fingerprint:
    """Download the tree into a temp dir beside `target`, verify it, rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(dir=target.parent, prefix=partial_prefix(target)))
    try:
        for e in wanted.entries:  # sorted by path: a parent comes before what it holds
            path = temp / e.path
            if e.kind == "dir":
                path.mkdir(mode=0o700)
            elif e.kind == "symlink":
                assert e.link is not None
                path.symlink_to(e.link)  # recreated as a link, its target never read
            elif e.kind == "other":
                # A FIFO, socket or device was recorded as "other" and never read; a FIFO of
                # the same mode stands in for it (it holds no data, and keeps the tree digest).
                os.mkfifo(path)
                path.chmod(e.mode)
        files = [e for e in wanted.entries if e.kind == "file"]
        download_files(store, temp, files, placed, workers, say, checkpoint)
        for e in sorted(
            (e for e in wanted.entries if e.kind == "dir"), key=lambda e: -e.path.count("/")
        ):
            (temp / e.path).chmod(e.mode)  # deepest first: a read-only dir is filled already
        temp.chmod(0o755)
        restored = scan(temp)
        if restored.tree_digest != wanted.tree_digest:
            raise ArchiveError(
                f"rebuilt tree digest {restored.tree_digest} is not the archived"
                f" {wanted.tree_digest}"
            )
        _rename_into(temp, target)
    except OSError as exc:
        remove_partial(temp)  # nothing half restored stays: the space it took is free again
        if no_room(exc):  # a write's error names no file: the dir it was filling is named
            raise DiskFull(target) from exc
        raise
    except BaseException:
        remove_partial(temp)
        raise
    return restored


def _rename_into(temp: Path, target: Path) -> None:
    """Rename the verified tree into place, atomically; a dir that appeared there meanwhile
    (another restore `--into` it, finished first) is never replaced, and is named."""
    try:
        temp.rename(target)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise ArchiveError(f"{target}: File exists (made meanwhile; not replaced)") from exc
        raise


class TreeAmbiguous(LifecycleError):
    """A tree prefix that more than one version of the cache starts with: bad input (exit 2),
    whichever verb was asked; more digits name one."""


def check_tree(tree: str | None) -> None:
    """A tree digest, or a prefix of one a person can type (at least 8 hex digits)."""
    if tree is not None and not _TREE_PREFIX.fullmatch(tree):
        raise LifecycleError(f"{tree!r} is not a tree digest (8 to 64 hex digits)")


def check_cache_id(cache_id: str) -> None:
    """A cache id as boots make them (`<cache name>-<12 hex digits>`): it becomes a dir name."""
    if not _CACHE_ID.fullmatch(cache_id):
        raise LifecycleError(
            f"{cache_id!r} is not a cache id (NAME-0123456789ab, as `lifecycle caches` lists)"
        )
