"""What `gc --remote` removes: mark what is kept, then sweep every object no kept record needs.

Kept, whatever the policy says:
- a result pinned (in the archive by `pin RESULT`, or in this host's ledger), and everything
  behind it: its boot's record, the exact version of each cache it stood on (every record of
  that tree: one may hold the files another lacks), and their blobs;
- every object written less than `grace` ago: an archive on another host may be about to
  name it (blobs go up before the record that needs them);
- team pins and image records.
The policy: `--keep-last N` keeps each cache's N newest versions (trees); `--older-than D`
keeps the versions, boots and results newer than D; given both, a version goes only when both
let it. A result goes only when --older-than lets it and it is not pinned, and a version behind
a kept result stays. A boot's record stays while a kept result names it, it touched a kept
version, or (with --older-than) it is newer than D. Markers go with their record; a blob goes
when no kept record names it. With neither option every record stays, and only what no record
names goes (the leftovers of an archive that stopped). A pack goes only when no kept record
names any blob in it; packs are never rewritten to drop the blobs no record needs any more
(no repacking: a pack half needed stays whole).

Phases order the removal so that whatever refers to an object goes before it: a run stopped at
any point leaves every remaining record whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Set
from dataclasses import dataclass
from datetime import datetime, timedelta

from lifecycle.gc.snapshot import Snapshot, markers_of, needed
from lifecycle.records import (
    BootRecordV1,
    CacheRecordV1,
    CacheVersion,
    ResultRecordV1,
    ResultRecordV2,
)

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

    @property
    def bytes(self) -> int:
        """What the removal frees."""
        return sum(d.size for d in self.remove)


def plan_gc(snap: Snapshot, policy: Policy, pinned: Set[str], now: datetime) -> GcPlan:
    """Mark and sweep one snapshot whose records were all read."""
    mark = _Marking(snap, policy, now)
    results = {
        key: record
        for key, record in snap.records.items()
        if isinstance(record, ResultRecordV1 | ResultRecordV2)
    }
    kept_results = {key for key, r in results.items() if mark.keeps_result(key, r, pinned)}
    named = needed(results[key] for key in kept_results)
    # A kept result keeps every record of each tree it stood on, not only the one it names.
    trees = mark.kept_trees() | {tree for key in named if (tree := mark.tree(key)) is not None}
    kept = kept_results | {key for key in snap.records if mark.tree(key) in trees}
    kept |= {
        key
        for key, record in snap.records.items()
        if isinstance(record, BootRecordV1)
        and (key in named or mark.keeps_boot(key, record, trees))
    }
    if policy.keep_last is None and policy.older_than is None:
        kept |= set(snap.records)  # no policy: only what no record names goes
    kept |= {key for key, parsed in snap.keys.items() if parsed.kind not in PHASES}
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
    return GcPlan(tuple(remove), tuple(held), counts)


class _Marking:
    """The rules, for one snapshot and one policy at one moment."""

    def __init__(self, snap: Snapshot, policy: Policy, now: datetime) -> None:
        self.snap, self.policy = snap, policy
        grace = policy.grace.total_seconds()
        self.young = {key for key in snap.objects if snap.age(key, now) < grace}
        self.cutoff = now - policy.older_than if policy.older_than is not None else None

    def recent(self, at: str) -> bool:
        """Newer than --older-than (False without it)."""
        return self.cutoff is not None and datetime.fromisoformat(at) > self.cutoff

    def tree(self, key: str) -> Tree | None:
        """The version a cache record holds; None for any other key."""
        record = self.snap.records.get(key)
        if isinstance(record, CacheVersion | CacheRecordV1):
            return record.cache_id, record.fingerprint.tree_digest
        return None

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
        kept = {found for key in self.young if (found := self.tree(key)) is not None}
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
        if key in self.young or self.recent(record.boot.started_at):
            return True
        return any(
            (use.cache_id, tree) in trees
            for use in record.uses
            for tree in (use.tree_digest_before, use.tree_digest_after)
            if tree is not None
        )
