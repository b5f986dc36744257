"""Carry out a `gc --remote` plan: journalled first, checked again, then removed phase by phase.

    plan -> journal (every object, one transaction) -> a fresh look at the archive -> spare what
    a record written since names -> the record of what goes, in the archive
    (lifecycle.archive.record) -> delete a batch -> journal it removed -> ... -> finished

A run killed anywhere leaves its plan in the ledger with some objects not marked; the next run
at that location completes it first, with the same fresh look: nothing is deleted that a record
not itself being removed names. Since whatever refers to an object goes in an earlier phase,
every record left behind at any moment is whole.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from lifecycle.archive.record import record_removal
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.faults import Checkpoint
from lifecycle.gc.plan import RULES, GcPlan, Policy
from lifecycle.gc.snapshot import Snapshot, markers_of, needed, take_snapshot
from lifecycle.ledger import Ledger
from lifecycle.ledger.gc import (
    GcObject,
    GcRun,
    finish_gc,
    gc_run,
    mark_removed,
    mark_spared,
    pending_objects,
    start_gc,
)

BATCH = 200  # objects per DeleteObjects and per journal transaction


@dataclass(frozen=True)
class Swept:
    """What one run (or the completion of a stopped one) removed and spared."""

    run_id: str
    removed: int
    bytes_freed: int
    spared: dict[str, str]  # key -> why it stayed after all


def journal_plan(
    ledger: Ledger, store: BlobStore, plan: GcPlan, policy: Policy, now: datetime
) -> str:
    """Write the run and every object of its plan to the ledger before anything is deleted."""
    run_id = f"g-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"  # like teardown's run ids
    run = GcRun(run_id, store.location.url(), _stamp(now), policy.describe())
    start_gc(ledger, run, [GcObject(run_id, d.key, d.phase, d.size) for d in plan.remove])
    return run_id


def sweep(
    ledger: Ledger,
    store: BlobStore,
    run_id: str,
    clock: Callable[[], datetime],
    *,
    snap: Snapshot | None = None,
    checkpoint: Checkpoint = lambda point: None,
) -> Swept:
    """Remove what the run planned and has not removed yet, after one more look: an object a
    record written since names (and that record is not going) is spared."""
    pending = pending_objects(ledger, run_id)
    fresh = take_snapshot(store, snap)
    if fresh.unreadable:
        key, why = next(iter(fresh.unreadable.items()))
        raise ArchiveError(f"gc stopped, nothing more removed: cannot read {key}: {why}")
    spared = _spared(fresh, {item.key for item in pending})
    mark_spared(ledger, run_id, spared)
    going = [item for item in pending if item.key not in spared]
    if going:  # no object goes that gc's record in the archive does not account for
        policy, keys = gc_run(ledger, run_id).policy, [item.key for item in going]
        try:
            record_removal(store, run_id, policy, keys, RULES, _stamp(clock()))
        except ArchiveError as exc:
            raise exc.within("gc stopped, nothing more removed: its record not written") from exc
    removed = freed = 0
    for batch in _batches(going):
        store.delete([item.key for item in batch])
        mark_removed(ledger, run_id, [item.key for item in batch], _stamp(clock()))
        removed += len(batch)
        freed += sum(item.size for item in batch)
        checkpoint("gc-after-batch")
    finish_gc(ledger, run_id, _stamp(clock()))
    return Swept(run_id, removed, freed, spared)


def _spared(snap: Snapshot, pending: set[str]) -> dict[str, str]:
    """Planned objects something that stays still needs: named by a record not planned to go,
    or a marker whose record stays."""
    staying = {key: record for key, record in snap.records.items() if key not in pending}
    named = needed(staying.values())
    marked = markers_of(snap, staying)
    spared = {
        key: "named by a record that stays (written since the plan?)" for key in pending & named
    }
    spared |= {
        key: f"the record of {marked[key]} stays" for key in pending - named if key in marked
    }
    return spared


def _batches(items: Sequence[GcObject]) -> list[list[GcObject]]:
    """Runs of at most BATCH objects, never two phases in one: a phase ends before the next."""
    batches: list[list[GcObject]] = []
    for item in items:
        if not batches or len(batches[-1]) == BATCH or batches[-1][-1].phase != item.phase:
            batches.append([])
        batches[-1].append(item)
    return batches


def _stamp(now: datetime) -> str:
    return now.isoformat(timespec="seconds")
