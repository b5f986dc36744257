"""Tell, faster than a walk, whether a cache tree is exactly as a previous fingerprint saw it.

An unchanged re-scan is all `lstat`. In Python each call also builds a stat_result (~40 objects),
more than the syscall itself, and threads do not overlap that work (the GIL); so the directories
`previous` knew are listed by the C extension `lifecycle._rescan`, on one POSIX thread per worker
with the GIL released, and only the directories it flags are looked at again here, by the same
rules in Python. Without the extension (built with no C compiler at hand) Python lists them all.

Why a match proves the tree unchanged: every directory `previous` knew is listed, once; every entry
a listing shows (transient names aside, as in the walk) must be one `previous` has in that directory
with the same kind, size, mode, mtime_ns, inode and link target; and each listing must show as many
entries as `previous` has there. Names within one listing are distinct, so equal counts mean equal
sets. A new entry anywhere, a new directory included, shows up in a listed parent; a directory that
vanished or was replaced fails its open or its own check in its parent. Any doubt (an OSError, any
mismatch) answers False, and the caller's full walk then runs and reports what it finds.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lifecycle.fingerprint import Entry, Fingerprint

Listing = tuple[str, Mapping[str, "Entry"]]  # a directory and the entries expected in it
Rule = tuple[tuple[str, ...], Callable[[str, str], bool]]  # suffixes, is_transient(name, parent)
Differing = Callable[[str, Sequence["Entry"], int, tuple[str, ...]], list[Listing] | None]

_differing: Differing | None
try:
    from lifecycle._rescan import differing as _differing
except ImportError:  # installed where no C compiler was: the same check in Python, ~3x slower
    _differing = None

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FLAGS = (_DIR_FLAGS, _DIR_FLAGS | os.O_NOFOLLOW)  # [the root, below it]


def unchanged(
    top: str,
    previous: Fingerprint,
    workers: int,
    *,
    kinds: Mapping[int, str],
    transient: Rule,
) -> bool:
    """True only if the tree under `top` holds exactly `previous`'s entries, identities and all.

    `kinds` (S_IFMT -> kind) and `transient` (the suffixes every transient name ends in, and the
    rule) are the full scan's own rules, handed in. `workers` threads list directories (in C).
    """
    if _differing is None:
        listings = _listings(previous.entries)
        if listings is None:
            return False
        return _listed_unchanged(top, listings.items(), kinds, transient)
    # None: entries no walk could give. A directory holding a name with a transient suffix is
    # flagged for the walk's own rule here (the usual case: a `locks` dir holding lock files).
    flagged = _differing(top, previous.entries, workers, transient[0])
    return flagged is not None and _listed_unchanged(top, flagged, kinds, transient)


def _listings(entries: Sequence[Entry]) -> dict[str, dict[str, Entry]] | None:
    """Directory ("" for the root) -> {name: entry}; None for entries no walk could give."""
    # One pass in path order (a parent sorts before its children); keyed by bare name, so the
    # check looks up the name scandir gives in a small dict instead of building a path.
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


def _listed_unchanged(
    top: str,
    listings: Iterable[Listing],
    kinds: Mapping[int, str],
    transient: Rule,
) -> bool:
    """List each directory (not recursively): True if it holds exactly its expected entries."""
    lstat, readlink, file_type = os.DirEntry.stat, os.readlink, stat.S_IFMT
    suffixes, is_transient = transient
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
                    if kind != "dir" and name.endswith(suffixes) and is_transient(name, parent):
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
