"""The policy evaluated on this host's live caches: which stay and why, which are archived now.

Pure: the caller gathers the facts (lifecycle.policy.facts); what goes, goes through the
teardown's removal invariant (lifecycle.teardown.plan.decide: archived, verified at that
moment, under the cache's lease), so a rule can only ever ask for less than that allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lifecycle.durations import parse_duration
from lifecycle.ledger.boots import CacheRecord
from lifecycle.policy.model import CacheRule, Policy, seconds
from lifecycle.table import human_age


@dataclass(frozen=True)
class Live:
    """A live cache as the policy sees it."""

    id: str
    manifest: str
    release: str  # NAME/VERSION of the manifest it was made for
    name: str  # the cache's name in the manifest (vllm, triton, ...)
    profile: str  # of its newest boot ("" if none)
    last_used: datetime  # its newest boot's start, else when it was made
    good: bool  # its newest boot ended ok and left it whole
    archived: bool  # the ledger has an archive of it (verified again before removal)
    seq: int = 0  # the order the ledger recorded caches in: the newer of two used at once
    there: bool = True  # its dir is there: one gone behind the ledger's back keeps no place


@dataclass(frozen=True)
class Verdict:
    """The policy's word on one cache."""

    keep: tuple[str, ...]  # why it stays; empty: it goes (archived first when it must be)
    archive: bool  # archive it now
    content: bool  # with its files
    rule: str  # which rule spoke, as the plan names it


def evaluate(policy: Policy, caches: Sequence[Live], now: datetime) -> dict[str, Verdict]:
    """Each live cache's verdict under `policy` at `now`."""
    ruled = {c.id: policy.cache_rule(c.manifest) for c in caches}
    newest = _newest(caches, ruled)
    releases = _release_keepers(caches, ruled)
    verdicts = {}
    for cache in caches:
        rule = ruled[cache.id]
        if rule is None:
            verdicts[cache.id] = Verdict(("no policy rule names its manifest",), False, False, "-")
            continue
        index = policy.caches.index(rule)
        idle = now - cache.last_used
        keep = []
        if cache.id in newest:
            group = f"{cache.manifest} {cache.profile or '(no boot)'} {cache.name}"
            keep.append(f"keep_last {rule.keep_last}: among the newest of {group}")
        within = seconds(rule.keep_within)
        if within is not None and idle < within:
            keep.append(f"keep_within {rule.keep_within}: used {_ago(idle)}")
        if cache.id in releases:
            keep.append(f"keep_releases: the newest good {cache.name} cache of {cache.release}")
        after = parse_duration(rule.archive_after, "archive_after")
        if idle < after:
            keep.append(f"archive_after {rule.archive_after}: used {_ago(idle)}")
        if not rule.remove:
            keep.append("remove: false")
        archive = not cache.archived and idle >= after
        verdicts[cache.id] = Verdict(tuple(keep), archive, rule.content, f"caches[{index}]")
    return verdicts


def _ago(idle: timedelta) -> str:
    return f"{human_age(max(idle.total_seconds(), 0))} ago"


def _newest(caches: Sequence[Live], ruled: Mapping[str, CacheRule | None]) -> set[str]:
    """The caches each rule's keep_last keeps: the newest N of each manifest, profile and name."""
    groups: dict[tuple[str, str, str], list[Live]] = {}
    for cache in (c for c in caches if c.there):  # the newest N that can be booted from
        groups.setdefault((cache.manifest, cache.profile, cache.name), []).append(cache)
    kept: set[str] = set()
    for members in groups.values():
        rule = ruled[members[0].id]
        if rule is not None:
            ordered = sorted(members, key=lambda c: (c.last_used, c.seq, c.id), reverse=True)
            kept |= {c.id for c in ordered[: rule.keep_last]}
    return kept


def _release_keepers(caches: Iterable[Live], ruled: Mapping[str, CacheRule | None]) -> set[str]:
    """The newest good cache of each name of each release a rule keeps (of each manifest: a
    manifest built from elsewhere may name its release as one of the project's does)."""
    best: dict[tuple[str, str, str], Live] = {}
    for cache in caches:
        rule = ruled[cache.id]
        if (
            rule is None
            or not (cache.good and cache.there)
            or cache.release not in rule.keep_releases
        ):
            continue
        key = (cache.manifest, cache.release, cache.name)
        held = best.get(key)
        if held is None or (cache.last_used, cache.seq, cache.id) > (
            held.last_used,
            held.seq,
            held.id,
        ):
            best[key] = cache
    return {c.id for c in best.values()}


@dataclass(frozen=True)
class PolicyRules:
    """The policy's verdicts as teardown's rules (lifecycle.teardown.plan.Rules)."""

    verdicts: Mapping[str, Verdict]
    cache_ids: tuple[str, ...] = ()  # none named: every cache
    manifest: str | None = None  # every manifest's images

    def excludes(self, cache: CacheRecord, now: datetime) -> str | None:
        verdict = self.verdicts.get(cache.id)
        if verdict is None:  # made since the facts were read: the next plan decides
            return "kept: not in the policy's facts (made since?)"
        return f"kept: {'; '.join(verdict.keep)}" if verdict.keep else None

    def content(self, cache: CacheRecord) -> bool:
        verdict = self.verdicts.get(cache.id)
        return verdict is not None and verdict.content

    @property
    def keep_files(self) -> bool:
        return True  # the policy speaks for every cache: a dir gone is recorded gone
