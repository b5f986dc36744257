"""Remove one cache in two journalled phases, so that a crash at any point is safe to re-run.

    intent -> lease -> check (verified | refused) -> rename to trash -> release -> deleted
           -> rm -rf -> done

The check (lifecycle.teardown.invariant) runs under the cache's lease, which a boot takes too,
so no boot can pick the cache between the check and the rename. Every run that removes bytes
has journalled its own `verified` step first: a run completing a crashed one checks again
rather than trusting the old step. Until `deleted` is journalled the trash dir is whole, so a
refusal moves it back; after that it may be half removed, and it stays in the trash for a
later run to finish.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from lifecycle.faults import Checkpoint
from lifecycle.leases import CacheLease
from lifecycle.ledger.boots import CacheRecord
from lifecycle.teardown.invariant import where_now
from lifecycle.teardown.journal import Journal, Unfinished, trash_path


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


def remove_cache(
    journal: Journal,
    cache: CacheRecord,
    *,
    resumes: Unfinished | None,
    lease: Callable[[], CacheLease | None],
    check: Callable[[Path | None], Verdict],
    checkpoint: Checkpoint,
) -> CacheOutcome:
    """Under the cache's lease, check the removal invariant now, then move the dir out of the
    way; then remove it.

    `check(where)` gets the dir's current place (its path, or its trash when a crashed run had
    moved it), or None when the trash may be half removed and cannot be scanned.
    """
    host, trash = Path(cache.host_path), trash_path(cache)
    journal.step(cache.id, "intent", resumes.describe() if resumes else str(host))
    checkpoint("after-intent")
    held = lease()
    if held is None:
        return refuse(journal, cache, resumes, ["a boot holds it (its lease is taken)"])
    with held:
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
    checkpoint("after-rename")
    freed = _measured(trash, resumes)
    journal.step(cache.id, "deleted", str(trash), freed)
    checkpoint("after-deleted")
    try:
        shutil.rmtree(trash)
    except FileNotFoundError:
        pass  # removed by the run that crashed before `done`
    except OSError as exc:
        problem = f"cannot remove {trash}: {exc}; the next teardown finishes it"
        return CacheOutcome(cache.id, removed=False, problem=problem)
    checkpoint("after-rmtree")
    journal.step(cache.id, "done", None, freed, cache_state="torn-down")
    return CacheOutcome(cache.id, removed=True, bytes_freed=freed)


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
