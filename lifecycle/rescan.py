"""Tell, faster than a walk, whether a cache tree is exactly as a previous fingerprint saw it.

An unchanged re-scan is all `lstat`, and one Python loop over ~20k entries sits at the interpreter's
floor (bench/README.md); threads do not overlap it (the GIL). So the directories `previous` knew
are listed, each on its own (not recursively), by forked processes taking batches of them from one
queue until it is empty.

Why a match proves the tree unchanged: every directory `previous` knew is listed, once; every entry
a listing shows (transient names aside, as in the walk) must be one `previous` has in that directory
with the same kind, size, mode, mtime_ns, inode and link target; and each listing must show as many
entries as `previous` has there. Names within one listing are distinct, so equal counts mean equal
sets. A new entry anywhere, a new directory included, shows up in a listed parent; a directory that
vanished or was replaced fails its open or its own check in its parent. Any doubt (an OSError, any
mismatch) answers False, and the caller's full walk then runs and reports what it finds.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from lifecycle.forking import fork_is_safe as _fork_is_safe
from lifecycle.forking import kill_and_reap, spawn

if TYPE_CHECKING:
    from lifecycle.fingerprint import Entry, Fingerprint

# Below this many entries one process checks everything: the fork, the child's copy-on-write
# faults and its exit cost more than half the listing saves. Measured on a 2-core VM, trees of 20
# files per dir, median of 7: 2,005 entries 11.6 ms in-process vs 11.8 forked; 3,008: 16.9 vs
# 14.7; 4,010: 22.8 vs 17.3; bench/fingerprint.py's 21,705: 99-152 vs 62-96.
FORK_MIN_ENTRIES = 3000
# Opening and listing an empty directory takes ~11 us, checking one entry ~5 us (measured).
_DIR_WEIGHT = 2
# Batches of work for the forked checkers: at most 1,024 (the queue stays within 2 KiB), each at
# least 64 entries (~0.3 ms, against one 2-byte read from the queue).
_MAX_BATCHES = 1024
_MIN_BATCH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FLAGS = (_DIR_FLAGS, _DIR_FLAGS | os.O_NOFOLLOW)  # [the root, below it]

Listing = tuple[str, Mapping[str, "Entry"]]  # a directory and the entries expected in it


def unchanged(
    top: str,
    previous: Fingerprint,
    workers: int,
    *,
    kinds: Mapping[int, str],
    transient: Callable[[str, str], bool],
) -> bool:
    """True only if the tree under `top` holds exactly `previous`'s entries, identities and all.

    `kinds` (S_IFMT -> kind) and `transient` are the full scan's own rules, handed in.
    """
    listings = _listings(previous.entries)
    if listings is None:
        return False
    if workers < 2 or len(previous.entries) < FORK_MIN_ENTRIES or not _fork_is_safe():
        return _listed_unchanged(top, listings.items(), kinds, transient)
    batches = _batches(listings)
    try:
        with _queue(len(batches)) as queue:
            check = partial(_drain, queue, top, batches, kinds, transient)
            return _forked([check] * workers)
    except OSError:  # no pipe or no fork to be had (EMFILE, EAGAIN, ENOMEM): the walk answers
        return False


def _listings(entries: Sequence[Entry]) -> dict[str, dict[str, Entry]] | None:
    """Directory ("" for the root) -> {name: entry}; None for entries no walk could give."""
    # One pass in path order (a parent sorts before its children); keyed by bare name, so the
    # check looks up the name scandir gives in a small dict instead of building a path. This pass
    # runs before the fork, unshared: ~7 ms of a ~65-90 ms re-scan of 21,705 entries.
    listings: dict[str, dict[str, Entry]] = {"": {}}
    get = listings.get
    last, listing = "", listings[""]
    for entry in entries:
        parent, _, name = entry.path.rpartition("/")
        if parent != last:  # most entries share the parent of the one before (~1 ms less)
            found = get(parent)
            if found is None:  # not sorted, or the parent is no directory
                return None
            last, listing = parent, found
        listing[name] = entry
        if entry.kind == "dir":
            listings[entry.path] = {}
    # Fewer than `entries`: a path came twice.
    return listings if sum(map(len, listings.values())) == len(entries) else None


def _batches(listings: Mapping[str, Mapping[str, Entry]]) -> list[list[Listing]]:
    """Directories, largest first, in at most _MAX_BATCHES batches of about equal work."""
    # Largest first, so the batches left at the end are small and the checkers finish together.
    ordered = sorted(listings.items(), key=_weight, reverse=True)
    target = max(_MIN_BATCH, -(-sum(map(_weight, ordered)) // _MAX_BATCHES))
    batches: list[list[Listing]] = [[]]
    load = 0
    for listing in ordered:
        if load >= target:
            batches.append([])
            load = 0
        batches[-1].append(listing)
        load += _weight(listing)
    return batches


def _weight(listing: Listing) -> int:
    return len(listing[1]) + _DIR_WEIGHT


@contextlib.contextmanager
def _queue(batches: int) -> Iterator[int]:
    """A pipe's read end holding the numbers 0..batches-1, two bytes each; closed on exit."""
    # One write of at most 2 KiB: it fits the smallest pipe buffer (a page), so it never blocks,
    # and no record is ever split, so every read of two bytes takes exactly one number.
    read, write = os.pipe()
    try:
        os.write(write, b"".join(n.to_bytes(2, "little") for n in range(batches)))
    finally:
        os.close(write)
    try:
        yield read
    finally:
        os.close(read)


def _drain(
    queue: int,
    top: str,
    batches: Sequence[Iterable[Listing]],
    kinds: Mapping[int, str],
    transient: Callable[[str, str], bool],
) -> bool:
    """Check batches taken from `queue` until it is empty; on a mismatch, empty it and say so."""
    # Each checker takes the next batch when it is done with one, so a checker on a slower CPU
    # (on this VM the same share takes 48 ms or 68 ms) does less; and a mismatch found by one
    # stops the others after their current batch instead of at the end of a fixed share.
    while record := os.read(queue, 2):
        if not _listed_unchanged(top, batches[int.from_bytes(record, "little")], kinds, transient):
            while os.read(queue, 4096):
                pass
            return False
    return True


def _listed_unchanged(
    top: str,
    listings: Iterable[Listing],
    kinds: Mapping[int, str],
    transient: Callable[[str, str], bool],
) -> bool:
    """List each directory (not recursively): True if it holds exactly its expected entries."""
    lstat, readlink, file_type = os.DirEntry.stat, os.readlink, stat.S_IFMT
    for directory, expected in listings:
        parent = directory.rpartition("/")[2]
        get = expected.get
        seen = 0
        try:
            # O_NOFOLLOW below the root, as the walk does: a directory swapped for a symlink fails.
            fd = os.open(f"{top}/{directory}" if directory else top, _FLAGS[bool(directory)])
        except OSError:
            return False
        try:
            with os.scandir(fd) as items:
                for item in items:
                    name = item.name
                    st = lstat(item, follow_symlinks=False)
                    mode = st.st_mode
                    kind = kinds.get(file_type(mode), "other")
                    # The walk's transient filter, with its cheap suffix test first.
                    if (
                        kind != "dir"
                        and name.endswith((".lock", ".tmp"))
                        and transient(name, parent)
                    ):
                        continue
                    prev = get(name)
                    # What scan() compares before it re-uses an entry, cheapest and likeliest first;
                    # sizes are stored for files only, link targets for symlinks only.
                    if (
                        prev is None
                        or prev.mtime_ns != st.st_mtime_ns
                        or prev.inode != st.st_ino
                        or prev.kind != kind
                        or prev.mode != mode & 0o7777
                        or prev.size != (st.st_size if kind == "file" else 0)
                        or prev.link != (readlink(name, dir_fd=fd) if kind == "symlink" else None)
                    ):
                        return False
                    seen += 1
        except OSError:
            return False
        finally:
            os.close(fd)
        if seen != len(expected):
            return False
    return True


def _forked(checks: Sequence[Callable[[], bool]]) -> bool:
    """Run checks[0] here and every other check in a forked child; True if all of them pass."""
    children: list[int] = []
    try:
        for check in checks[1:]:
            spawn(check, children)
        if not checks[0]():
            return False
        while children:
            _, status = os.waitpid(children[-1], 0)
            children.pop()
            if os.waitstatus_to_exitcode(status) != 0:
                return False
        return True
    finally:
        # On a mismatch, an error or a KeyboardInterrupt here: the answer is known, stop the rest.
        kill_and_reap(children)
