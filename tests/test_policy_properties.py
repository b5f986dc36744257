"""Property tests of the pure planner: random histories of caches (made, booted ok or not,
archived or not, pinned, in use, kept for a release) under random policies and clocks.

The planner is the policy's verdicts (lifecycle.policy.keep) through teardown's decision
(lifecycle.teardown.plan.decide), with the archive's verification faked: what a plan removes
must be archived and verified, or archived first; never pinned, in use or a release's newest
good cache; keep-last N keeps exactly N of each group; a plan carried out leaves nothing to do.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.archive.verify import Covered, VerifiedRecord
from lifecycle.ledger.archives import ArchiveRecord
from lifecycle.ledger.boots import CacheRecord
from lifecycle.policy.keep import Live, PolicyRules, evaluate
from lifecycle.policy.model import CacheRule, Policy, seconds
from lifecycle.teardown.plan import Action, Facts, decide

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
RELEASES = ("a/0.1", "a/0.2", "b/0.1")


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[Live, bool, bool]]:
    """Caches with (pinned, in use)."""
    found = []
    for index in range(draw(st.integers(0, 14))):
        release = draw(st.sampled_from(RELEASES))
        live = Live(
            id=f"c{index:02d}",
            manifest=release.split("/")[0],
            release=release,
            name=draw(st.sampled_from(("vllm", "triton"))),
            profile=draw(st.sampled_from(("", "serve", "bench"))),
            last_used=NOW - timedelta(minutes=draw(st.integers(0, 60 * 24 * 20))),
            good=draw(st.booleans()),
            archived=draw(st.booleans()),
            seq=index,
        )
        found.append((live, draw(st.booleans()), draw(st.booleans())))
    return found


rules = st.builds(
    CacheRule,
    match=st.sampled_from(("*", "a", "a*")),
    keep_last=st.integers(0, 3),
    keep_within=st.sampled_from((None, "2h", "3d")),
    keep_releases=st.lists(st.sampled_from(RELEASES), max_size=2, unique=True),
    archive_after=st.sampled_from(("1m", "1h", "1d")),
    content=st.booleans(),
    remove=st.booleans(),
)
policies = st.builds(Policy, caches=st.lists(rules, min_size=1, max_size=2))


def _record(live: Live, in_use: bool) -> CacheRecord:
    return CacheRecord(
        id=live.id, cache_key="k", cache_name=live.name, manifest_name=live.manifest,
        manifest_digest="d" * 64, image_id="sha256:i", arch="90a", host_path=f"/h/{live.id}",
        container_path="/c", created_at=live.last_used.isoformat(), tree_digest="t" * 64,
        files=1, bytes=1, scan_path=None, scanned_at=None, state="live",
        in_use_by="b-1" if in_use else None,
    )  # fmt: skip


def _plan(policy: Policy, history: list[tuple[Live, bool, bool]]) -> dict[str, Action]:
    """Each cache's action, as teardown would take it under the policy."""
    verdicts = evaluate(policy, [live for live, _, _ in history], NOW)
    archives = {
        live.id: ArchiveRecord(
            live.id,
            "s3://bucket/p",
            f"p/caches/{live.id}.json",
            "s",
            True,
            1,
            1,
            NOW.isoformat(),
            None,
        )
        for live, _, _ in history
        if live.archived
    }
    facts = Facts(
        now=NOW,
        pins={live.id: ["kept for the team"] for live, pinned, _ in history if pinned},
        archives=archives,
        unfinished={},
        mounted_by={},
    )
    # Each archive verifies and covers the tree as it is, its files included.
    verified = VerifiedRecord((), Covered("t" * 64, True, frozenset()))
    return {
        live.id: decide(
            _record(live, in_use), PolicyRules(verdicts), facts, archive_first=True,
            want_content=False, verify=lambda archive: verified, rescan=lambda cache: None,
        ).action
        for live, _, in_use in history
    }  # fmt: skip


GOES = (Action.REMOVE, Action.ARCHIVE_THEN_REMOVE)


@settings(max_examples=300, deadline=None)
@given(policies, histories())
def test_a_plan_removes_nothing_held_unarchived_or_kept_for_a_release(
    policy: Policy, history: list[tuple[Live, bool, bool]]
) -> None:
    actions = _plan(policy, history)
    for live, pinned, in_use in history:
        action = actions[live.id]
        if pinned or in_use:
            assert action not in GOES, (live, action)
        if action is Action.REMOVE:
            assert live.archived  # verified by the fake: what teardown asks of S3 at removal
        if not live.archived and action in GOES:
            assert action is Action.ARCHIVE_THEN_REMOVE
        rule = policy.cache_rule(live.manifest)
        if rule is None or not rule.remove:
            assert action not in GOES
        elif NOW - live.last_used < _length(rule.archive_after):
            assert action not in GOES  # not idle long enough to be archived yet
    for release, name in {(live.release, live.name) for live, _, _ in history}:
        good = [c for c, _, _ in history if (c.release, c.name) == (release, name) and c.good]
        rule = policy.cache_rule(release.split("/")[0])
        if good and rule is not None and release in rule.keep_releases:
            newest = max(good, key=lambda c: (c.last_used, c.seq, c.id))
            assert actions[newest.id] not in GOES, newest


@settings(max_examples=300, deadline=None)
@given(policies, histories())
def test_keep_last_n_keeps_exactly_n_of_each_group(
    policy: Policy, history: list[tuple[Live, bool, bool]]
) -> None:
    caches = [live for live, _, _ in history]
    verdicts = evaluate(policy, caches, NOW)
    groups: dict[tuple[str, str, str], list[Live]] = {}
    for live in caches:
        groups.setdefault((live.manifest, live.profile, live.name), []).append(live)
    for (manifest, profile, _), members in groups.items():
        rule = policy.cache_rule(manifest)
        if rule is None:
            continue
        kept = [m for m in members if any(k.startswith("keep_last ") for k in verdicts[m.id].keep)]
        assert len(kept) == min(rule.keep_last, len(members)), (profile, members)
        newest = sorted(members, key=lambda m: (m.last_used, m.seq, m.id), reverse=True)
        assert {m.id for m in kept} == {m.id for m in newest[: rule.keep_last]}


@settings(max_examples=300, deadline=None)
@given(policies, histories())
def test_after_apply_the_plan_is_empty(
    policy: Policy, history: list[tuple[Live, bool, bool]]
) -> None:
    """Apply: archive what the plan archives, remove what it removes; then plan again."""
    actions = _plan(policy, history)
    verdicts = evaluate(policy, [live for live, _, _ in history], NOW)
    after = [
        (replace(live, archived=live.archived or verdicts[live.id].archive), pinned, in_use)
        for live, pinned, in_use in history
        if actions[live.id] not in GOES
    ]
    again = evaluate(policy, [live for live, _, _ in after], NOW)
    assert not any(v.archive for v in again.values())
    assert not any(action in GOES for action in _plan(policy, after).values())


def _length(text: str) -> timedelta:
    found = seconds(text)
    assert found is not None
    return found
