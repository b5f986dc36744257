"""The teardown plan: every cache, removed or kept and why, and the plan as a table and JSON.

Nothing here talks to dockerd or S3 itself: the caller gathers the facts (pins, mounts,
archives, unfinished runs) and passes a `verify` function, so the rules read in one place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from lifecycle.archive.layout import short_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.verify import VerifiedRecord
from lifecycle.ledger.archives import ArchiveRecord
from lifecycle.ledger.boots import CacheRecord, TaintedFile
from lifecycle.table import count_of, human_age, human_bytes, lines_text, render, some_of
from lifecycle.teardown.containers import (
    ALREADY_GONE,
    NOT_OURS,
    BootContainer,
    ImageDecision,
    image_name,
)
from lifecycle.teardown.removal import (
    Tree,
    Unfinished,
    archive_gaps,
    withheld_paths,
    withheld_reason,
)

NO_CACHES = "no live caches on this host"

# (archive) -> the record as the server holds it now, with every object that does not verify.
Verify = Callable[[ArchiveRecord], VerifiedRecord]
# (cache) -> its tree scanned again now; None when it cannot be (a half-removed trash).
Rescan = Callable[[CacheRecord], Tree | None]


class Rules(Protocol):
    """What keeps a cache whatever its archive says, and whether its files count: the filters
    of one teardown (Selection: a one-off policy), or the project's policy (lifecycle.policy)."""

    @property
    def cache_ids(self) -> tuple[str, ...]:
        """Caches named: an unknown one is an error."""

    @property
    def manifest(self) -> str | None:
        """The only manifest whose images are considered."""

    def excludes(self, cache: CacheRecord, now: datetime) -> str | None:
        """Why the rules keep `cache`; None: it goes once its archive allows."""

    def content(self, cache: CacheRecord) -> bool:
        """Whether the archive must hold the cache's files before it goes."""

    @property
    def keep_files(self) -> bool:
        """Whether what `excludes` says keeps a cache's files (a policy's rule), so a cache
        whose dir is gone is recorded gone all the same; else it leaves the cache out of
        this run (teardown's filters), its record as it is."""


@dataclass(frozen=True)
class Selection:
    """The filters: named caches, a manifest name, a minimum age, a state. Empty: every cache."""

    cache_ids: tuple[str, ...] = ()
    manifest: str | None = None
    older_than: timedelta | None = None
    state: str | None = None  # live | archived

    def excludes(self, cache: CacheRecord, now: datetime) -> str | None:
        """Why the filters leave `cache` out, or None when it is selected."""
        if self.cache_ids and cache.id not in self.cache_ids:
            return "filtered out: not named"
        if self.manifest is not None and cache.manifest_name != self.manifest:
            return f"filtered out: manifest {cache.manifest_name}, not {self.manifest}"
        if self.older_than is not None:
            age = now - datetime.fromisoformat(cache.created_at)
            if age < self.older_than:
                limit = human_age(self.older_than.total_seconds())
                return f"filtered out: {human_age(age.total_seconds())} old, not older than {limit}"
        if self.state is not None and cache.state != self.state:
            return f"filtered out: {cache.state}, not {self.state}"
        return None

    def content(self, cache: CacheRecord) -> bool:
        return False  # --with-content says it for every cache

    @property
    def keep_files(self) -> bool:
        return False  # a one-off teardown of the caches it selects: the rest are not its


@dataclass(frozen=True)
class Facts:
    """What the ledger and dockerd say about the caches, gathered once per plan."""

    now: datetime
    pins: Mapping[str, Sequence[str]]  # cache id -> pin reasons
    archives: Mapping[str, ArchiveRecord]
    unfinished: Mapping[str, Unfinished]  # cache id -> the run a crash left unfinished
    mounted_by: Mapping[str, Sequence[str]]  # cache id -> running containers that mount it
    docker_problem: str | None = None  # dockerd could not be asked about mounts
    # cache id -> results standing on it with no record where the cache's archive is yet
    results_not_archived: Mapping[str, Sequence[str]] = field(default_factory=dict)
    used_by: Mapping[str, Sequence[str]] = field(default_factory=dict)  # cache id -> boot ids
    gone: frozenset[str] = frozenset()  # caches whose dir is not there (and in no trash)
    dead_boots: frozenset[str] = frozenset()  # boots holding a cache whose process has died
    archive_to_problem: str | None = None  # why --archive cannot write where it would
    # cache id -> its files the ledger knows hold a secret's value (lifecycle.withheld)
    tainted: Mapping[str, Sequence[TaintedFile]] = field(default_factory=dict)


class Action(StrEnum):
    """What teardown does with one cache."""

    REMOVE = "remove"
    ARCHIVE_THEN_REMOVE = "archive, then remove"
    SETTLE = "record as gone"  # its dir vanished behind the ledger's back: nothing to remove
    KEEP = "keep"


@dataclass(frozen=True)
class CacheDecision:
    """One cache's fate and the reasons for it, as the plan shows them."""

    cache: CacheRecord
    action: Action
    why: tuple[str, ...]  # the reasons, a line each as the plan shows them
    archive: ArchiveRecord | None
    # not archived | verified | does not verify | collected (by a gc) | archived (not checked)
    archive_state: str
    problem: bool = False  # kept because its archive did not verify or could not be checked
    resumes: Unfinished | None = None
    # Its archive must hold its files before it goes (--with-content, or the policy's
    # `content`): archiving first and the removal's check ask this, as the plan did.
    content: bool = False
    in_use_by: str | None = None  # the live boot writing it: nothing archives it meanwhile

    @property
    def removes(self) -> bool:
        """Whether the cache's dir is to go."""
        return self.action in (Action.REMOVE, Action.ARCHIVE_THEN_REMOVE)


@dataclass(frozen=True)
class TeardownPlan:
    """Everything one teardown would do; `--dry-run` shows it and stops."""

    decisions: tuple[CacheDecision, ...]
    containers: tuple[BootContainer, ...]  # stopped boot containers that go with their caches
    images: tuple[ImageDecision, ...]  # with --images: engine images, removed or kept and why
    notes: tuple[str, ...] = ()
    archive_to: str | None = None  # where --archive writes
    unreachable: tuple[str, ...] = ()  # dockerd or S3 did not answer: nothing they guard can go

    @property
    def removing(self) -> tuple[CacheDecision, ...]:
        """The decisions that remove a cache."""
        return tuple(d for d in self.decisions if d.removes)

    @property
    def settling(self) -> tuple[CacheDecision, ...]:
        """The decisions that record a cache as gone (its dir vanished): work, not a keep."""
        return tuple(d for d in self.decisions if d.action is Action.SETTLE)

    @property
    def bytes_to_free(self) -> int:
        """The scanned size of every cache to remove."""
        return sum(d.cache.bytes or 0 for d in self.removing)

    @property
    def has_problems(self) -> bool:
        """Whether an archive failed to verify or could not be checked."""
        return any(d.problem for d in self.decisions)

    @property
    def has_work(self) -> bool:
        """Whether anything would change: caches, unfinished runs, containers, images."""
        return bool(
            self.removing
            or self.settling
            or any(d.resumes for d in self.decisions)
            or self.containers
            or any(i.removes for i in self.images)
        )


def decide(
    cache: CacheRecord,
    selection: Rules,
    facts: Facts,
    *,
    archive_first: bool,
    want_content: bool,
    verify: Verify,
    rescan: Rescan,
    drop_withheld: bool = False,
) -> CacheDecision:
    """Keep for every reason that applies; else remove only if the removal invariant holds now
    (lifecycle.teardown.removal): the archive verifies and covers the tree as it is."""
    archive = facts.archives.get(cache.id)
    tree = functools.cache(lambda: rescan(cache))  # scanned once, and only if asked
    resumes = facts.unfinished.get(cache.id)
    state = "archived (not checked)" if archive else "not archived"
    going: list[str] = []  # said of every decision that removes it
    want_content = want_content or selection.content(cache)
    boot = cache.in_use_by if cache.in_use_by not in facts.dead_boots else None

    def decision(
        action: Action, *why: str, archive_state: str = state, problem: bool = False
    ) -> CacheDecision:
        if action in (Action.REMOVE, Action.ARCHIVE_THEN_REMOVE):
            why += tuple(going)
        return CacheDecision(
            cache, action, why, archive, archive_state, problem, resumes, want_content, boot
        )

    def archive_first_then_remove(why: str, *, archive_state: str = state) -> CacheDecision:
        """Archive it (again) first when --archive can; else keep it, saying what would."""
        if not archive_first:
            why = f"{why} (--archive archives it first)"
            return decision(Action.KEEP, why, archive_state=archive_state)
        if facts.archive_to_problem:
            why = f"{why}; cannot archive: {facts.archive_to_problem}"
            return decision(Action.KEEP, why, archive_state=archive_state, problem=True)
        why = f"{why}: archived first"
        return decision(Action.ARCHIVE_THEN_REMOVE, why, archive_state=archive_state)

    # A run a crash left unfinished is completed whatever this run's filters say.
    excluded = None if resumes else selection.excludes(cache, facts.now)
    if excluded and not selection.keep_files:
        return decision(Action.KEEP, excluded)
    pinned = facts.pins.get(cache.id, ())
    using = holders((), facts.mounted_by.get(cache.id, ()), facts.docker_problem, boot)
    if cache.id in facts.gone and not using:
        # A rule or a pin keeps files, and there are none: kept, the ledger would go on
        # calling the cache live, and status count it warm-ready.
        keeps = [excluded] if excluded else []
        keeps += holders(pinned, (), None, None)
        return decision(
            Action.SETTLE,
            f"its dir {cache.host_path} is gone: nothing to remove",
            *(f"{keep}, but its dir is gone" for keep in keeps),
        )
    kept = ([excluded] if excluded else []) + holders(pinned, (), None, None) + using
    if kept:
        return decision(Action.KEEP, *kept)
    # Its files count: the archive holds them, or is to. One no archive can hold stays with it.
    if want_content or (archive is not None and archive.with_content):
        withheld = withheld_paths(tree(), facts.tainted.get(cache.id, ()))
        if withheld and not drop_withheld:
            return decision(Action.KEEP, withheld_reason(withheld))
        if withheld:
            going.append(f"--drop-withheld: {len(withheld)} files no archive holds go with it")
    if archive is None:
        return archive_first_then_remove("not archived yet" if archive_first else "not archived")
    if results := facts.results_not_archived.get(cache.id):
        # Its evidence is archived, but a result recorded since is only in the ledger: the
        # cache behind a result goes only once the result's own record is in S3 too.
        return archive_first_then_remove(f"result {', '.join(results)} on it not archived yet")
    checked = verify(archive)
    if checked.collected and not checked.problems:
        # Evidence a gc took by its rule (another host's, maybe): no damage, and no longer
        # evidence either; as for a cache not archived, archiving again puts it back.
        return archive_first_then_remove("; ".join(checked.collected), archive_state="collected")
    if checked.problems or checked.document is None:
        refused = tuple(f"archive does not verify: {p}" for p in checked.problems)
        if checked.answered and archive_first and not facts.archive_to_problem:
            # A damaged or rewritten archive, on a server that answers: archiving again
            # re-sends what is damaged and writes the record anew.
            return decision(
                Action.ARCHIVE_THEN_REMOVE, *refused, "archived again first",
                archive_state="does not verify",
            )  # fmt: skip
        return decision(Action.KEEP, *refused, archive_state="does not verify", problem=True)
    gaps = archive_gaps(
        checked.document,
        tree(),
        facts.used_by.get(cache.id, ()),
        want_content=want_content or archive.with_content,
    )
    if gaps:
        return archive_first_then_remove("; ".join(gaps), archive_state="out of date")
    bucket = ArchiveLocation.parse(archive.location).bucket
    verified = f"archive verified now: s3://{bucket}/{short_key(archive.record_key)}"
    return decision(Action.REMOVE, verified, archive_state="verified")


def holders(
    pins: Sequence[str], mounted_by: Sequence[str], docker_problem: str | None, boot: str | None
) -> list[str]:
    """Who holds a cache: its pins, running containers mounting it (if dockerd could be
    asked), the boot using it. The plan asks, and the removal again under the lease."""
    held = ["pinned: " + "; ".join(pins)] if pins else []
    if mounted_by:
        held.append("mounted by running container " + ", ".join(mounted_by))
    if docker_problem:
        held.append(f"cannot ask dockerd which containers mount it: {docker_problem}")
    return held + ([f"in use by boot {boot}"] if boot else [])


def plan_json(plan: TeardownPlan) -> dict[str, Any]:
    """The plan: each cache with its action and reasons, containers, images, bytes to free."""
    return {
        "caches": [_decision_json(d) for d in plan.decisions],
        "containers": [asdict(c) for c in plan.containers],
        "images": [asdict(i) for i in plan.images],
        "notes": list(plan.notes),
        "archive_to": plan.archive_to,
        "caches_to_remove": len(plan.removing),
        "caches_to_record_gone": len(plan.settling),
        "bytes_to_free": plan.bytes_to_free,
    }


def plan_text(plan: TeardownPlan, *, dry_run: bool) -> str:
    """A table of every cache (kept ones with every reason), then containers, images, totals."""
    rows = [
        [
            d.cache.id,
            d.cache.manifest_name,
            d.cache.cache_name,
            human_bytes(d.cache.bytes),
            d.archive_state,
            d.action.value,
            "; ".join(d.why + ((d.resumes.describe(),) if d.resumes else ())),
        ]
        for d in plan.decisions
    ]
    header = ["CACHE", "MANIFEST", "NAME", "SIZE", "ARCHIVE", "ACTION", "WHY"]
    # The table escapes its cells; each line after it holds outside text (an S3 or dockerd
    # error, a container's or image's name) that must not forge a line of the plan.
    lines = [f"note: {note}" for note in plan.notes]
    lines += [
        f"stopped boot container {c.name} (boot {c.boot_id}): remove" for c in plan.containers
    ]
    lines += image_lines(plan.images, done=False)
    verb = "would remove" if dry_run else "to remove"
    archiving = sum(1 for d in plan.removing if d.archive is None)
    first = f", {archiving} archived first to {plan.archive_to}" if archiving else ""
    settling = len(plan.settling)
    kept = len(plan.decisions) - len(plan.removing) - settling
    removing = count_of(len(plan.removing), "cache")
    gone = f"; to record as gone: {settling}" if settling else ""
    lines.append(
        f"{verb}: {removing}, {human_bytes(plan.bytes_to_free)}{first}{gone};"
        f" kept: {kept}" + ("  (dry run: nothing changed)" if dry_run else "")
    )
    return render(header, rows, empty=NO_CACHES) + lines_text(lines)


def _decision_json(decision: CacheDecision) -> dict[str, Any]:
    cache = decision.cache
    return {
        "id": cache.id,
        "manifest": cache.manifest_name,
        "name": cache.cache_name,
        "bytes": cache.bytes,
        "host_path": cache.host_path,
        "state": cache.state,
        "archive_state": decision.archive_state,
        "archive": asdict(decision.archive) if decision.archive else None,
        "action": decision.action.value,
        "why": list(decision.why),
        "problem": decision.problem,
        "resumes": asdict(decision.resumes) if decision.resumes else None,
    }


def image_lines(images: Sequence[ImageDecision], *, done: bool) -> list[str]:
    """A line per image this home decides on, before (`done` False) or after the run; the
    images other homes built in one line: on a dockerd many homes share, they are dozens."""
    lines = []
    for image in (i for i in images if i.why != NOT_OURS):
        name = image_name(image.tags, image.id)
        if done and image.why == ALREADY_GONE:  # not this run's removal, nor kept
            lines.append(f"image {name}: {ALREADY_GONE}")
        elif done:
            lines.append(
                f"removed image {name}" if image.removes else f"kept image {name}: {image.why}"
            )
        else:
            lines.append(f"image {name}: {'remove' if image.removes else 'keep'} ({image.why})")
    theirs = sorted(
        (image_name(i.tags[-1:], i.id) for i in images if i.why == NOT_OURS),  # a tag each
        key=lambda name: name.startswith("sha256:"),  # tagged ones first
    )
    if theirs:
        lines.append(f"kept {count_of(len(theirs), 'image')} {NOT_OURS}: {some_of(theirs)}")
    return lines
