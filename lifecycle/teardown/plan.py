"""The teardown plan: every cache, removed or kept and why, decided from facts handed in.

Nothing here talks to dockerd or S3 itself: the caller gathers the facts (pins, mounts,
archives, unfinished runs) and passes a `verify` function, so the rules read in one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from lifecycle.archive.location import ArchiveLocation
from lifecycle.errors import LifecycleError
from lifecycle.ledger.archives import ArchiveRecord
from lifecycle.ledger.boots import CacheRecord
from lifecycle.table import human_age
from lifecycle.teardown.containers import BootContainer, ImageDecision
from lifecycle.teardown.journal import Unfinished

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(?:\d+[smhdw])+")

# (archive record) -> one problem per object that does not verify; [] when it verifies now.
Verify = Callable[[ArchiveRecord], list[str]]


def parse_duration(text: str) -> timedelta:
    """'90s', '30m', '2h', '3d', '1w', or a sum such as '1d12h'."""
    if not _DURATION.fullmatch(text.strip()):
        expected = "expected a duration such as 30m, 2h, 3d, 1d12h"
        raise LifecycleError(f"--older-than {text!r}: {expected}")
    seconds = sum(int(n) * _UNIT_SECONDS[u] for n, u in re.findall(r"(\d+)([smhdw])", text.strip()))
    return timedelta(seconds=seconds)


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


class Action(StrEnum):
    """What teardown does with one cache."""

    REMOVE = "remove"
    ARCHIVE_THEN_REMOVE = "archive, then remove"
    KEEP = "keep"


@dataclass(frozen=True)
class CacheDecision:
    """One cache's fate and the reasons for it, as the plan shows them."""

    cache: CacheRecord
    action: Action
    why: tuple[str, ...]
    archive: ArchiveRecord | None
    archive_state: str  # not archived | verified | does not verify | archived (not checked)
    problem: bool = False  # kept because its archive did not verify or could not be checked
    resumes: Unfinished | None = None

    @property
    def removes(self) -> bool:
        """Whether the cache is to go."""
        return self.action is not Action.KEEP


@dataclass(frozen=True)
class TeardownPlan:
    """Everything one teardown would do; `--dry-run` shows it and stops."""

    decisions: tuple[CacheDecision, ...]
    containers: tuple[BootContainer, ...]  # stopped boot containers that go with their caches
    images: tuple[ImageDecision, ...]  # with --images: engine images, removed or kept and why
    notes: tuple[str, ...] = ()
    archive_to: str | None = None  # where --archive writes

    @property
    def removing(self) -> tuple[CacheDecision, ...]:
        """The decisions that remove a cache."""
        return tuple(d for d in self.decisions if d.removes)

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
            or any(d.resumes for d in self.decisions)
            or self.containers
            or any(i.removes for i in self.images)
        )


def decide(
    cache: CacheRecord,
    selection: Selection,
    facts: Facts,
    *,
    archive_first: bool,
    verify: Verify,
) -> CacheDecision:
    """Keep for every reason that applies; else remove only if the archive verifies now."""
    archive = facts.archives.get(cache.id)
    resumes = facts.unfinished.get(cache.id)
    state = "archived (not checked)" if archive else "not archived"
    kept = _keep_reasons(cache, selection, facts, resumes)
    if kept:
        return CacheDecision(cache, Action.KEEP, kept, archive, state, resumes=resumes)
    if archive is not None and cache.state != "archived":
        # Archived, then booted again (boots make a cache live): the record is out of date.
        archive, state = None, "archive out of date (booted since)"
    if archive is None:
        if archive_first:
            action, why = Action.ARCHIVE_THEN_REMOVE, "not archived yet: archived first"
        else:
            action, why = Action.KEEP, "not archived (--archive archives it first)"
        return CacheDecision(cache, action, (why,), None, state, resumes=resumes)
    if results := facts.results_not_archived.get(cache.id):
        # Its evidence is archived, but a result recorded since is only in the ledger: the
        # cache behind a result goes only once the result's own record is in S3 too.
        waiting = f"result {', '.join(results)} on it not archived yet"
        if archive_first:
            return CacheDecision(
                cache, Action.ARCHIVE_THEN_REMOVE, (f"{waiting}: archived first",), archive,
                state, resumes=resumes,
            )  # fmt: skip
        why = f"{waiting} (--archive archives it first)"
        return CacheDecision(cache, Action.KEEP, (why,), archive, state, resumes=resumes)
    problems = verify(archive)
    if problems:
        refused = tuple(f"archive does not verify: {p}" for p in problems)
        return CacheDecision(
            cache, Action.KEEP, refused, archive, "does not verify", problem=True, resumes=resumes
        )
    bucket = ArchiveLocation.parse(archive.location).bucket
    verified = f"archive verified now: s3://{bucket}/{archive.record_key}"
    return CacheDecision(cache, Action.REMOVE, (verified,), archive, "verified", resumes=resumes)


def _keep_reasons(
    cache: CacheRecord, selection: Selection, facts: Facts, resumes: Unfinished | None
) -> tuple[str, ...]:
    # A run a crash left unfinished is completed whatever this run's filters say.
    excluded = None if resumes else selection.excludes(cache, facts.now)
    if excluded:
        return (excluded,)
    reasons = []
    if facts.pins.get(cache.id):
        reasons.append("pinned: " + "; ".join(facts.pins[cache.id]))
    if facts.mounted_by.get(cache.id):
        reasons.append("mounted by running container " + ", ".join(facts.mounted_by[cache.id]))
    if facts.docker_problem:
        reasons.append(f"cannot ask dockerd which containers mount it: {facts.docker_problem}")
    if cache.in_use_by:
        reasons.append(f"in use by boot {cache.in_use_by}")
    return tuple(reasons)
