"""The teardown journal: writing one run's steps, and reading back what a crash left unfinished.

A cache leaves in two phases: its dir is renamed to a sibling `.trash-<cache id>` (atomic on
one filesystem), and only then removed. The journal and the trash dir together say how far a
killed run got, so the next run can finish the job without ever guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from lifecycle.errors import LifecycleError
from lifecycle.home import Home
from lifecycle.leases import exclusive_or
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord
from lifecycle.ledger.removal import TeardownStep, record_step, steps_of

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
    for cache in caches:
        steps = steps_of(ledger, cache.id)
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
