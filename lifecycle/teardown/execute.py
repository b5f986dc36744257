"""Remove one cache in two journalled phases, so that a crash at any point is safe to re-run.

    intent -> verify (verified | refused) -> rename to trash -> deleted -> rm -rf -> done

Every run that removes bytes has journalled its own `verified` step first: a run completing a
crashed one verifies again rather than trusting the old step. Until `deleted` is journalled
the trash dir is whole, so a refusal moves it back; after that it may be half removed, and
it stays in the trash for a later run to finish.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from lifecycle.ledger.archives import ArchiveRecord
from lifecycle.ledger.boots import CacheRecord
from lifecycle.teardown.faults import Checkpoint
from lifecycle.teardown.journal import Journal, Unfinished, trash_path


@dataclass(frozen=True)
class CacheOutcome:
    """What happened to one cache in this run."""

    cache_id: str
    removed: bool
    bytes_freed: int = 0
    problem: str | None = None  # why it was refused or could not be finished
    restored: bool = False  # its dir came back from the trash of a crashed run


def remove_cache(
    journal: Journal,
    cache: CacheRecord,
    archive: ArchiveRecord,
    *,
    resumes: Unfinished | None,
    verify: Callable[[], list[str]],
    holders: Callable[[], list[str]],
    checkpoint: Checkpoint,
) -> CacheOutcome:
    """Verify `archive` now, then move the cache's dir out of the way and remove it.

    `verify` returns the archive's problems ([] = verified); `holders` says who holds the dir
    right now (a boot, a running container), asked again just before it moves.
    """
    host, trash = Path(cache.host_path), trash_path(cache)
    journal.step(cache.id, "intent", resumes.describe() if resumes else str(host))
    checkpoint("after-intent")
    problems = verify()
    if problems:
        return refuse(journal, cache, resumes, problems)
    proof = f"{archive.location.rstrip('/')} {archive.record_key} sha256:{archive.record_sha256}"
    journal.step(cache.id, "verified", proof)
    checkpoint("after-verified")
    held = holders()
    if held:
        return refuse(journal, cache, resumes, held)
    if os.path.lexists(host):
        if os.path.lexists(trash):
            problem = f"both {host} and {trash} exist; move one away by hand"
            return refuse(journal, cache, resumes, [problem])
        # One rename: the cache is in place or in the trash, never half moved. If the rename
        # is lost to a power cut, the next run finds the dir in place and renames it again.
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
