"""`gc --remote`: a snapshot of the archive, the plan (mark what is kept, then what goes, in
phases), and its sweep: journalled in the ledger, gc's record written in the archive, then
batches deleted after one more look that spares what a record written since names and what a
result pinned since holds.

Whatever refers to an object goes in an earlier phase, so a run stopped anywhere leaves every
remaining record whole (the next run completes it). The rules: docs/verbs/teardown.md, `gc`.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence, Set
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta

from lifecycle.archive.layout import Key, parse_key
from lifecycle.archive.objects import Listing
from lifecycle.archive.record import GC_DELETES_FOR, drop_intents, names_of, read_as, record_removal
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.boot.baked import baked_caches
from lifecycle.durations import instant
from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.formats import STORED_UNDER
from lifecycle.home import Home
from lifecycle.leases import exclusive_or
from lifecycle.ledger import Ledger
from lifecycle.ledger.removal import (
    GcObject,
    GcRun,
    finish_gc,
    gc_run,
    mark_removed,
    mark_spared,
    pending_objects,
    pins,
    start_gc,
)
from lifecycle.parallel import pool_map
from lifecycle.records import (
    BootRecordV1,
    CacheRecordV1,
    CacheVersion,
    ImageRecordV1,
    PinV1,
    Record,
    ResultRecordV1,
    ResultRecordV2,
    stored_as,
)
from lifecycle.results.archive import load_result_record
from lifecycle.results.model import pinned_result
from lifecycle.table import visible

_RESULTS = ("result", "legacy-result")  # read with their digest checked (lifecycle.results)
_READ = STORED_UNDER - {"gc"}  # gc's own records are not among what it plans


@dataclass(frozen=True)
class Snapshot:
    """The archive under one prefix: its objects, its records read, and what could not be."""

    objects: dict[str, Listing]  # key (relative) -> what the listing said of it
    keys: dict[str, Key]  # the objects of our layout, read as the layout names them
    records: dict[str, Record]  # key -> the record it holds
    unreadable: dict[str, str]  # key -> why it could not be read
    listed_at: datetime  # the server's clock when it listed them (this host's may run ahead)

    def age(self, key: str) -> float:
        """Seconds between the server storing the object and listing it, on its own clock."""
        return (self.listed_at - self.objects[key].modified).total_seconds()


def take_snapshot(
    store: BlobStore, earlier: Snapshot | None = None, *, workers: int = 8
) -> Snapshot:
    """List the whole prefix and read every record not read before (records are immutable and
    named by their bytes: one read once is that record forever; a store with copies reads it
    from S3 once per host, lifecycle.archive.copies)."""
    objects = {item.key: item for item in store.list()}
    listed_at = store.server_now()
    if store.copies is not None:
        store.copies.keep_only(objects)
    keys = {key: parsed for key in objects if (parsed := parse_key(key)) is not None}
    known = earlier.records if earlier else {}
    records = {key: known[key] for key in keys if key in known}
    wanted = [k for k in keys.values() if k.kind in _READ and k.key not in records]

    def read(key: Key) -> tuple[str, Record | str]:
        try:
            return key.key, _read(store, key)
        except S3Unavailable:  # not this record's fault: no other is read (exit 3)
            raise
        except ArchiveError as exc:
            return key.key, str(exc)

    found = pool_map(read, wanted, workers, "gc-read")
    unreadable = {key: why for key, why in found if isinstance(why, str)}
    records |= {key: record for key, record in found if not isinstance(record, str)}
    return Snapshot(objects, keys, records, unreadable, listed_at)


# A marker's kind -> the kinds its record may have (a result's: either release's).
_MARKED = {
    "boot-marker": ("boot",),
    "result-marker": ("result", "legacy-result"),
    "legacy-marker": ("result", "legacy-result"),
}


def needed(records: Iterable[Record]) -> set[str]:
    """Every key these records name."""
    return {key for record in records for key in names_of(record)}


def markers_of(snap: Snapshot, records: Iterable[str]) -> dict[str, str]:
    """The markers that belong to these records (keys): marker key -> `boot ID` or `result ID`."""
    ids = {(snap.keys[k].kind, snap.keys[k].id) for k in records if k in snap.keys}
    found = {}
    for key, parsed in snap.keys.items():
        kinds = _MARKED.get(parsed.kind, ())
        if any((kind, parsed.other) in ids for kind in kinds):
            found[key] = f"{kinds[0]} {parsed.other}"
    return found


def pinned_results(ledger: Ledger, snap: Snapshot) -> set[str]:
    """Results pinned for the team (the snapshot's pins, a damaged one's by the result its key
    names) and by this host (`pin RESULT`)."""
    found = {record.target for record in snap.records.values() if isinstance(record, PinV1)}
    found |= {snap.keys[key].id for key in snap.unreadable if snap.keys[key].kind == "pin"}
    for reasons in pins(ledger).values():
        found |= {r for r in map(pinned_result, reasons) if r is not None}
    return found


def held_by(snap: Snapshot, results: Set[str]) -> set[str]:
    """The records keeping these results (keys) keeps, whatever the policy: what they name,
    every record of each tree they stood on (one may hold the files another lacks) and the
    boots that touched one of those trees."""
    named = needed(snap.records[key] for key in results if key in snap.records)
    trees = {tree for key in named if (tree := _tree(snap.records.get(key))) is not None}
    held = set(results) | named
    held |= {key for key, record in snap.records.items() if _tree(record) in trees}
    held |= {
        key
        for key, record in snap.records.items()
        if isinstance(record, BootRecordV1) and _touched(record, trees)
    }
    return held


# The kinds of object a record may name (as needs() and held_by() find them in one that reads):
# while a record cannot be read, it and every object of those kinds stay. A kind not here may
# name anything.
# A version's and an image's trees keep the boots that touched them (_Marking.keeps_boot).
_MAY_NAME = {
    "version": {"boot", "blob", "pack"},
    "legacy-cache": {"boot", "blob", "pack"},
    "boot": {"blob", "pack"},
    "image": {"version", "legacy-cache", "boot", "blob", "pack"},  # the trees baked into it
    "result": {"boot", "version", "legacy-cache", "blob", "pack"},
    "legacy-result": {"boot", "version", "legacy-cache", "blob", "pack"},
    "pin": set(),  # its key names its result: pinned_results
}


def kept_unread(snap: Snapshot) -> dict[str, str]:
    """What stays because a record gc cannot read may name it (key -> why): a damaged record
    stops nothing else, and no object it may need goes."""
    kinds = {kind for key in snap.unreadable for kind in _MAY_NAME.get(snap.keys[key].kind, PHASES)}
    kept = {key: "a record gc cannot read" for key in snap.unreadable}
    first = min(snap.unreadable, default="")
    why = f"may be named by a record gc cannot read ({first})"
    return kept | {k: why for k, p in snap.keys.items() if p.kind in kinds and k not in kept}


def _tree(record: Record | None) -> Tree | None:
    """The version a cache record holds; None for any other record."""
    if isinstance(record, CacheVersion | CacheRecordV1):
        return record.cache_id, record.fingerprint.tree_digest
    return None


def _touched(record: BootRecordV1, trees: Set[Tree]) -> bool:
    """The boot started from one of these versions or left one."""
    return any(
        (use.cache_id, tree) in trees
        for use in record.uses
        for tree in (use.tree_digest_before, use.tree_digest_after)
        if tree is not None
    )


def _read(store: BlobStore, key: Key) -> Record:
    if key.kind in _RESULTS:
        body = store.read(key.key)
        if body is None:
            raise ArchiveError(f"{store.where(key.key)}: gone while listed")
        return load_result_record(body, key.key, store.where(key.key))
    return read_as(store, stored_as(key.kind), key.key)


# The kinds gc removes: the phase each goes in (whatever refers to an object goes in an earlier
# one), and why the plan lets an object of it go, as gc's record of a run says of each key.
_SWEPT = {
    "result": (1, "a result the policy did not keep, not pinned"),
    "legacy-result": (1, "a result the policy did not keep, not pinned"),
    "result-marker": (2, "the marker of a result that went"),
    "legacy-marker": (2, "the marker of a result that went"),
    "boot": (3, "a boot's record no kept result names, that touched no kept version"),
    "boot-marker": (4, "the marker of a boot whose record went"),
    "version": (5, "a version the policy did not keep, behind no kept result"),
    "legacy-cache": (5, "a version the policy did not keep, behind no kept result"),
    "blob": (6, "a blob no kept record names"),
    "pack": (6, "a pack holding no blob a kept record names"),
}
PHASES = {kind: phase for kind, (phase, _) in _SWEPT.items()}
RULES = {kind: rule for kind, (_, rule) in _SWEPT.items()}
Tree = tuple[str, str]  # (cache id, tree digest): one version of one cache


@dataclass(frozen=True)
class Policy:
    """What `gc --remote` was asked to keep."""

    keep_last: int | None = None
    older_than: timedelta | None = None
    grace: timedelta = timedelta(hours=1)

    def describe(self) -> str:
        """As the user gave it, for the journal and the plan."""
        parts = [f"--keep-last {self.keep_last}"] if self.keep_last is not None else []
        if self.older_than is not None:
            parts.append(f"--older-than {int(self.older_than.total_seconds())}s")
        return " ".join([*parts, f"--grace {int(self.grace.total_seconds())}s"])


@dataclass(frozen=True)
class Doomed:
    """An object the plan removes."""

    key: str  # relative to the prefix
    kind: str
    phase: int
    size: int


@dataclass(frozen=True)
class GcPlan:
    """The objects to remove, in phase order, and what was kept."""

    remove: tuple[Doomed, ...]
    pinned: tuple[str, ...]  # results kept (with what is behind them) because pinned
    kept: dict[str, int]  # kind -> objects of it kept
    unread: dict[str, str]  # key -> why: records gc could not read (kept, and what they may name)

    def unread_note(self, where: Callable[[str], str]) -> str | None:
        """One line on the records it could not read, or None."""
        if not self.unread:
            return None
        key, why = min(self.unread.items())
        more = f" (and {len(self.unread) - 1} more)" if len(self.unread) > 1 else ""
        parsed = parse_key(key)
        kinds = sorted(_MAY_NAME.get(parsed.kind, PHASES) if parsed else PHASES)
        return (
            f"cannot read {where(key)}{more}: {visible(why)}; kept, with every object of the kinds"
            f" it may name ({', '.join(kinds) or 'none'})"
        )

    @property
    def bytes(self) -> int:
        """What the removal frees."""
        return sum(d.size for d in self.remove)


def plan_gc(snap: Snapshot, policy: Policy, pinned: Set[str], now: datetime) -> GcPlan:
    """Mark and sweep one snapshot; what a record it could not read may name stays."""
    mark = _Marking(snap, policy, now)
    results = {
        key: record
        for key, record in snap.records.items()
        if isinstance(record, ResultRecordV1 | ResultRecordV2)
    }
    kept_results = {key for key, r in results.items() if mark.keeps_result(key, r, pinned)}
    # The versions the policy keeps; a pushed bake, each tree baked into it (its results audit
    # to them).
    trees = mark.kept_trees()
    trees |= {
        (cache.cache_id, cache.tree_digest)
        for record in snap.records.values()
        if isinstance(record, ImageRecordV1)
        for cache in baked_caches(record.labels)
    }
    kept = held_by(snap, kept_results)
    kept |= {key for key, record in snap.records.items() if _tree(record) in trees}
    kept |= {
        key
        for key, record in snap.records.items()
        if isinstance(record, BootRecordV1) and mark.keeps_boot(key, record, trees)
    }
    if policy.keep_last is None and policy.older_than is None:
        kept |= set(snap.records)  # no policy: only what no record names goes
    kept |= {key for key, parsed in snap.keys.items() if parsed.kind not in PHASES}
    kept |= kept_unread(snap).keys()
    kept |= needed(snap.records[key] for key in kept if key in snap.records)
    kept |= mark.young
    kept |= set(markers_of(snap, kept))
    remove = sorted(
        (
            Doomed(key, parsed.kind, PHASES[parsed.kind], snap.objects[key].size)
            for key, parsed in snap.keys.items()
            if key not in kept and parsed.kind in PHASES
        ),
        key=lambda doomed: (doomed.phase, doomed.key),
    )
    counts = Counter(snap.keys[key].kind for key in kept & snap.keys.keys())
    held = sorted({r.result_id for r in results.values() if r.result_id in pinned})
    return GcPlan(tuple(remove), tuple(held), counts, dict(snap.unreadable))


class _Marking:
    """The rules, for one snapshot and one policy at one moment."""

    def __init__(self, snap: Snapshot, policy: Policy, now: datetime) -> None:
        self.snap, self.policy = snap, policy
        grace = policy.grace.total_seconds()
        self.young = {key for key in snap.objects if snap.age(key) < grace}
        self.cutoff = now - policy.older_than if policy.older_than is not None else None

    def recent(self, at: str) -> bool:
        """Newer than --older-than (False without it); a time a record holds that is none
        (a boot's, written by anyone) cannot show it is older, so counts as newer: kept."""
        moment = instant(at)
        return self.cutoff is not None and (moment is None or moment > self.cutoff)

    def keeps_result(
        self, key: str, record: ResultRecordV1 | ResultRecordV2, pinned: Set[str]
    ) -> bool:
        """Pinned, young, or not old enough for --older-than (kept without it)."""
        if record.result_id in pinned or key in self.young or self.policy.older_than is None:
            return True
        return self.recent(record.result["created_at"])

    def kept_trees(self) -> set[Tree]:
        """The versions the policy keeps: each cache's newest N, those newer than D, and
        any with a record still in its grace."""
        newest: dict[Tree, str] = {}
        for record in self.snap.records.values():
            if isinstance(record, CacheVersion | CacheRecordV1):
                tree = (record.cache_id, record.fingerprint.tree_digest)
                newest[tree] = max(newest.get(tree, ""), record.archived_at)
        kept = {found for key in self.young if (found := _tree(self.snap.records.get(key)))}
        kept |= {tree for tree, at in newest.items() if self.recent(at)}
        if self.policy.keep_last is not None:
            by_cache: dict[str, list[tuple[str, Tree]]] = {}
            for tree, at in newest.items():
                by_cache.setdefault(tree[0], []).append((at, tree))
            for trees in by_cache.values():
                kept |= {tree for _, tree in sorted(trees, reverse=True)[: self.policy.keep_last]}
        return kept

    def keeps_boot(self, key: str, record: BootRecordV1, trees: Set[Tree]) -> bool:
        """Young, newer than D, or it touched a kept version (started from it or left it)."""
        return key in self.young or self.recent(record.boot.started_at) or _touched(record, trees)


BATCH = 200  # objects per DeleteObjects and per journal transaction


class GcBusy(LifecycleError):
    """Another sweep of the archive holds this host's gc lock."""

    exit_code = 1


def gc_lock(home: Home) -> AbstractContextManager[None]:
    """One sweep at a time per host (`gc --remote`, `apply`), refused at once rather than
    queued: the holder may be waiting for a person's agreement, for as long as it takes."""
    path = home.gc_lock
    return exclusive_or(
        path, lambda: GcBusy(f"another `gc --remote` or `apply` is running on this host ({path})")
    )


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
    """Remove what the run planned and has not removed yet: its intent written first, then one
    more look at the archive, which spares an object a record written since names (and that
    record is not going), or a result pinned since holds; then gc's record of what goes, and
    deletion, for at most GC_DELETES_FOR after the intent (then intent, look and record again
    for the rest). A host about to remove a cache reads recent intents
    (lifecycle.archive.record.being_collected): it either sees this one, or wrote its records
    before this look, which spares what they name."""
    removed = freed = 0
    spared: dict[str, str] = {}
    policy = gc_run(ledger, run_id).policy
    while pending := pending_objects(ledger, run_id):
        planned = [item.key for item in pending]
        _record(store, run_id, policy, planned, clock, intent=True)
        written = time.monotonic()
        snap = take_snapshot(store, snap)
        # Pins read again, not the plan's: a pin made since (here, or by another host) keeps
        # its result now as it would have kept it then. A record damaged since keeps what it
        # may name.
        now_spared = _spared(snap, set(planned), pinned_results(ledger, snap))
        now_spared |= {
            k: why for k, why in kept_unread(snap).items() if k in planned and k not in now_spared
        }
        mark_spared(ledger, run_id, now_spared)
        spared |= now_spared
        going = [item for item in pending if item.key not in now_spared]
        if going:  # no object goes that gc's record in the archive does not account for
            _record(store, run_id, policy, [item.key for item in going], clock)
        checkpoint("gc-looked")
        for batch in _batches(going):
            if time.monotonic() - written > GC_DELETES_FOR.total_seconds():
                if batch[0] is going[0]:  # the look alone took that long: another would too
                    raise ArchiveError(
                        f"gc stopped, nothing more removed: its look at the archive took over"
                        f" {GC_DELETES_FOR.total_seconds() / 60:g} minutes, longer than a"
                        " host about to remove a cache waits for it"
                    )
                break  # the intent ages: write it again and look again before more goes
            store.delete([item.key for item in batch])
            mark_removed(ledger, run_id, [item.key for item in batch], _stamp(clock()))
            removed += len(batch)
            freed += sum(item.size for item in batch)
            checkpoint("gc-after-batch")
    drop_intents(store, run_id)
    finish_gc(ledger, run_id, _stamp(clock()))
    return Swept(run_id, removed, freed, spared)


def _record(
    store: BlobStore,
    run_id: str,
    policy: str,
    keys: list[str],
    clock: Callable[[], datetime],
    *,
    intent: bool = False,
) -> None:
    try:
        record_removal(store, run_id, policy, keys, RULES, _stamp(clock()), intent=intent)
    except ArchiveError as exc:
        raise exc.within("gc stopped, nothing more removed: its record not written") from exc


def _spared(snap: Snapshot, pending: set[str], pinned: Set[str]) -> dict[str, str]:
    """Planned objects something that stays still needs: held by a pinned result (all a pin
    keeps, as the plan would have kept it), named by a record not planned to go, or a marker
    whose record stays."""
    results = {
        key: record.result_id
        for key, record in snap.records.items()
        if isinstance(record, ResultRecordV1 | ResultRecordV2) and record.result_id in pinned
    }
    spared: dict[str, str] = {}
    # Most runs see only the pins their plan saw, which hold nothing planned: one pass tells.
    if _behind(snap, results.keys()) & pending:
        for key, result_id in sorted(results.items()):
            why = f"behind result {result_id}, pinned since the plan"
            spared |= {k: why for k in sorted(_behind(snap, {key}) & pending) if k not in spared}
    staying = {k: r for k, r in snap.records.items() if k not in pending or k in spared}
    named, marked = needed(staying.values()), markers_of(snap, staying)
    # A record spared stays, and so does what it names in turn: a boot a new result names
    # keeps its log, which only that boot's record named. Until nothing more is spared.
    while found := {
        key: "named by a record that stays (written since the plan?)"
        if key in named
        else f"the record of {marked[key]} stays"
        for key in sorted(pending - spared.keys())
        if key in named or key in marked
    }:
        spared |= found
        kept = {key: snap.records[key] for key in found if key in snap.records}
        named |= needed(kept.values())
        marked |= markers_of(snap, kept)
    return spared


def _behind(snap: Snapshot, results: Set[str]) -> set[str]:
    """Every object keeping these results (keys) keeps: the records, their blobs, markers."""
    held = held_by(snap, results)
    held |= needed(snap.records[key] for key in held if key in snap.records)
    return held | set(markers_of(snap, held))


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
