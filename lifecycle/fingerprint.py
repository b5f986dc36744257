"""Fingerprint a JIT cache directory byte for byte: every entry, its content hash, one tree digest.

The tree digest names one build of a cache (two cold builds of one configuration differ: compiled
graphs embed compile times and addresses), so it covers what a restore must reproduce (paths,
kinds, sizes, modes, contents, link targets) and nothing a restore cannot (mtimes, inodes). Never
scan a cache while a boot writes it: a file that changes under the scan is an error, not a
silently wrong hash.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter, is_
from pathlib import Path

from lifecycle.errors import LifecycleError, not_yours
from lifecycle.parallel import pool_map
from lifecycle.redact import is_masked, mask_link, mask_paths

CHUNK = 1 << 20  # read size; also the largest file read in one go
# Small files go to the pool in batches, not one task each; bench/README.md has the figures.
BATCH_FILES = 64
BATCH_BYTES = 8 << 20
FORMAT = 1  # of to_json; bump when the layout changes
_DIGEST_HEADER = "lifecycle-tree-v1\0"
# O_NOFOLLOW: a file swapped for a symlink is not followed; O_NONBLOCK: one swapped for a FIFO
# does not block the open. Both then fail the identity check against the walk's lstat.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}  # else "other"
# Every name is_transient takes ends in one of these: a cheap test before the rule itself.
TRANSIENT_SUFFIXES = (".lock", ".tmp")
_RACE_HINT = "is a boot still writing this cache?"


class ScanError(LifecycleError):
    """A cache dir that cannot be fingerprinted: missing, unreadable, or changing under the scan."""


class FingerprintFormatError(LifecycleError):
    """A stored fingerprint that does not parse, or whose digest does not match its entries."""


@dataclass(frozen=True)
class Entry:
    """One entry below the cache root; `sha256` for regular files, `link` for symlinks."""

    path: str  # POSIX path relative to the cache root, e.g. "cached_ops/mix/mix.so"
    kind: str  # "file" | "dir" | "symlink" | "other" (FIFO, socket, device)
    size: int  # bytes for files, 0 otherwise
    mode: int  # st_mode & 0o7777
    sha256: str | None
    link: str | None  # target as stored (os.readlink), never followed
    mtime_ns: int
    inode: int


@dataclass(frozen=True)
class FingerprintDiff:
    """Paths that differ between two fingerprints, each tuple sorted."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]  # same path, different kind, size, mode, content or link target

    def __bool__(self) -> bool:
        """True when anything differs."""
        return bool(self.added or self.removed or self.changed)


@dataclass(frozen=True)
class Fingerprint:
    """All entries of one cache dir, sorted by path, and the tree digest over them."""

    entries: tuple[Entry, ...]
    tree_digest: str
    files: int
    bytes: int

    def to_json(self) -> str:
        """Compact, stable JSON: one array per entry in Entry's field order."""
        rows = [
            [e.path, e.kind, e.size, e.mode, e.sha256, e.link, e.mtime_ns, e.inode]
            for e in self.entries
        ]
        document = {"format": FORMAT, "tree_digest": self.tree_digest, "entries": rows}
        return json.dumps(document, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Fingerprint:
        """Parse `to_json` output; the digest is recomputed, so a tampered entry is refused."""
        try:
            document = json.loads(text)
            if document["format"] != FORMAT:
                raise FingerprintFormatError(f"fingerprint format {document['format']!r}")
            entries = tuple(_entry_from_row(row) for row in document["entries"])
            stored = document["tree_digest"]
            if len({e.path for e in entries}) != len(entries):
                raise ValueError("a path appears twice")
        except (ValueError, KeyError, TypeError) as exc:
            raise FingerprintFormatError(f"not a fingerprint: {exc}") from exc
        fingerprint = cls.of(entries)
        if fingerprint.tree_digest != stored:
            raise FingerprintFormatError(
                f"tree digest {stored} does not match its entries ({fingerprint.tree_digest})"
            )
        return fingerprint

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> Fingerprint:
        """The fingerprint of these entries (sorted here), with its tree digest computed."""
        return _fingerprint(tuple(sorted(entries, key=attrgetter("path"))))

    def diff(self, other: Fingerprint) -> FingerprintDiff:
        """What changed going from `self` to `other` (added = only in `other`)."""
        if other is self:  # what an unchanged re-scan gives back: nothing to compare
            return FingerprintDiff((), (), ())
        mine = {e.path: _digest_fields(e) for e in self.entries}
        theirs = {e.path: _digest_fields(e) for e in other.entries}
        return FingerprintDiff(
            added=tuple(sorted(theirs.keys() - mine.keys())),
            removed=tuple(sorted(mine.keys() - theirs.keys())),
            changed=tuple(sorted(p for p in mine.keys() & theirs.keys() if mine[p] != theirs[p])),
        )


def is_transient(name: str, parent: str) -> bool:
    """True for a non-directory a JIT build creates and deletes on its own (never fingerprinted)."""
    # Exactly two patterns, both seen coming and going in a real TorchInductor cache while it
    # compiles: `*.lock` directly inside a directory named `locks` (empty FileLock files), and dot
    # files ending in `.tmp` such as `.<pid>.<tid>.tmp` (a writer's file before os.replace).
    # Directories are never transient, so a `locks` dir itself stays in the fingerprint.
    return (parent == "locks" and name.endswith(".lock")) or (
        name.startswith(".") and name.endswith(".tmp")
    )


def _fingerprint(entries: tuple[Entry, ...]) -> Fingerprint:
    """The fingerprint of sorted entries; its tree digest is the sha256 over path, kind, size,
    mode and content (sha256 or link target) of each."""
    # Every field ends in NUL, which no path or link target can contain, so the encoding is
    # unambiguous without escaping; surrogateescape gives back the exact bytes of odd file names.
    lines = [_DIGEST_HEADER]
    for e in entries:
        content = e.sha256 if e.kind == "file" else e.link if e.kind == "symlink" else ""
        lines.append(f"{e.path}\0{e.kind}\0{e.size}\0{e.mode:o}\0{content}\0")
    digest = hashlib.sha256(os.fsencode("".join(lines))).hexdigest()
    files = [e.size for e in entries if e.kind == "file"]
    return Fingerprint(entries, digest, files=len(files), bytes=sum(files))


def scan(
    root: Path,
    previous: Fingerprint | None = None,
    *,
    workers: int | None = None,
    secrets: Mapping[str, str] | None = None,
    masked_like: Fingerprint | None = None,
) -> Fingerprint:
    """Fingerprint the tree under `root`; with `previous`, unchanged files are not read again.

    An unchanged tree gives back `previous` itself. `workers` threads hash (default: one per CPU).
    A path or link target holding one of the `secrets`' values (name -> value), or shaped
    like one `masked_like` (default: `previous`) masked, is masked (lifecycle.redact): its
    real text is in no fingerprint.
    """
    # The root itself may be a symlink (a cache dir moved to a bigger disk); nothing below it is.
    if not root.exists():
        raise ScanError(f"{root}: cache dir does not exist")
    if not root.is_dir():
        raise ScanError(f"{root}: not a directory")
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    top = os.fspath(root)
    # Re-use a hash when size, mtime_ns and inode all match: the trade-off git's index makes.
    # Unlike git (core.trustctime) ctime is left out: chmod, chown or a new hard link bump it
    # without touching content, and mode is compared anyway. A same-size rewrite within one
    # mtime tick would go unseen, one more reason never to scan a cache a boot is writing.
    known = {} if previous is None else {e.path: e for e in previous.entries}
    walked = list(_walk(top))
    like = masked_like or previous
    masked = mask_paths(
        ((path, st.st_ino) for path, st, _ in walked),
        secrets or {},
        () if like is None else ((e.path, e.inode) for e in like.entries),
    )
    # A link target holding a secret's value is masked as a name is (lifecycle.redact).
    links_before = {
        e.path: e.link for e in (like.entries if like else ()) if e.link and is_masked(e.link)
    }
    entries: list[Entry] = []
    stale: list[tuple[int, str]] = []  # position in `entries` and real path of files to hash
    for real, st, link in walked:
        path = masked.get(real, real)
        if link is not None and (secrets or path in links_before):
            link = mask_link(link, secrets or {}, links_before.get(path))
        mode = st.st_mode & 0o7777
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "other")
        size = st.st_size if kind == "file" else 0
        prev = known.get(path)
        if prev is not None and _same_identity(prev, kind, size, st):
            same = prev.mode == mode and prev.link == link
            entries.append(prev if same else replace(prev, mode=mode, link=link))
        elif kind == "file":
            stale.append((len(entries), real))
            entries.append(Entry(path, kind, size, mode, None, None, st.st_mtime_ns, st.st_ino))
        else:
            entries.append(Entry(path, kind, size, mode, None, link, st.st_mtime_ns, st.st_ino))
    files = [(real, entries[i]) for i, real in stale]
    for (i, _), sha in zip(stale, _hash_all(top, files, workers), strict=True):
        entries[i] = replace(entries[i], sha256=sha)
    entries.sort(key=attrgetter("path"))
    # Every entry the very object of `previous`: its digest stands, and re-encoding ~1 µs per
    # entry (a sixth of an unchanged re-scan) is saved.
    if (
        previous is not None
        and len(entries) == len(previous.entries)
        and all(map(is_, entries, previous.entries))
    ):
        return previous
    return _fingerprint(tuple(entries))


def _same_identity(prev: Entry, kind: str, size: int, st: os.stat_result) -> bool:
    return (
        prev.kind == kind
        and prev.size == size
        and prev.mtime_ns == st.st_mtime_ns
        and prev.inode == st.st_ino
    )


def _walk(top: str) -> Iterator[tuple[str, os.stat_result, str | None]]:
    """(relative path, lstat, link target) of every entry below `top`; nothing is followed."""
    # scandir on a directory fd makes DirEntry.stat an fstatat on the bare name, which measured
    # ~15 % faster than lstat on the full path; the walk's syscalls are most of a re-scan.
    pending = [""]
    while pending:
        prefix = pending.pop()
        directory = f"{top}/{prefix[:-1]}" if prefix else top
        parent = prefix[:-1].rpartition("/")[2]
        try:
            # O_NOFOLLOW below the root: a directory swapped for a symlink is not entered.
            fd = os.open(directory, _DIR_FLAGS | (os.O_NOFOLLOW if prefix else 0))
        except OSError as exc:
            raise _scan_error(directory, exc) from exc
        try:
            with os.scandir(fd) as listing:
                for item in listing:
                    name = item.name
                    try:
                        st = item.stat(follow_symlinks=False)
                        # Not Path.readlink: a Path would normalise "a//b/", and the target text
                        # is what a restore must recreate.
                        link = os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None
                    except OSError as exc:
                        raise _scan_error(f"{directory}/{name}", exc) from exc
                    if stat.S_ISDIR(st.st_mode):
                        pending.append(f"{prefix}{name}/")
                    elif name.endswith(TRANSIENT_SUFFIXES) and is_transient(name, parent):
                        continue
                    yield prefix + name, st, link
        except OSError as exc:  # reading the directory itself
            raise _scan_error(directory, exc) from exc
        finally:
            os.close(fd)


def _scan_error(path: str, exc: OSError) -> ScanError:
    if isinstance(exc, FileNotFoundError):
        return ScanError(f"{path}: vanished during the scan; {_RACE_HINT}")
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # replaced by a symlink or a file since
        return ScanError(f"{path}: changed during the scan; {_RACE_HINT}")
    return ScanError(f"{path}: cannot read: {exc.strerror}{not_yours(path, exc)}")


def _hash_all(top: str, files: Sequence[tuple[str, Entry]], workers: int) -> list[str]:
    """sha256 of every (real path, entry) on a thread pool (hashlib drops the GIL); results in
    `files` order."""
    # Largest first, so one big .so is not left for the end while the other threads idle; small
    # files then go in batches, so the pool's per-task overhead is not paid per file.
    order = sorted(range(len(files)), key=lambda i: -files[i][1].size)
    batches: list[list[int]] = []
    weight = 0
    for i in order:
        size = files[i][1].size
        if size > CHUNK or not batches or len(batches[-1]) >= BATCH_FILES or weight >= BATCH_BYTES:
            batches.append([])
            weight = 0
        batches[-1].append(i)
        weight += size

    def hash_batch(batch: list[int]) -> list[str]:
        return [_hash_masked(top, *files[i]) for i in batch]

    digests = [""] * len(files)
    # On the first failure the queued batches are dropped rather than hashed for nothing.
    for batch, shas in zip(
        batches, pool_map(hash_batch, batches, workers, "fingerprint"), strict=True
    ):
        for i, sha in zip(batch, shas, strict=True):
            digests[i] = sha
    return digests


def _hash_masked(top: str, real: str, entry: Entry) -> str:
    """`_hash_file` of a file whose path may be masked: an error names the masked path."""
    try:
        return _hash_file(f"{top}/{real}", entry)
    except ScanError as exc:
        if real == entry.path:
            raise
        raise ScanError(str(exc).replace(real, entry.path)) from None


_buffers = threading.local()


def _hash_file(path: str, walked: Entry) -> str:
    """sha256 of one file read in CHUNK pieces into a per-thread buffer (memory stays bounded)."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None or len(view) != CHUNK:
        view = _buffers.view = memoryview(bytearray(CHUNK))
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise _scan_error(path, exc) from exc
    try:
        expected = (walked.size, walked.mtime_ns, walked.inode)
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode) or _identity(before) != expected:
            raise ScanError(f"{path}: changed during the scan; {_RACE_HINT}")
        digest = hashlib.sha256()
        total = 0
        while count := os.readv(fd, [view]):
            digest.update(view[:count])
            total += count
        if total != walked.size or _identity(os.fstat(fd)) != expected:
            raise ScanError(f"{path}: changed while being read; {_RACE_HINT}")
        return digest.hexdigest()
    except OSError as exc:
        raise _scan_error(path, exc) from exc
    finally:
        os.close(fd)


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _digest_fields(e: Entry) -> tuple[str, int, int, str | None, str | None]:
    return (e.kind, e.size, e.mode, e.sha256, e.link)


def _entry_from_row(row: object) -> Entry:
    """One `to_json` entry array back to an Entry, refusing anything of the wrong shape or type."""
    # `type(x) is int` rather than isinstance: it refuses bools and costs a third as much, which
    # matters at 20k rows (loading a previous fingerprint should not cost more than re-scanning).
    if not isinstance(row, list) or len(row) != 8:
        raise TypeError(f"entry {row!r} is not an array of 8 fields")
    path, kind, size, mode, sha256, link, mtime_ns, inode = row
    if not (
        type(path) is type(kind) is str
        and type(size) is type(mode) is type(mtime_ns) is type(inode) is int
    ):
        raise TypeError(f"entry {row!r} has a field of the wrong type")
    if kind not in ("file", "dir", "symlink", "other"):
        raise ValueError(f"entry {path!r} has unknown kind {kind!r}")
    content_ok = (type(sha256) is str if kind == "file" else sha256 is None) and (
        type(link) is str if kind == "symlink" else link is None
    )
    if not content_ok:
        raise ValueError(f"entry {path!r}: sha256 is for files only, link for symlinks only")
    return Entry(path, kind, size, mode, sha256, link, mtime_ns, inode)
