"""How one cache leaves: the removal invariant, checked under its lease, in two journalled phases.

The invariant and the phases are docs/verbs/teardown.md's. The journal and the trash dir
together say how far a killed run got, so the next run finishes the job without guessing; the
plan checks the invariant to say why a cache stays, and the removal checks it again because a
boot, a hand edit or another host may have changed things in between.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from pathlib import Path

from lifecycle.archive.verify import Covered
from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.fingerprint import Fingerprint, scan
from lifecycle.home import Home
from lifecycle.leases import CacheLease, exclusive_or
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord, TaintedFile
from lifecycle.ledger.removal import TeardownStep, record_step, steps_of_caches
from lifecycle.table import count_of, some_of
from lifecycle.withheld import masked_links, withheld_files

FINAL_STEPS = ("done", "refused")


class TeardownBusy(LifecycleError):
    """Another teardown holds this host's teardown lock."""

    exit_code = 1


@dataclass(frozen=True)
class Unfinished:
    """A cache whose last teardown run stopped before `done` or `refused`, or left a trash dir."""

    run_id: str
    last_step: str
    trash: bool  # its `.trash-<id>` dir exists
    committed: bool  # a `deleted` step was recorded: the trash may be half removed, never restored
    bytes_deleted: int | None  # what that `deleted` step measured in the trash

    def describe(self) -> str:
        """One line for the plan."""
        where = "; its dir is in the trash" if self.trash else ""
        return f"resumes run {self.run_id} (stopped after {self.last_step}){where}"


@dataclass(frozen=True)
class Journal:
    """Writes the steps of one run; each step is its own transaction."""

    ledger: Ledger
    run_id: str
    stamp: Callable[[], str]  # the time each step is recorded at

    def step(
        self,
        cache_id: str,
        step: str,
        detail: str | None = None,
        bytes_freed: int | None = None,
        *,
        cache_state: str | None = None,
    ) -> None:
        """Journal one step; with `cache_state`, set the cache's state in the same transaction."""
        record = TeardownStep(self.run_id, cache_id, step, detail, bytes_freed, self.stamp())
        record_step(self.ledger, record, cache_state=cache_state)


def trash_path(cache: CacheRecord) -> Path:
    """Where a cache's dir is moved before removal: beside it, so the rename stays atomic."""
    return Path(cache.host_path).with_name(f".trash-{cache.id}")


def unfinished_runs(ledger: Ledger, caches: Iterable[CacheRecord]) -> dict[str, Unfinished]:
    """cache id -> the unfinished run, for every cache a killed teardown left behind."""
    found = {}
    caches = list(caches)
    journal = steps_of_caches(ledger, (cache.id for cache in caches))
    for cache in caches:
        steps = journal[cache.id]
        trash = trash_path(cache).exists()
        last = steps[-1] if steps else None
        if not trash and (last is None or last.step in FINAL_STEPS):
            continue
        # A `deleted` commits the dir until a run reaches `done` (a refusal of a committed run
        # leaves the trash as it is): one before the last `done` belongs to a removal that
        # finished, before the cache was restored, and commits nothing now.
        dones = [i for i, s in enumerate(steps) if s.step == "done"]
        since = steps[dones[-1] + 1 :] if dones else steps
        deleted = [s for s in since if s.step == "deleted"]
        found[cache.id] = Unfinished(
            run_id=last.run_id if last else "(unjournalled)",
            last_step=last.step if last else "nothing",
            trash=trash,
            committed=bool(deleted),
            bytes_deleted=deleted[-1].bytes_freed if deleted else None,
        )
    return found


def teardown_lock(home: Home) -> AbstractContextManager[None]:
    """One teardown at a time per host: a second would take the first's half-done caches for a
    crashed run's. The kernel drops the lock when its holder dies, SIGKILL included."""
    path = home.teardown_lock
    return exclusive_or(
        path, lambda: TeardownBusy(f"another teardown is running on this host (lock {path})")
    )


# The removal invariant (docs/verbs/teardown.md), as the plan and the removal both check it.
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
    found = [w.path for w in withheld_files(tree.fingerprint, tainted)]
    return sorted(found + masked_links(tree.fingerprint))


def withheld_reason(paths: Sequence[str]) -> str:
    """Why a cache holding `paths` stays: an archive cannot take them; --drop-withheld can."""
    return (
        f"{count_of(len(paths), 'file')} withheld from any archive (they hold a secret's value):"
        f" {some_of(paths)}; --drop-withheld removes it all the same"
    )


def _what_changed(tree: Tree, archived: str) -> str:
    assert tree.fingerprint is not None
    now = tree.fingerprint
    if tree.last_scan is None or tree.last_scan.tree_digest != archived:
        return f"tree {now.tree_digest[:12]} is not the archived {archived[:12]}"
    diff = tree.last_scan.diff(now)
    parts = [
        f"{len(paths)} {label} ({some_of(paths)})"
        for label, paths in (
            ("added", diff.added),
            ("changed", diff.changed),
            ("removed", diff.removed),
        )
        if paths
    ]
    return "; ".join(parts) or f"tree {now.tree_digest[:12]} is not the archived {archived[:12]}"


# intent -> lease -> check (verified | refused) -> rename to trash -> release -> deleted -> rm -rf
# -> done. Until `deleted` the trash dir is whole, so a refusal moves it back; after, a later run
# finishes it. Every run that removes bytes journals its own `verified` first.
@dataclass(frozen=True)
class CacheOutcome:
    """What happened to one cache in this run."""

    cache_id: str
    removed: bool
    bytes_freed: int = 0
    problem: str | None = None  # why it was refused or could not be finished
    restored: bool = False  # its dir came back from the trash of a crashed run
    settled: str | None = None  # its dir was already gone: recorded as torn-down or missing


@dataclass(frozen=True)
class Verdict:
    """What the check at the moment of removal found."""

    problems: list[str]  # [] when the cache may go
    proof: str = ""  # what was verified, for the journal
    tree_digest: str | None = None  # the tree it verified (None: the dir was not scanned)


def remove_cache(
    journal: Journal,
    cache: CacheRecord,
    *,
    resumes: Unfinished | None,
    lease: Callable[[], CacheLease | None],
    check: Callable[[Path | None], Verdict],
    checkpoint: Checkpoint,
    empty_as_root: Callable[[Path], str | None] | None = None,
) -> CacheOutcome:
    """Under the cache's lease, check the removal invariant now, then move the dir out of the
    way; then remove it.

    `check(where)` gets the dir's current place (its path, or its trash when a crashed run had
    moved it), or None when the trash may be half removed and cannot be scanned.
    `empty_as_root(trash)` empties what this process may not remove (None when it did, else
    why not), where dockerd can.
    """
    host, trash = Path(cache.host_path), trash_path(cache)
    journal.step(cache.id, "intent", resumes.describe() if resumes else str(host))
    checkpoint("after-intent")
    held = lease()
    if held is None:
        return refuse(journal, cache, resumes, ["a boot holds it (its lease is taken)"])
    with held:
        linked = _linked(host, trash)
        if linked:
            return refuse(journal, cache, resumes, [linked])
        verdict = check(where_now(cache, resumes))
        if verdict.problems:
            return refuse(journal, cache, resumes, verdict.problems)
        journal.step(cache.id, "verified", verdict.proof)
        checkpoint("after-verified")
        if os.path.lexists(host):
            if os.path.lexists(trash):
                problem = f"both {host} and {trash} exist; move one away by hand"
                return refuse(journal, cache, resumes, [problem])
            # One rename: the cache is in place or in the trash, never half moved. If the
            # rename is lost to a power cut, the next run finds the dir in place again.
            host.rename(trash)
            # A writer outside lifecycle (an engine run by hand on the dir, a JIT pointed at
            # it) may have added a file since the check: in no archive, it would go with the
            # dir. Scanned again where it now is (cheap: nothing else changed), it goes back
            # unless it is the tree verified.
            changed = _changed_since(cache, trash, verdict.tree_digest)
            if changed:
                return refuse(journal, cache, resumes, [changed])
    checkpoint("after-rename")
    freed = _measured(trash, resumes)
    journal.step(cache.id, "deleted", str(trash), freed)
    checkpoint("after-deleted")
    stays = _remove_trash(trash, cache.id, empty_as_root)
    if stays is not None:
        return CacheOutcome(cache.id, removed=False, problem=stays)
    checkpoint("after-rmtree")
    journal.step(cache.id, "done", None, freed, cache_state="torn-down")
    return CacheOutcome(cache.id, removed=True, bytes_freed=freed)


def _remove_trash(
    trash: Path, cache_id: str, empty_as_root: Callable[[Path], str | None] | None
) -> str | None:
    """Remove the trash; why it stays, if it does."""
    try:
        shutil.rmtree(trash)
    except FileNotFoundError:
        return None  # removed by the run that crashed before `done`, or by hand
    except PermissionError as exc:
        # An engine runs as its image's user, often root: a user in the docker group cannot
        # remove what it wrote, and no later run can either; dockerd, which ran it, can.
        why: str | None = empty_as_root(trash) if empty_as_root else "no Docker engine to ask"
        if why is None:
            try:
                shutil.rmtree(trash)  # what is left is this process's own: the dir itself
                return None
            except OSError as again:
                why = f"emptied through dockerd, yet {again}"
        return (
            f"cannot remove {trash}: {exc.strerror}: {exc.filename} (a container may have"
            f" written it as another user; {why}); remove {trash} as its owner (sudo rm -rf),"
            f" then `lifecycle teardown {cache_id}` records it gone"
        )
    except OSError as exc:
        return f"cannot remove {trash}: {exc}; the next teardown tries again"
    return None


def _linked(host: Path, trash: Path) -> str | None:
    """Why a cache whose dir is a symbolic link (moved to a bigger disk, linked back) is kept:
    the rename would move the link and the removal cannot follow it, so every teardown after
    would fail there, the dir gone from its place. A link an earlier teardown moved to the
    trash so goes back in place first."""
    if trash.is_symlink() and not os.path.lexists(host):
        trash.rename(host)
    if not host.is_symlink():
        return None
    return (
        f"{host} is a symbolic link to {host.readlink()}: teardown removes a cache's own dir,"
        " never what a link points at; move the dir back in its place, or remove both by hand"
        " and `teardown` records it gone"
    )


def _changed_since(cache: CacheRecord, trash: Path, verified: str | None) -> str | None:
    """Why the dir moved to `trash` is not the tree `verified`; None when it is (or none was)."""
    if verified is None:
        return None
    now = scan_now(cache, trash)
    if now.fingerprint is not None and now.fingerprint.tree_digest == verified:
        return None
    return (
        f"it changed between its check and its removal ({now.problem or 'another tree'}:"
        " something outside lifecycle writes it): kept; archive it again"
    )


def refuse(
    journal: Journal, cache: CacheRecord, resumes: Unfinished | None, problems: list[str]
) -> CacheOutcome:
    """Journal why a cache stays; a whole dir a crashed run left in the trash goes back."""
    host, trash = Path(cache.host_path), trash_path(cache)
    restored = False
    committed = resumes is not None and resumes.committed
    if not committed and os.path.lexists(trash) and not os.path.lexists(host):
        trash.rename(host)
        restored = True
    detail = "; ".join(problems)
    note = "; its dir was moved back from the trash" if restored else ""
    if committed and os.path.lexists(trash):
        note = f"; {trash} stays (a crashed run had journalled `deleted`) for a later run"
    journal.step(cache.id, "refused", detail + note)
    return CacheOutcome(cache.id, removed=False, problem=detail, restored=restored)


def _measured(trash: Path, resumes: Unfinished | None) -> int:
    """The bytes the cache held: measured in the trash before anything is removed from it, or
    as the crashed run measured them, since its rm -rf may have started."""
    if resumes is not None and resumes.bytes_deleted is not None:
        return resumes.bytes_deleted
    total = 0
    for directory, _dirs, files in os.walk(trash):
        for name in files:
            with suppress(FileNotFoundError):
                info = (Path(directory) / name).lstat()
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
    return total
