"""The removal invariant: what must hold for a cache dir to go.

A cache dir is removed only if, under its lease (lifecycle.leases), which a boot also takes:
  (a) its tree, scanned again at that moment, is the tree its verified archived version holds;
  (b) that version holds the cache's files when they were asked for or archived before;
  (c) every boot that used the cache has a verified record where that version is;
  (d) when its files count (archived, or asked for, with content), none of them is withheld
      (lifecycle.withheld), unless `--drop-withheld` says they may go.
The plan checks the same when it is made, so that it says why a cache stays; the removal checks
again because a boot, a hand edit or another host may have changed things in between.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from lifecycle.archive.verify import Covered
from lifecycle.errors import LifecycleError
from lifecycle.fingerprint import Fingerprint, scan
from lifecycle.ledger.boots import CacheRecord, TaintedFile
from lifecycle.teardown.journal import Unfinished, trash_path
from lifecycle.withheld import withheld_files


@dataclass(frozen=True)
class Tree:
    """A cache's tree as scanned just now, or why it could not be."""

    fingerprint: Fingerprint | None
    problem: str | None = None
    # What the ledger's last scan was, to say what changed when the tree is not the archived one.
    last_scan: Fingerprint | None = None


def scan_now(cache: CacheRecord, where: Path) -> Tree:
    """Scan the dir at `where` (its place, or its trash) again; cheap when nothing changed."""
    last = None
    if cache.scan_path and Path(cache.scan_path).is_file():
        with suppress(LifecycleError, OSError):  # a damaged scan file costs a full re-hash
            last = Fingerprint.from_json(Path(cache.scan_path).read_text())
    try:
        return Tree(scan(where, last), last_scan=last)
    except LifecycleError as exc:
        return Tree(None, f"cannot scan it now: {exc}", last)


def where_now(cache: CacheRecord, resumes: Unfinished | None) -> Path | None:
    """Where the cache's dir is now: in place, or in the trash of a teardown that crashed after
    moving it; None when that run had begun removing it (the trash may be half gone)."""
    if resumes is not None and resumes.committed:
        return None
    host = Path(cache.host_path)
    return host if os.path.lexists(host) else trash_path(cache)


def scan_where_it_is(cache: CacheRecord, resumes: Unfinished | None) -> Tree | None:
    """`scan_now` wherever the dir is; None when it cannot be scanned (see `where_now`)."""
    where = where_now(cache, resumes)
    return None if where is None else scan_now(cache, where)


def archive_gaps(
    record: Covered, tree: Tree | None, used_by: Collection[str], *, want_content: bool
) -> list[str]:
    """Why the verified archive `record` does not cover the cache as it is now; [] when it does.

    `tree` None: not scanned, because a crashed run had begun removing the dir (it may be half
    gone); that run checked it before it began.
    """
    gaps = []
    archived = record.tree_digest
    if tree is None:
        pass
    elif tree.fingerprint is None:
        gaps.append(str(tree.problem))
    elif tree.fingerprint.tree_digest != archived:
        gaps.append(f"changed since archived: {_what_changed(tree, archived)}")
    since = sorted(set(used_by) - record.boot_ids)
    if since:
        gaps.append(f"booted since archived: {', '.join(since)} has no record there")
    if want_content and not record.with_content:
        gaps.append("its files are not in the archive (archived without --with-content)")
    return gaps


def withheld_paths(tree: Tree | None, tainted: Sequence[TaintedFile]) -> list[str]:
    """The files of the cache's tree as scanned now that no archive holds (lifecycle.withheld;
    `tainted`: what the ledger knows of their bytes); none when it was not scanned (a crashed
    run had begun removing it, having checked this first; or it cannot be, which keeps it)."""
    if tree is None or tree.fingerprint is None:
        return []
    return [w.path for w in withheld_files(tree.fingerprint, tainted)]


def withheld_reason(paths: Sequence[str]) -> str:
    """Why a cache holding `paths` stays: an archive cannot take them; --drop-withheld can."""
    return (
        f"{len(paths)} files withheld from any archive (they hold a secret's value):"
        f" {_some(paths)}; --drop-withheld removes it all the same"
    )


def _some(paths: Sequence[str]) -> str:
    return ", ".join(paths[:3]) + (", …" if len(paths) > 3 else "")


def _what_changed(tree: Tree, archived: str) -> str:
    assert tree.fingerprint is not None
    now = tree.fingerprint
    if tree.last_scan is None or tree.last_scan.tree_digest != archived:
        return f"tree {now.tree_digest[:12]} is not the archived {archived[:12]}"
    diff = tree.last_scan.diff(now)
    parts = [
        f"{len(paths)} {label} ({_some(paths)})"
        for label, paths in (
            ("added", diff.added),
            ("changed", diff.changed),
            ("removed", diff.removed),
        )
        if paths
    ]
    return "; ".join(parts) or f"tree {now.tree_digest[:12]} is not the archived {archived[:12]}"
