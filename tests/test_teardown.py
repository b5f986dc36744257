"""`lifecycle teardown`, `pin` and `unpin`.

The first half drives the plan and the two-phase removal directly (a real ledger and real
dirs in tmp, fake verifiers). The second half boots the demo engine for real through the CLI,
archives to the real S3 server and tears down, SIGKILL at every step boundary included.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lifecycle.archive.verify import Covered, VerifiedRecord
from lifecycle.cli import cli
from lifecycle.durations import parse_duration
from lifecycle.errors import LifecycleError
from lifecycle.faults import CRASH_ENV, CRASH_POINTS, crash_checkpoint
from lifecycle.home import Home
from lifecycle.leases import try_lease
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import ArchiveRecord, VersionRow, record_version
from lifecycle.ledger.boots import CacheRecord, TaintedFile, cache_by_id
from lifecycle.ledger.builds import record_build
from lifecycle.ledger.core import insert
from lifecycle.ledger.removal import TeardownStep, record_step, steps_of
from lifecycle.table import human_bytes, visible_lines
from lifecycle.teardown.containers import FOUND, NAME_LABEL, NOT_OURS, ImageDecision, mounted_by
from lifecycle.teardown.plan import (
    Action,
    Facts,
    Selection,
    TeardownPlan,
    decide,
    image_lines,
    plan_text,
)
from lifecycle.teardown.removal import (
    CacheOutcome,
    Journal,
    TeardownBusy,
    Tree,
    Unfinished,
    Verdict,
    remove_cache,
    teardown_lock,
    trash_path,
    unfinished_runs,
)
from lifecycle.teardown.run import TeardownResult, summary_text
from tests.archive_support import damage, keys, newest_version, read_json

NOW = datetime(2026, 10, 10, 9, 0, tzinfo=UTC)
CONTENT = {"cached_ops/mix/mix.so": b"\x7fELF" + b"k" * 4000, "flashinfer_jit.log": b"built\n"}
SIZE = sum(len(body) for body in CONTENT.values())


# ---- the plan, the journal and the two phases, without services --------------------------------


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _tracked(ledger: Ledger, home: Path, **changes: Any) -> tuple[CacheRecord, ArchiveRecord]:
    """A cache dir with files, recorded in the ledger and archived (as far as the ledger knows)."""
    cache_id = f"flashinfer-{secrets.token_hex(4)}"
    host = Home(home).cache_dir(cache_id)
    for name, body in CONTENT.items():
        (host / name).parent.mkdir(parents=True, exist_ok=True)
        (host / name).write_bytes(body)
    cache = CacheRecord(
        id=cache_id,
        cache_key="k" * 64,
        cache_name="flashinfer",
        manifest_name="demo",
        manifest_digest="d" * 64,
        image_id="sha256:" + "e" * 64,
        arch="unknown",
        host_path=str(host),
        container_path="/var/cache/lifecycle/flashinfer",
        state="live",
        in_use_by=None,
        created_at=(NOW - timedelta(days=2)).isoformat(timespec="seconds"),
        files=len(CONTENT),
        bytes=SIZE,
    )
    cache = replace(cache, **changes)
    with ledger.transaction() as conn:
        insert(conn, "caches", cache)
    tree, key = "a" * 64, f"test/caches/{cache.id}/versions/{'a' * 64}.{'f' * 64}.json"
    archive = ArchiveRecord(
        cache.id, "s3://bucket/test", key, "f" * 64, False, 2, SIZE, _stamp(), None, tree
    )  # fmt: skip
    version = VersionRow(cache.id, tree, archive.location, key, "f" * 64, False, None, _stamp())
    record_version(ledger, version, archive)
    return replace(cache, state="archived"), archive


def _facts(**changes: Any) -> Facts:
    facts = Facts(now=NOW, pins={}, archives={}, unfinished={}, mounted_by={})
    return replace(facts, **changes)


def _never(archive: ArchiveRecord) -> VerifiedRecord:
    raise AssertionError("a kept cache's archive is not verified")


def _no_scan(cache: CacheRecord) -> Tree:
    raise AssertionError("a kept cache is not scanned")


def _record(tree: str, boots: tuple[str, ...] = (), *, content: bool = False) -> Covered:
    """What a verified archive covers: its tree, its content or not, the boots recorded."""
    return Covered(tree, content, frozenset(boots))


def _verified(document: Covered) -> Callable[[ArchiveRecord], VerifiedRecord]:
    return lambda archive: VerifiedRecord((), document)


def _tree_of(cache: CacheRecord) -> Tree:
    from lifecycle.teardown.removal import scan_now

    return scan_now(cache, Path(cache.host_path))


def test_durations() -> None:
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("1d12h") == timedelta(hours=36)
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("36500d") == timedelta(days=36500)
    for bad in ("2", "2x", "h", "-1d", "", "36500d1s", "99999999999999999d", "1" * 5000 + "s"):
        with pytest.raises(LifecycleError, match="--older-than"):
            parse_duration(bad)


def test_filters_say_why_a_cache_is_left_out(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, _ = _tracked(ledger, tmp_path)
    assert Selection().excludes(cache, NOW) is None
    assert Selection(cache_ids=(cache.id,)).excludes(cache, NOW) is None
    assert Selection(cache_ids=("other",)).excludes(cache, NOW) == "filtered out: not named"
    assert "manifest demo, not prod" in str(Selection(manifest="prod").excludes(cache, NOW))
    assert Selection(older_than=timedelta(days=1)).excludes(cache, NOW) is None
    assert "2d old, not older than 3d" in str(
        Selection(older_than=timedelta(days=3)).excludes(cache, NOW)
    )
    assert "archived, not live" in str(Selection(state="live").excludes(cache, NOW))


def test_every_reason_to_keep_is_given_and_nothing_kept_is_verified(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path, in_use_by="b-1")
    facts = _facts(
        pins={cache.id: ["result r-7", "by hand"]},
        archives={cache.id: archive},
        mounted_by={cache.id: ["sleepy"]},
    )
    decision = decide(
        cache, Selection(), facts, archive_first=True, want_content=False, verify=_never,
        rescan=_no_scan,
    )  # fmt: skip
    assert decision.action is Action.KEEP and not decision.problem
    assert decision.why == (
        "pinned: result r-7; by hand",
        "mounted by running container sleepy",
        "in use by boot b-1",
    )
    blind = decide(
        replace(cache, in_use_by=None),
        Selection(),
        _facts(archives={cache.id: archive}, docker_problem="no socket"),
        archive_first=False,
        want_content=False,
        verify=_never,
        rescan=_no_scan,
    )
    assert blind.why == ("cannot ask dockerd which containers mount it: no socket",)


def test_a_dir_gone_is_recorded_gone_whatever_a_rule_or_a_pin_keeps(tmp_path: Path) -> None:
    # The policy's keep and a pin were decided before the dir was looked at: a cache with no
    # dir stayed live in the ledger for good, and status counted it warm-ready.
    from lifecycle.policy.keep import PolicyRules, Verdict

    ledger = Ledger.open(tmp_path)
    cache, _ = _tracked(ledger, tmp_path)
    rules = PolicyRules({cache.id: Verdict(("remove: false",), False, False, "caches[0]")})
    gone = _facts(gone=frozenset({cache.id}), pins={cache.id: ["production"]})
    flags: dict[str, Any] = {"archive_first": True, "want_content": False, "verify": _never}
    decision = decide(cache, rules, gone, rescan=_no_scan, **flags)
    assert decision.action is Action.SETTLE, decision
    assert decision.why == (
        f"its dir {cache.host_path} is gone: nothing to remove",
        "kept: remove: false, but its dir is gone",
        "pinned: production, but its dir is gone",
    )
    # What uses the dir now holds it still; a teardown's filters leave the rest as they are.
    for held in (
        replace(gone, mounted_by={cache.id: ["sleepy"]}),
        replace(gone, docker_problem="no socket"),
    ):
        assert decide(cache, rules, held, rescan=_no_scan, **flags).action is Action.KEEP
    busy = decide(replace(cache, in_use_by="b-1"), rules, gone, rescan=_no_scan, **flags)
    assert busy.action is Action.KEEP and "in use by boot b-1" in busy.why
    other = Selection(manifest="prod")
    assert decide(cache, other, gone, rescan=_no_scan, **flags).action is Action.KEEP
    assert decide(cache, Selection(), gone, rescan=_no_scan, **flags).action is Action.SETTLE


def test_archive_state_decides_the_rest(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    flags = {"want_content": False, "rescan": _tree_of}
    plain = _facts()
    kept = decide(cache, Selection(), plain, archive_first=False, verify=_never, **flags)
    assert kept.action is Action.KEEP and kept.why == (
        "not archived (--archive archives it first)",
    )
    first = decide(cache, Selection(), plain, archive_first=True, verify=_never, **flags)
    assert first.action is Action.ARCHIVE_THEN_REMOVE
    archived = _facts(archives={cache.id: archive})
    key = f"s3://bucket/test/blobs/sha256/ab/{'ab' * 32}: missing"
    damaged = lambda a: VerifiedRecord((key,), None)  # noqa: E731
    bad = decide(cache, Selection(), archived, archive_first=False, verify=damaged, **flags)
    assert bad.action is Action.KEEP and bad.problem
    assert bad.why == (f"archive does not verify: {key}",)
    repaired = decide(cache, Selection(), archived, archive_first=True, verify=damaged, **flags)
    assert repaired.action is Action.ARCHIVE_THEN_REMOVE and not repaired.problem
    assert repaired.why == (f"archive does not verify: {key}", "archived again first")
    unreachable = lambda a: VerifiedRecord(("S3 gone",), None, answered=False)  # noqa: E731
    blind = decide(cache, Selection(), archived, archive_first=True, verify=unreachable, **flags)
    assert blind.action is Action.KEEP and blind.problem

    tree = _tree_of(cache).fingerprint
    assert tree is not None
    same = _verified(_record(tree.tree_digest))
    good = decide(cache, Selection(), archived, archive_first=False, verify=same, **flags)
    assert good.action is Action.REMOVE
    # The version named by 12 digits of its tree, not the key's two sha256 digests.
    versions = f"test/caches/{cache.id}/versions"
    assert good.why == (f"archive verified now: s3://bucket/{versions}/{'a' * 12}….json",)


def test_the_removal_invariant_names_each_gap(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    tree = _tree_of(cache).fingerprint
    assert tree is not None
    facts = _facts(archives={cache.id: archive}, used_by={cache.id: ["b-1", "b-2"]})

    def why(document: Covered, *, want_content: bool = False) -> tuple[str, ...]:
        decision = decide(
            cache, Selection(), facts, archive_first=False, want_content=want_content,
            verify=_verified(document), rescan=_tree_of,
        )  # fmt: skip
        assert decision.action is Action.KEEP and not decision.problem
        assert decision.archive_state == "out of date"
        return decision.why

    assert why(_record("0" * 64, ("b-1", "b-2"))) == (
        f"changed since archived: tree {tree.tree_digest[:12]} is not the archived 000000000000"
        " (--archive archives it first)",
    )
    assert why(_record(tree.tree_digest, ("b-1",))) == (
        "booted since archived: b-2 has no record there (--archive archives it first)",
    )
    assert why(_record(tree.tree_digest, ("b-1", "b-2")), want_content=True) == (
        "its files are not in the archive (archived without --with-content)"
        " (--archive archives it first)",
    )


def test_a_file_no_archive_holds_keeps_its_cache_until_drop_withheld(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    tree = _tree_of(cache).fingerprint
    assert tree is not None
    log = next(e for e in tree.entries if e.path == "flashinfer_jit.log")
    assert log.sha256 is not None
    tainted = {cache.id: [TaintedFile(cache.id, log.path, log.sha256, "HF_TOKEN", "b-1")]}
    facts = _facts(archives={cache.id: replace(archive, with_content=True)}, tainted=tainted)
    same = _verified(_record(tree.tree_digest, content=True))
    flags = {"archive_first": False, "want_content": False, "verify": same, "rescan": _tree_of}

    kept = decide(cache, Selection(), facts, **flags)
    assert kept.action is Action.KEEP and not kept.problem
    assert kept.why == (
        "1 file withheld from any archive (they hold a secret's value): flashinfer_jit.log;"
        " --drop-withheld removes it all the same",
    )
    dropped = decide(cache, Selection(), facts, drop_withheld=True, **flags)
    assert dropped.action is Action.REMOVE
    assert dropped.why[1:] == ("--drop-withheld: 1 files no archive holds go with it",)
    # Archived without its files, and none asked for: nothing was withheld from anything.
    evidence = _facts(archives={cache.id: archive}, tainted=tainted)
    plain = _verified(_record(tree.tree_digest))
    assert decide(cache, Selection(), evidence, **{**flags, "verify": plain}).removes


class _Crash(Exception):
    """Stands in for SIGKILL in the unit tests: nothing after the checkpoint runs."""


def _remove(
    ledger: Ledger,
    cache: CacheRecord,
    archive: ArchiveRecord,
    run_id: str,
    *,
    verify: Callable[[], list[str]] = lambda: [],
    crash_at: str | None = None,
) -> Any:
    def checkpoint(point: str) -> None:
        if point == crash_at:
            raise _Crash(point)

    resumes = unfinished_runs(ledger, [cache]).get(cache.id)
    journal = Journal(ledger, run_id, _stamp)
    return remove_cache(
        journal,
        cache,
        resumes=resumes,
        lease=lambda: try_lease(Home(Path(cache.host_path).parents[1]), cache.id),
        check=lambda where: Verdict(verify(), f"{archive.record_key} verified"),
        checkpoint=checkpoint,
    )


def _steps(ledger: Ledger, cache_id: str, run_id: str) -> list[str]:
    return [s.step for s in steps_of(ledger, cache_id) if s.run_id == run_id]


def test_two_phases_journalled_in_order(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    outcome = _remove(ledger, cache, archive, "t-1")
    assert outcome.removed and outcome.bytes_freed == SIZE
    assert _steps(ledger, cache.id, "t-1") == ["intent", "verified", "deleted", "done"]
    assert steps_of(ledger, cache.id)[-1].bytes_freed == SIZE
    assert not Path(cache.host_path).exists() and not trash_path(cache).exists()
    assert cache_by_id(ledger, cache.id).state == "torn-down"  # type: ignore[union-attr]


def test_an_archive_that_does_not_verify_keeps_the_cache(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    problem = "s3://bucket/test/blobs/sha256/ab/abab: missing"
    outcome = _remove(ledger, cache, archive, "t-1", verify=lambda: [problem])
    assert not outcome.removed and outcome.problem == problem
    assert _steps(ledger, cache.id, "t-1") == ["intent", "refused"]
    assert steps_of(ledger, cache.id)[-1].detail == problem
    assert sorted(p.name for p in Path(cache.host_path).rglob("*")) == sorted(
        ["cached_ops", "mix", "mix.so", "flashinfer_jit.log"]
    )


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_at_any_step_is_finished_by_the_next_run(tmp_path: Path, point: str) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    with pytest.raises(_Crash):
        _remove(ledger, cache, archive, "t-1", crash_at=point)
    if not Path(cache.host_path).exists():
        assert "verified" in _steps(ledger, cache.id, "t-1")
    assert unfinished_runs(ledger, [cache])[cache.id].run_id == "t-1"

    outcome = _remove(ledger, cache, archive, "t-2")
    assert outcome.removed and outcome.bytes_freed == SIZE  # measured before the crash if need be
    assert _steps(ledger, cache.id, "t-2") == ["intent", "verified", "deleted", "done"]
    assert not Path(cache.host_path).exists() and not trash_path(cache).exists()
    assert unfinished_runs(ledger, [cache]) == {}


def _statements_of(call: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL statements `call` runs on ledgers it opens."""
    ran: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(ran.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    call()
    monkeypatch.setattr(sqlite3, "connect", connect)
    return ran


def test_unfinished_runs_reads_the_journal_once_however_many_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal has no index by cache (a year of nights: ~290,000 steps): a statement per
    cache was a scan each, 3 s of every teardown, plan and status on a host of 113 caches."""
    ledger = Ledger.open(tmp_path)
    caches = [_tracked(ledger, tmp_path)[0] for _ in range(12)]
    for at, cache in enumerate(caches):
        record_step(ledger, TeardownStep(f"t-{at}", cache.id, "intent", None, None, _stamp()))
        if at % 3:  # the others' runs were killed after their intent
            record_step(ledger, TeardownStep(f"t-{at}", cache.id, "refused", "no", None, _stamp()))
    ledger.close()
    found: dict[int, dict[str, Unfinished]] = {}

    def unfinished(count: int) -> None:
        with contextlib.closing(Ledger.open(tmp_path, create=False)) as reading:
            found[count] = unfinished_runs(reading, caches[:count])

    few = _statements_of(lambda: unfinished(2), monkeypatch)
    many = _statements_of(lambda: unfinished(12), monkeypatch)
    assert len(many) == len(few), many
    assert sorted(found[12]) == sorted(c.id for at, c in enumerate(caches) if at % 3 == 0)
    assert found[12][caches[3].id].run_id == "t-3" and found[12][caches[3].id].last_step == "intent"
    assert sorted(found[2]) == [caches[0].id]


def test_a_resumed_run_that_cannot_verify_puts_a_whole_dir_back(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    with pytest.raises(_Crash):
        _remove(ledger, cache, archive, "t-1", crash_at="after-rename")
    assert trash_path(cache).is_dir() and not Path(cache.host_path).exists()
    outcome = _remove(ledger, cache, archive, "t-2", verify=lambda: ["S3 unreachable"])
    assert outcome.restored and not outcome.removed
    assert (Path(cache.host_path) / "flashinfer_jit.log").read_bytes() == b"built\n"
    assert unfinished_runs(ledger, [cache]) == {}


def test_a_trash_past_deleted_is_never_put_back_and_finished_later(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    with pytest.raises(_Crash):
        _remove(ledger, cache, archive, "t-1", crash_at="after-deleted")
    refused = _remove(ledger, cache, archive, "t-2", verify=lambda: ["S3 unreachable"])
    assert not refused.restored and trash_path(cache).is_dir()
    assert not Path(cache.host_path).exists()
    assert unfinished_runs(ledger, [cache])[cache.id].committed
    assert _remove(ledger, cache, archive, "t-3").removed
    assert not trash_path(cache).exists()


def test_crash_checkpoint_is_inert_unless_asked() -> None:
    crash_checkpoint({})("after-intent")  # no env var: nothing happens
    for bad in ("after-lunch", "after-intent:x"):
        with pytest.raises(LifecycleError, match=CRASH_ENV):
            crash_checkpoint({CRASH_ENV: bad})
    crash_checkpoint({CRASH_ENV: "after-rename:2"})("after-rename")  # the first is let through


def test_a_mount_of_the_dir_above_or_below_holds_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "caches" / "vllm-1"
    (cache / "inner").mkdir(parents=True)
    mounts = {
        str(tmp_path / "caches"): ["above"],
        str(cache / "inner"): ["below"],
        str(cache): ["exact"],
        str(tmp_path / "caches" / "vllm-10"): ["sibling"],
    }
    assert mounted_by(str(cache), mounts) == ["above", "below", "exact"]


def test_one_teardown_at_a_time(tmp_path: Path) -> None:
    home = Home(tmp_path)
    with teardown_lock(home), pytest.raises(TeardownBusy), teardown_lock(home):
        pass
    with teardown_lock(home):  # released
        pass


# ---- for real: the demo engine booted through the CLI, the S3 server, dockerd ------------------

PREFIX = "test"


@pytest.fixture(scope="module")
def demo_images(docker_client: Any) -> None:
    """The demo's base and released engine images, made again for this module: a test here
    removes images."""
    from lifecycle.demo.setup import ensure_demo

    ensure_demo(docker_client)


def _cli(project: Path, *args: str) -> Any:
    return CliRunner().invoke(
        cli, ["--manifests", str(project / "manifests"), *args], catch_exceptions=False
    )


def _process(project: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """`lifecycle` as its own process: SIGKILL must hit it, not pytest; stdin is no terminal."""
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), *args],
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _boot(project: Path) -> tuple[dict[str, Any], list[str]]:
    """Boot demo/0.2 cold: the boot report and its four new caches' ids."""
    result = _cli(project, "boot", "demo/0.2", "--cold", "--json")
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report, sorted(u["cache_id"] for u in report["caches"])


def _home() -> Path:
    return Path(os.environ["LIFECYCLE_HOME"])


def _caches() -> dict[str, CacheRecord]:
    from lifecycle.ledger.boots import all_caches

    ledger = Ledger.open(_home())
    try:
        return {c.id: c for c in all_caches(ledger)}
    finally:
        ledger.close()


def _journal(cache_id: str) -> list[TeardownStep]:
    ledger = Ledger.open(_home())
    try:
        return steps_of(ledger, cache_id)
    finally:
        ledger.close()


def _archive(bucket: str, cache_ids: list[str]) -> None:
    """Archive through the archive package (`lifecycle archive` does the same)."""
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.archive.objects import s3_client
    from lifecycle.archive.run import archive_caches

    ledger = Ledger.open(_home())
    try:
        location = ArchiveLocation(bucket, PREFIX)
        client = s3_client(os.environ)
        archive_caches(
            ledger,
            Home(_home()),
            client,
            location,
            cache_ids,
            host_env=os.environ,
            with_content=False,
            dry_run=False,
            progress=None,
        )
    finally:
        ledger.close()


def _plan(result: Any) -> dict[str, dict[str, Any]]:
    """cache id -> its entry in the JSON plan."""
    return {c["id"]: c for c in json.loads(result.stdout)["plan"]["caches"]}


def _gone(cache: CacheRecord) -> bool:
    return not Path(cache.host_path).exists() and not trash_path(cache).exists()


@pytest.mark.docker
@pytest.mark.s3
def test_archive_then_teardown_removes_what_verifies(
    project: Path, s3_bucket: str, docker_client: Any
) -> None:
    boot, ids = _boot(project)
    result = _cli(project, "teardown", "--archive", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("archive, then remove") == 4
    caches = _caches()
    freed = 0
    for cache_id in ids:
        steps = _journal(cache_id)
        assert [s.step for s in steps] == ["intent", "verified", "deleted", "done"]
        assert len({s.run_id for s in steps}) == 1
        assert steps[-1].bytes_freed == steps[-2].bytes_freed
        freed += steps[-1].bytes_freed or 0
        assert caches[cache_id].state == "torn-down" and _gone(caches[cache_id])
    assert freed > 0
    summary = f"removed 4 caches, {human_bytes(freed)} freed; evidence at s3://{s3_bucket}/{PREFIX}"
    assert summary in result.stdout
    from docker.errors import NotFound

    with pytest.raises(NotFound):  # its stopped boot container went with its caches
        docker_client.containers.get(boot["container_id"])
    again = _cli(project, "teardown", "--yes")
    assert again.exit_code == 0 and "nothing to remove" in again.stdout


def _not_this_users(root: Path, uid: int) -> None:
    """What the engine wrote under `root` (dirs 755, files 644), made another user's."""
    for path in root.rglob("*"):
        os.lchown(path, uid, uid)


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_the_engine_wrote_as_another_user_is_removed_through_dockerd(
    project: Path, tmp_path: Path
) -> None:
    """lifecycle run by a user in the docker group could not remove what an engine wrote as
    root, nor could any later run: every cache was kept, half in the trash. dockerd, which
    ran the engine, empties the trash now, as root, following no link.

    The user is played by root in a user namespace of its own, where files of an unmapped
    uid are another user's: it may read them, not remove them."""
    if subprocess.run(["unshare", "--user", "--map-root-user", "true"]).returncode != 0:
        pytest.skip("no user namespaces here: cannot run lifecycle as another user")
    _, ids = _boot(project)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the cache's")
    vllm = _caches()[next(i for i in ids if i.startswith("vllm-"))]
    (Path(vllm.host_path) / "link").symlink_to(outside)
    assert _cli(project, "archive", "--all", "--with-content").exit_code == 0
    other = 12345
    for cache_id in ids:
        _not_this_users(Path(_caches()[cache_id].host_path), other)
    os.lchown(outside, other, other)

    argv = [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests")]
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", *argv, "teardown", "--yes"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "removed 4 caches" in done.stdout, done.stdout
    caches = _caches()
    assert all(caches[i].state == "torn-down" and _gone(caches[i]) for i in ids), done.stdout
    assert outside.read_text() == "not the cache's"


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_booted_again_after_archiving_is_kept_until_re_archived(
    project: Path, s3_bucket: str
) -> None:
    _, ids = _boot(project)
    _archive(s3_bucket, ids)
    warm = _cli(project, "boot", "demo/0.2", "--json")  # reuses the archived caches
    assert warm.exit_code == 0, warm.output
    assert sorted(u["cache_id"] for u in json.loads(warm.stdout)["caches"]) == ids
    assert {c.state for c in _caches().values()} == {"live"}
    result = _cli(project, "teardown", "--yes", "--json")
    plan = _plan(result)
    for cache_id in ids:
        assert plan[cache_id]["action"] == "keep", plan[cache_id]
    assert all(Path(c.host_path).is_dir() for c in _caches().values())


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_not_archived_is_kept_and_the_plan_says_why(project: Path) -> None:
    _, ids = _boot(project)
    result = _cli(project, "teardown", "--yes", "--json")
    assert result.exit_code == 0, result.output
    plan = _plan(result)
    for cache_id in ids:
        assert plan[cache_id]["action"] == "keep"
        assert plan[cache_id]["why"] == ["not archived (--archive archives it first)"]
    assert json.loads(result.stdout)["result"] is None
    assert all(Path(c.host_path).is_dir() for c in _caches().values())


@pytest.mark.docker
@pytest.mark.s3
def test_a_result_not_archived_yet_keeps_its_caches_until_archive_takes_it(
    project: Path, s3_bucket: str, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    boot, ids = _boot(project)
    _archive(s3_bucket, ids)
    with monkeypatch.context() as no_location:  # recorded while no archive location was set
        no_location.delenv("LIFECYCLE_ARCHIVE")
        added = _cli(project, "result", "add", boot["id"], "--name", "burst", "--status", "pass")
        assert added.exit_code == 0, added.output
    result_id = _result_ids()[0]

    kept = _cli(project, "teardown", "--yes", "--json")
    assert kept.exit_code == 0, kept.output
    plan = _plan(kept)
    for cache_id in ids:
        assert plan[cache_id]["action"] == "keep"
        why = f"result {result_id} on it not archived yet (--archive archives it first)"
        assert plan[cache_id]["why"] == [why]
    assert all(Path(c.host_path).is_dir() for c in _caches().values())

    done = _cli(project, "teardown", "--archive", "--yes")
    assert done.exit_code == 0, done.output
    assert all(c.state == "torn-down" for c in _caches().values())
    [key] = keys(s3_client, s3_bucket, f"{PREFIX}/results/{result_id}/")
    assert read_json(s3_client, s3_bucket, key)["result_id"] == result_id


def _archived_result(project: Path, boot_id: str) -> tuple[str, str]:
    """Add a result to the boot, archived at once (its caches first): its id, its record's key."""
    added = _cli(project, "result", "add", boot_id, "--name", "burst", "--status", "pass", "--json")
    assert added.exit_code == 0, added.output
    result = json.loads(added.stdout)
    [archived] = result["archives"]
    return result["id"], archived["record_key"]


@pytest.mark.docker
@pytest.mark.s3
def test_a_result_record_lost_on_the_server_keeps_its_caches_until_archive_writes_it_again(
    project: Path, s3_bucket: str, s3_client: Any
) -> None:
    boot, ids = _boot(project)
    result_id, record = _archived_result(project, boot["id"])
    s3_client.delete_object(Bucket=s3_bucket, Key=record)  # lost: by hand, by another tool

    kept = _cli(project, "teardown", "--yes", "--json")
    assert kept.exit_code == 1, kept.output  # a damaged archive, not fixed by this run
    plan = _plan(kept)
    lost = f"archive does not verify: result {result_id}: s3://{s3_bucket}/{record}: missing"
    for cache_id in ids:
        assert plan[cache_id]["action"] == "keep" and lost in plan[cache_id]["why"]
    assert all(Path(c.host_path).is_dir() for c in _caches().values())

    archived = _cli(project, "archive", "--all")
    assert archived.exit_code == 0, archived.output
    [again] = keys(s3_client, s3_bucket, f"{PREFIX}/results/{result_id}/")
    assert read_json(s3_client, s3_bucket, again)["result_id"] == result_id
    done = _cli(project, "teardown", "--yes")
    assert done.exit_code == 0, done.output
    assert all(c.state == "torn-down" for c in _caches().values())
    audit = _cli(project, "audit", "result", result_id, "--from", f"s3://{s3_bucket}/{PREFIX}")
    assert audit.exit_code == 0, audit.output


@pytest.mark.docker
@pytest.mark.s3
def test_a_result_record_damaged_after_the_plan_keeps_its_caches_at_their_removal(
    project: Path, s3_bucket: str, s3_client: Any
) -> None:
    from lifecycle.commands.teardown import connect_services
    from lifecycle.teardown.run import run_teardown
    from lifecycle.teardown.survey import TeardownRequest, make_plan

    boot, ids = _boot(project)
    result_id, record = _archived_result(project, boot["id"])

    def damage_at(point: str) -> None:
        if point == "teardown-planned":  # agreed to: every cache was to go
            damage(s3_client, s3_bucket, record)

    services = connect_services(os.environ)
    ledger = Ledger.open(_home())
    try:
        plan = make_plan(ledger, Home(_home()), services, TeardownRequest())
        assert sorted(d.cache.id for d in plan.removing) == ids
        done = run_teardown(
            ledger, Home(_home()), services, plan, TeardownRequest(), checkpoint=damage_at
        )
    finally:
        ledger.close()
    assert done.removed == ()
    for outcome in done.outcomes:
        assert f"result {result_id}: s3://{s3_bucket}/{record}: sha256 " in str(outcome.problem)
    assert all(Path(c.host_path).is_dir() for c in _caches().values())

    # --archive sets the damaged bytes aside, writes the record again, then removes.
    fixed = _cli(project, "teardown", "--archive", "--yes")
    assert fixed.exit_code == 0, fixed.output
    assert all(c.state == "torn-down" for c in _caches().values())
    [again] = keys(s3_client, s3_bucket, f"{PREFIX}/results/{result_id}/")
    body = s3_client.get_object(Bucket=s3_bucket, Key=again)["Body"].read()
    assert again.endswith(f"/{sha256(body).hexdigest()}.json")  # its own bytes, not the damage
    audit = _cli(project, "audit", "result", result_id, "--from", f"s3://{s3_bucket}/{PREFIX}")
    assert audit.exit_code == 0, audit.output


def _result_ids() -> list[str]:
    ledger = Ledger.open(_home())
    try:
        return [row["id"] for row in ledger.query("SELECT id FROM results ORDER BY created_at")]
    finally:
        ledger.close()


def _blob_key(sha: str) -> str:
    return f"{PREFIX}/blobs/sha256/{sha[:2]}/{sha}"


@pytest.mark.docker
@pytest.mark.s3
def test_a_blob_corrupted_or_deleted_on_the_server_is_caught_and_named(
    project: Path, s3_bucket: str, s3_client: Any
) -> None:
    _, ids = _boot(project)
    _archive(s3_bucket, ids)
    records = {cache_id: newest_version(s3_client, s3_bucket, PREFIX, cache_id) for cache_id in ids}
    # A blob only one cache's record names, so each fault belongs to exactly one cache.
    holders: dict[str, list[str]] = {}
    for cache_id, record in records.items():
        assert record is not None
        for blob in record["blobs"]:
            holders.setdefault(blob["sha256"], []).append(cache_id)
    own = {ids[0]: "", ids[1]: ""}
    for sha, names in holders.items():
        if len(names) == 1 and names[0] in own and not own[names[0]]:
            own[names[0]] = sha
    corrupted, deleted = (_blob_key(own[ids[0]]), _blob_key(own[ids[1]]))
    size = s3_client.head_object(Bucket=s3_bucket, Key=corrupted)["ContentLength"]
    # Same size, other bytes, no ChecksumSHA256: only the content can tell.
    s3_client.put_object(Bucket=s3_bucket, Key=corrupted, Body=b"\0" * size)
    s3_client.delete_object(Bucket=s3_bucket, Key=deleted)

    result = _cli(project, "teardown", "--yes", "--json")
    assert result.exit_code == 1, result.output  # kept because an archive did not verify
    plan = _plan(result)
    assert plan[ids[0]]["action"] == "keep" and plan[ids[0]]["problem"]
    assert any(
        f"s3://{s3_bucket}/{corrupted}: content has sha256" in w for w in plan[ids[0]]["why"]
    )
    assert plan[ids[1]]["why"] == [f"archive does not verify: s3://{s3_bucket}/{deleted}: missing"]
    caches = _caches()
    for cache_id in ids[:2]:
        assert caches[cache_id].state == "archived" and Path(caches[cache_id].host_path).is_dir()
        assert _journal(cache_id) == []  # refused by the plan: nothing was started
    for cache_id in ids[2:]:
        assert caches[cache_id].state == "torn-down" and _gone(caches[cache_id])
    text = _cli(project, "teardown", "--yes")
    assert f"s3://{s3_bucket}/{corrupted}" in text.stdout
    assert f"s3://{s3_bucket}/{deleted}: missing" in text.stdout


CRASHES = [*CRASH_POINTS, "after-rename:3"]  # the last: two caches done, the third half way


@pytest.mark.docker
@pytest.mark.s3
def test_sigkill_at_every_step_boundary_then_a_plain_rerun_converges(
    project: Path, s3_bucket: str, tmp_path: Path
) -> None:
    _, ids = _boot(project)
    _archive(s3_bucket, ids)
    home = _home()
    template = tmp_path / "home-archived"
    shutil.copytree(home, template, symlinks=True)
    for crash in CRASHES:
        shutil.rmtree(home)
        shutil.copytree(template, home, symlinks=True)
        killed = _process(project, "teardown", "--yes", env={CRASH_ENV: crash})
        assert killed.returncode == -signal.SIGKILL, (crash, killed.stdout, killed.stderr)
        caches = _caches()
        for cache_id in ids:
            steps = _journal(cache_id)
            if not Path(caches[cache_id].host_path).exists():
                assert "verified" in [s.step for s in steps], (crash, cache_id, steps)
        assert any(_journal(i) for i in ids), crash

        rerun = _process(project, "teardown", "--yes")
        assert rerun.returncode == 0, (crash, rerun.stdout, rerun.stderr)
        assert "resumes run" in rerun.stdout, crash
        caches = _caches()
        for cache_id in ids:
            assert caches[cache_id].state == "torn-down" and _gone(caches[cache_id]), crash
            steps = _journal(cache_id)
            last = [s.step for s in steps if s.run_id == steps[-1].run_id]
            assert last == ["intent", "verified", "deleted", "done"], (crash, cache_id, steps)
        assert not list((home / "caches").glob(".trash-*")), crash


def _snapshot(s3_client: Any, bucket: str) -> tuple[object, ...]:
    """Everything a dry run must leave alone: files under LIFECYCLE_HOME, the ledger, S3."""
    home = _home()
    files = []
    for path in sorted(home.rglob("*")):
        if path.name.startswith("ledger.sqlite3"):
            continue  # compared as a dump below; SQLite's -wal/-shm come and go with readers
        info = path.lstat()
        digest = sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        files.append((str(path.relative_to(home)), info.st_mode, info.st_size, digest))
    conn = sqlite3.connect(home / "ledger.sqlite3")
    dump = list(conn.iterdump())
    conn.close()
    listed = s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])
    objects = [(o["Key"], o["Size"], o["ETag"], o["LastModified"]) for o in listed]
    return tuple(files), tuple(dump), tuple(objects)


@pytest.mark.docker
@pytest.mark.s3
def test_dry_run_changes_nothing_on_disk_in_the_ledger_or_in_s3(
    project: Path, s3_bucket: str, s3_client: Any
) -> None:
    _, ids = _boot(project)
    _archive(s3_bucket, ids[:2])
    before = _snapshot(s3_client, s3_bucket)
    result = _cli(project, "teardown", "--archive", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plan = _plan(result)
    assert [plan[i]["action"] for i in ids] == ["remove"] * 2 + ["archive, then remove"] * 2
    notes = json.loads(result.stdout)["plan"]["notes"]
    assert [n.split(" to ")[0] for n in notes] == [f"would archive {i}" for i in ids[2:]]
    text = _cli(project, "teardown", "--archive", "--dry-run", "--images")
    assert "would remove: 4 caches" in text.stdout and "dry run: nothing changed" in text.stdout
    assert _snapshot(s3_client, s3_bucket) == before


@pytest.mark.docker
@pytest.mark.s3
def test_a_pinned_cache_survives_until_it_is_unpinned(project: Path) -> None:
    _, ids = _boot(project)
    pinned = ids[0]
    result = _cli(project, "pin", pinned, "--reason", "result r-42 (acceptance night)")
    assert result.exit_code == 0 and f"pinned {pinned}" in result.stdout
    typo = _cli(project, "pin", pinned[:-1] + "x")
    assert typo.exit_code == 2 and f"did you mean {pinned!r}" in typo.stderr

    result = _cli(project, "teardown", "--archive", "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert _plan(result)[pinned]["why"] == ["pinned: result r-42 (acceptance night)"]
    caches = _caches()
    assert caches[pinned].state == "live" and Path(caches[pinned].host_path).is_dir()
    assert all(caches[i].state == "torn-down" for i in ids[1:])

    wrong = _cli(project, "unpin", pinned, "--reason", "nope")
    assert wrong.exit_code == 2 and "result r-42 (acceptance night)" in wrong.stderr
    assert _cli(project, "unpin", pinned).exit_code == 0
    result = _cli(project, "teardown", "--archive", "--yes")
    assert result.exit_code == 0 and "removed 1 cache," in result.stdout
    assert _caches()[pinned].state == "torn-down"


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_mounted_by_a_running_container_is_kept(project: Path, docker_client: Any) -> None:
    from tests.services import TEST_LABEL

    boot, ids = _boot(project)
    held = _caches()[ids[0]]
    container = docker_client.containers.run(
        boot["image_id"],
        entrypoint=["sleep"],
        command=["300"],
        detach=True,
        network_mode="none",
        volumes={held.host_path: {"bind": "/held", "mode": "ro"}},
        labels={TEST_LABEL: "teardown"},
    )
    try:
        result = _cli(project, "teardown", "--archive", "--yes", "--json")
        assert result.exit_code == 0, result.output
        why = _plan(result)[ids[0]]["why"]
        assert why == [f"mounted by running container {container.name}"]
        caches = _caches()
        assert caches[ids[0]].state == "live" and Path(held.host_path).is_dir()
        assert all(caches[i].state == "torn-down" for i in ids[1:])
        docker_client.containers.get(boot["container_id"])  # one of its caches stays: so does it
    finally:
        container.remove(force=True)


@pytest.mark.docker
@pytest.mark.s3
def test_without_yes_and_without_a_terminal_nothing_happens(
    project: Path, s3_bucket: str, s3_client: Any
) -> None:
    _boot(project)
    refused = _process(project, "teardown", "--archive")
    assert refused.returncode == 2, refused.stderr
    assert "no terminal to confirm on; pass --yes" in refused.stderr
    assert "archive, then remove" in refused.stdout  # the plan was shown
    assert "Contents" not in s3_client.list_objects_v2(Bucket=s3_bucket)
    assert all(c.state == "live" and Path(c.host_path).is_dir() for c in _caches().values())


@pytest.mark.docker
@pytest.mark.s3
def test_a_pre_teardown_hook_vetoes_and_on_exit_still_runs(
    project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    _, ids = _boot(project)
    marker = tmp_path / "on-exit.json"
    gate = project / "hooks" / "gate"
    gate.write_text(
        f'#!/bin/sh\n[ "$1" = pre-teardown ] && exit 3\n[ "$1" = on-exit ] && cat >{marker}\n'
        "exit 0\n"
    )
    gate.chmod(0o755)
    result = _cli(project, "teardown", "--archive", "--yes", "--hook", "gate")
    assert result.exit_code == 1 and "hook 'gate' exited 3 on pre-teardown" in result.stderr
    context = json.loads(marker.read_text())
    assert context["step"] == "teardown" and context["outcome"] == "failed"
    assert sorted(context["caches"]) == ids
    assert "Contents" not in s3_client.list_objects_v2(Bucket=s3_bucket)  # nothing archived
    assert all(c.state == "live" for c in _caches().values())


@pytest.mark.docker
@pytest.mark.s3
def test_s3_unreachable_keeps_every_cache_and_says_why(
    project: Path, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, ids = _boot(project)
    _archive(s3_bucket, ids)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nobody listens
    result = _cli(project, "teardown", "--yes", "--json")
    assert result.exit_code == 3, result.output  # the environment failed
    assert f"s3://{s3_bucket}/{PREFIX}: the S3 server http://127.0.0.1:9" in result.stderr
    for entry in _plan(result).values():
        assert entry["action"] == "keep" and entry["problem"]
        assert entry["why"][0].startswith(
            f"archive does not verify: cannot reach S3 for s3://{s3_bucket}"
        )
    assert all(Path(c.host_path).is_dir() for c in _caches().values())


@pytest.mark.docker
def test_images_this_home_built_go_unless_a_cache_or_container_uses_them(
    docker_client: Any, tmp_path: Path
) -> None:
    import io

    from docker.errors import ImageNotFound

    from lifecycle.build.plan import DIGEST_LABEL
    from lifecycle.demo.images import engine_image
    from lifecycle.demo.setup import ensure_demo
    from lifecycle.ledger import BuildRecord
    from lifecycle.teardown.containers import NAME_LABEL
    from tests.services import TEST_LABEL

    ensure_demo(docker_client)
    name = f"teardown-test-{secrets.token_hex(4)}"
    tags = [f"lifecycle-test/{name}:{n}" for n in ("unused", "running", "other-home")]
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    for tag in tags:
        dockerfile = f"FROM {engine_image('0.2.0')}\nLABEL tag={tag}\n"
        labels = {DIGEST_LABEL: secrets.token_hex(32), NAME_LABEL: name, TEST_LABEL: "teardown"}
        image, _ = docker_client.images.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels=labels, rm=True
        )
        if not tag.endswith("other-home"):  # the same engine, another LIFECYCLE_HOME built it
            built = BuildRecord(
                started_at="2026-10-10T06:00:00+00:00",
                duration_s=1.0,
                manifest_name=name,
                manifest_file="manifest.yaml",
                manifest_digest=labels[DIGEST_LABEL],
                tag=tag,
                image_id=image.id,
                outcome="built",
                error=None,
                log_path=None,
            )
            record_build(ledger, built)
    ledger.close()
    running = docker_client.containers.run(
        tags[1], entrypoint=["sleep"], command=["300"], detach=True, network_mode="none"
    )
    try:
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert f"removed image {tags[0]}" in result.stdout
        assert f"kept image {tags[1]}: used by container {running.name} (running)" in result.stdout
        assert f"kept 1 image {NOT_OURS}: {tags[2]}" in result.stdout
        with pytest.raises(ImageNotFound):
            docker_client.images.get(tags[0])
        docker_client.images.get(tags[2])  # still there
        removed = dict(_builds_removed(name))
        assert removed[tags[0]] and removed[tags[1]] is None, removed
    finally:
        running.remove(force=True)
        for tag in tags:
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(tag, force=True)


def test_an_image_dockerd_only_untags_is_said_kept_not_removed(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # dockerd keeps an image another is built on (a bake, a user's own): removing its tag
    # untags it and says nothing; teardown said "removed image" of an image still there. One
    # built on it before the plan keeps it in the plan (below); this one came since.
    import io

    from docker.errors import ImageNotFound

    from lifecycle.teardown import run as teardown_run

    name, tag, image = _built_here(docker_client)
    child = f"lifecycle-test/{name}:built-on-it"

    def built_on_meanwhile(
        client: Any, decided: ImageDecision, deleted: set[str], stays: Any
    ) -> str | None:
        dockerfile = f"FROM {image.id}\nLABEL child=1\n"
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=child, rm=True)
        return real_remove(client, decided, deleted, stays)

    real_remove = teardown_run.remove_image
    monkeypatch.setattr(teardown_run, "remove_image", built_on_meanwhile)
    try:
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert f"removed image {tag}" not in result.stdout
        assert "dockerd keeps it: an image built on it is still there" in result.stdout
        docker_client.images.get(image.id)  # still there, untagged
        assert _builds_removed(name) == [(tag, None)]  # not removed: nothing recorded
    finally:
        for reference in (child, image.id):
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(reference, force=True)


def test_an_image_built_on_one_this_home_built_keeps_it_and_the_plan_says_so(
    docker_client: Any,
) -> None:
    # The plan said "remove" of an image a user's own image was built on; the run then said
    # dockerd only untagged it. Its labels are the image's own: listed, another home's.
    import io

    name, tag, image = _built_here(docker_client)
    child = f"lifecycle-test/{name}:built-on-it"
    built, _ = docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {image.id}\nLABEL child=1\n".encode()), tag=child, rm=True
    )
    try:
        why = f"image {child} is built on it, and stays"
        assert _images_planned(name) == {image.id: (False, why), built.id: (False, NOT_OURS)}
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert f"image {tag}: keep ({why})" in result.stdout, result.output
        assert docker_client.images.get(image.id).tags == [tag]  # not even untagged
    finally:
        _removed_quietly(docker_client, child, image.id)


def test_an_image_dockerd_refuses_to_remove_at_its_moment_is_kept_and_not_recorded(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A container started on the image between the decision and the removal: dockerd refuses
    # (409, in use), the image is said kept with dockerd's words and the ledger records nothing.

    from docker.errors import ImageNotFound

    from lifecycle.teardown import run as teardown_run

    name, tag, image = _built_here(docker_client)
    started: list[Any] = []

    def started_meanwhile(
        client: Any, decided: ImageDecision, deleted: set[str], stays: Any
    ) -> str | None:
        started.append(
            client.containers.run(
                decided.id, entrypoint=["sleep"], command=["300"], detach=True,
                network_mode="none",
            )
        )  # fmt: skip
        return real_remove(client, decided, deleted, stays)

    real_remove = teardown_run.remove_image
    monkeypatch.setattr(teardown_run, "remove_image", started_meanwhile)
    try:
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert started, result.output
        assert f"removed image {tag}" not in result.stdout, result.output
        assert f"kept image {tag}" in result.stdout, result.output
        docker_client.images.get(image.id)  # still there
        assert _builds_removed(name) == [(tag, None)]
    finally:
        for container in started:
            container.remove(force=True)
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(image.id, force=True)


def test_an_image_gone_before_its_removal_is_said_gone_not_removed_and_not_recorded(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone (another home's teardown, `docker rmi`) removed the image between teardown's
    # listing and its removal: dockerd's "not found" was taken for this run's removal, said
    # "removed image" and stamped removed_at, which verify and boot then tell as a teardown's.
    from docker.errors import ImageNotFound

    from lifecycle.teardown import run as teardown_run

    name, tag, image = _built_here(docker_client)

    def removed_meanwhile(
        client: Any, decided: ImageDecision, deleted: set[str], stays: Any
    ) -> str | None:
        client.images.remove(decided.id, force=True)  # this test's own image
        return real_remove(client, decided, deleted, stays)

    real_remove = teardown_run.remove_image
    monkeypatch.setattr(teardown_run, "remove_image", removed_meanwhile)
    try:
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert f"removed image {tag}" not in result.stdout, result.output
        assert f"kept image {tag}" not in result.stdout, result.output
        assert f"image {tag}: already gone from dockerd: removed by someone else" in result.stdout
        with pytest.raises(ImageNotFound):
            docker_client.images.get(image.id)
        assert _builds_removed(name) == [(tag, None)]  # gone, as by hand: not stamped ours
    finally:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(image.id, force=True)


def _builds_removed(manifest: str) -> list[tuple[str, str | None]]:
    """(tag, removed_at) of each build of `manifest` the test home's ledger holds."""
    with contextlib.closing(
        sqlite3.connect(Path(os.environ["LIFECYCLE_HOME"]) / "ledger.sqlite3")
    ) as conn:
        sql = "SELECT tag, removed_at FROM builds WHERE manifest_name = ? ORDER BY id"
        return conn.execute(sql, (manifest,)).fetchall()


def test_a_finished_removal_commits_nothing_after_a_restore(tmp_path: Path) -> None:
    """Found by the SIGKILL loop: a cache removed (done), restored, then given a new file, then
    a teardown killed after `intent`. The next run took the old run's `deleted` for its own,
    skipped the tree check as for a half-removed trash, and removed the new file with it."""
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    assert _remove(ledger, cache, archive, "t-1").removed
    for name, body in CONTENT.items():  # restored
        (Path(cache.host_path) / name).parent.mkdir(parents=True, exist_ok=True)
        (Path(cache.host_path) / name).write_bytes(body)
    with pytest.raises(_Crash):
        _remove(ledger, cache, archive, "t-2", crash_at="after-intent")
    resumes = unfinished_runs(ledger, [cache])[cache.id]
    assert resumes.run_id == "t-2" and not resumes.committed
    from lifecycle.teardown.removal import where_now

    assert where_now(cache, resumes) == Path(cache.host_path)  # so its tree is checked again


def test_the_images_other_homes_built_are_one_line_not_one_each() -> None:
    """On a dockerd many homes share (CI runners, users), `plan` listed each of their images,
    dozens of "keep" lines burying the few this home decides on; `--json` still has each."""
    mine = ImageDecision("sha256:" + "a" * 64, ("lifecycle/demo:0.1",), "demo", True, "unused")
    theirs = [
        ImageDecision(f"sha256:{n:064x}", (f"lifecycle/demo:0.2-{n}",), "demo", False, NOT_OURS)
        for n in range(40)
    ]
    planned = image_lines([mine, *theirs], done=False)
    assert planned == [
        "image lifecycle/demo:0.1: remove (unused)",
        "kept 40 images built by another home (not in this ledger):"
        " lifecycle/demo:0.2-0, lifecycle/demo:0.2-1, lifecycle/demo:0.2-2, …",
    ]
    assert image_lines([mine, theirs[0]], done=True) == [
        "removed image lifecycle/demo:0.1",
        "kept 1 image built by another home (not in this ledger): lifecycle/demo:0.2-0",
    ]


# Outside text a plan or a summary holds (an S3 server's error, dockerd's): a newline and a
# line the reader would take for the plan's own.
FORGED = "SlowDown\nimage lifecycle/demo:0.1: keep (a cache that stays was built by it)"


def test_an_outside_field_forges_no_line_of_a_teardown_plan_or_its_summary() -> None:
    # The plan shown before --yes is what is agreed to: a note holding S3's words forged a
    # "keep" line for an image the plan removes.
    mine = ImageDecision("sha256:" + "a" * 64, ("lifecycle/demo:0.1",), "demo", True, "unused")
    plan = TeardownPlan((), (), (mine,), notes=(f"would archive c-1, but: {FORGED}",))
    shown = visible_lines(plan_text(plan, dry_run=False)).splitlines()  # as the CLI prints it
    assert [line for line in shown if "lifecycle/demo:0.1" in line] == [
        "note: would archive c-1, but: SlowDown\\nimage lifecycle/demo:0.1: keep (a cache"
        " that stays was built by it)",
        "image lifecycle/demo:0.1: remove (unused)",
    ]
    assert len(shown) == 4, shown  # no caches, the note, the image, the totals

    forged = "SlowDown\nremoved 3 caches, 20.0 GiB freed"
    done = TeardownResult(
        "t-1", (CacheOutcome("c-1", False, problem=f"not archived: {forged}"),), (), (), ()
    )
    shown = visible_lines(summary_text(done)).splitlines()
    assert shown == [
        "removed 0 caches, 0 B freed",
        "kept c-1: not archived: SlowDown\\nremoved 3 caches, 20.0 GiB freed",
        "journal: run t-1",
    ]


def _built_here(docker_client: Any) -> tuple[str, str, Any]:
    """An engine image of a manifest of its own (the demo engine, relabelled), recorded as
    built by this home: (manifest name, tag, image)."""
    import io

    from lifecycle.build.plan import DIGEST_LABEL
    from lifecycle.demo.images import engine_image
    from lifecycle.demo.setup import ensure_demo
    from lifecycle.ledger import BuildRecord
    from lifecycle.teardown.containers import NAME_LABEL
    from tests.services import TEST_LABEL

    ensure_demo(docker_client)
    name = f"teardown-test-{secrets.token_hex(4)}"
    tag = f"lifecycle-test/{name}:engine"
    labels = {DIGEST_LABEL: secrets.token_hex(32), NAME_LABEL: name, TEST_LABEL: "teardown"}
    dockerfile = f"FROM {engine_image('0.2.0')}\nLABEL tag={tag}\n"
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels=labels, rm=True
    )
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    built = BuildRecord(
        started_at="2026-10-10T06:00:00+00:00", duration_s=1.0, manifest_name=name,
        manifest_file="manifest.yaml", manifest_digest=labels[DIGEST_LABEL], tag=tag,
        image_id=image.id, outcome="built", error=None, log_path=None,
    )  # fmt: skip
    record_build(ledger, built)
    ledger.close()
    return name, tag, image


def _engine_image(
    docker_client: Any, name: str, tag: str, *, on: str | None = None, record: bool = True
) -> Any:
    """An image of manifest `name` tagged `tag`, built FROM the demo engine (or `on`); with
    `record`, recorded as built by this home. Its labels are passed to dockerd's build, so it
    leaves intermediate images that carry them, as a bake's steps carry its engine's."""
    import io

    from lifecycle.build.plan import DIGEST_LABEL
    from lifecycle.demo.images import engine_image
    from lifecycle.ledger import BuildRecord
    from lifecycle.teardown.containers import NAME_LABEL
    from tests.services import TEST_LABEL

    labels = {DIGEST_LABEL: secrets.token_hex(32), NAME_LABEL: name, TEST_LABEL: "teardown"}
    dockerfile = f"FROM {on or engine_image('0.2.0')}\nENV LIFECYCLE_TEST={tag}\n"
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels=labels, rm=True
    )
    if not record:
        return image
    ledger = Ledger.open(_home())
    built = BuildRecord(
        started_at=_stamp(), duration_s=1.0, manifest_name=name, manifest_file="manifest.yaml",
        manifest_digest=labels[DIGEST_LABEL], tag=tag, image_id=image.id, outcome="built",
        error=None, log_path=None,
    )  # fmt: skip
    record_build(ledger, built)
    ledger.close()
    return image


def _cache_of(image_id: str, manifest: str, state: str) -> CacheRecord:
    """A cache of `manifest` booted from `image_id`, in `state`, whose dir is not there."""
    cache_id = f"vllm-{secrets.token_hex(4)}"
    cache = CacheRecord(
        id=cache_id, cache_key=secrets.token_hex(32), cache_name="vllm", manifest_name=manifest,
        manifest_digest="d" * 64, image_id=image_id, arch="unknown",
        host_path=str(Home(_home()).cache_dir(cache_id)), container_path="/var/cache/vllm",
        state=state, in_use_by=None, created_at=_stamp(),
    )  # fmt: skip
    ledger = Ledger.open(_home())
    with ledger.transaction() as conn:
        insert(conn, "caches", cache)
    ledger.close()
    return cache


def _images_planned(name: str, *args: str) -> dict[str, tuple[bool, str]]:
    """image id -> (removes, why) in the plan of `teardown --images --manifest name`."""
    result = CliRunner().invoke(
        cli, ["teardown", "--images", "--manifest", name, "--dry-run", "--json", *args],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    images = json.loads(result.stdout)["plan"]["images"]
    return {i["id"]: (i["removes"], i["why"]) for i in images}


def _removed_quietly(docker_client: Any, *references: str) -> None:
    from docker.errors import ImageNotFound

    for reference in references:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(reference, force=True)


@pytest.mark.docker
def test_the_image_of_a_cache_gone_from_this_host_goes_as_the_plan_says(
    docker_client: Any,
) -> None:
    # A cache whose dir vanished is recorded `missing` (no archive to say nothing was lost):
    # the plan kept its image because "a cache that stays was built by it", and the run kept
    # the image of every cache recorded `missing` for ever, while the plan of a later run said
    # it would go. Nothing boots from a missing cache: its image goes as a torn-down one's.
    from docker.errors import ImageNotFound

    from lifecycle.demo.setup import ensure_demo

    ensure_demo(docker_client)
    name = f"teardown-test-{secrets.token_hex(4)}"
    recorded = _engine_image(docker_client, name, f"lifecycle-test/{name}:missing")
    vanishing = _engine_image(docker_client, name, f"lifecycle-test/{name}:vanishing")
    _cache_of(recorded.id, name, "missing")
    vanished = _cache_of(vanishing.id, name, "live")  # its dir is not there: recorded as gone
    try:
        planned = _images_planned(name)
        assert planned == {
            recorded.id: (True, "no remaining cache refers to it"),
            vanishing.id: (True, "no remaining cache refers to it"),
        }
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert f"recorded {vanished.id} as missing: its dir was gone" in result.stdout
        for image in (recorded, vanishing):
            assert f"removed image {image.tags[0]}" in result.stdout, result.output
            with pytest.raises(ImageNotFound):
                docker_client.images.get(image.id)
        assert _caches()[vanished.id].state == "missing"
    finally:
        _removed_quietly(docker_client, recorded.id, vanishing.id)


@pytest.mark.docker
def test_an_image_pulled_by_digest_is_kept_as_pulled_not_as_another_homes_unknown_build(
    docker_client: Any, registry: str
) -> None:
    # This ledger recorded the pull (registry_images): "built by another home (not in this
    # ledger)" was untrue. A pulled image is another home's build, never removed here
    # (the schema's word on builds.removed_at): kept, and said why.
    from lifecycle.build.engine import pull_image, push_image
    from lifecycle.build.plan import DIGEST_LABEL
    from lifecycle.demo.setup import ensure_demo
    from lifecycle.ledger.builds import RegistryImage, record_registry_image

    ensure_demo(docker_client)
    name = f"teardown-test-{secrets.token_hex(4)}"
    built = _engine_image(docker_client, name, f"lifecycle-test/{name}:pushed", record=False)
    digest = built.labels[DIGEST_LABEL]
    pushed = push_image(docker_client, built.id, f"lifecycle-test/{name}:pushed", registry)
    try:
        docker_client.images.remove(built.id, force=True)  # every name of it: gone here
        ledger = Ledger.open(_home())  # another home's build, pulled into this one
        pulled = pull_image(docker_client, pushed.reference, digest)
        assert pulled.id == built.id and pulled.tags == []  # untagged: by digest
        at = _stamp()
        record_registry_image(
            ledger, RegistryImage(pulled.id, digest, pushed.reference, "pulled", at)
        )
        ledger.close()
        why = f"pulled here as {pushed.reference}: another home's build, never removed here"
        assert _images_planned(name) == {pulled.id: (False, why)}
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert f"image {pulled.id[:19]}: keep ({why})" in result.stdout, result.output
        assert NOT_OURS not in result.stdout
        docker_client.images.get(pulled.id)  # still there
    finally:
        _removed_quietly(docker_client, built.id)


@pytest.mark.docker
def test_an_older_engine_image_a_bake_is_built_on_is_in_the_plan_and_its_layers_are_not(
    docker_client: Any,
) -> None:
    # A rebuild takes the older engine image's tag; with a bake built on it, dockerd's default
    # list hides it (an intermediate image, to dockerd): the plan said nothing of it, kept nor
    # removed. Listing every image brings the build steps' images too, carrying the labels of
    # the image they were built on: those stay out of the plan.
    from lifecycle.demo.setup import ensure_demo
    from lifecycle.ledger.builds import BakeRecord, record_bake
    from lifecycle.teardown.containers import NAME_LABEL

    ensure_demo(docker_client)
    name = f"teardown-test-{secrets.token_hex(4)}"
    tag, baked = f"lifecycle-test/{name}:engine", f"lifecycle-test/{name}:baked"
    old = _engine_image(docker_client, name, tag)
    bake = _engine_image(docker_client, name, baked, on=old.id, record=False)  # steps on `old`
    new = _engine_image(docker_client, name, tag)  # the rebuild takes the tag
    ledger = Ledger.open(_home())
    made = BakeRecord(bake.id, baked, name, "d" * 64, old.id, "serve", "x", "[]", _stamp())
    record_bake(ledger, made)
    ledger.close()
    every = docker_client.api.images(all=True, filters={"label": f"{NAME_LABEL}={name}"})
    try:
        assert docker_client.images.get(old.id).tags == []
        assert len(every) > 3  # the build steps' images, labelled as the images they made
        cache = _cache_of(bake.id, name, "live")  # the bake stays: a cache was booted from it
        Path(cache.host_path).mkdir(parents=True)
        planned = _images_planned(name)
        assert planned == {
            old.id: (False, f"bake {baked} is built on it, and stays"),
            bake.id: (False, "a cache that stays was built by it"),
            new.id: (True, "no remaining cache refers to it"),
        }
        # Once the bake goes, the older engine image goes after it, in the same run.
        ledger = Ledger.open(_home())
        with ledger.transaction() as conn:
            conn.execute("UPDATE caches SET state = 'torn-down' WHERE id = ?", (cache.id,))
        ledger.close()
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert f"removed image {baked}" in result.stdout, result.output
        assert f"removed image {old.id[:19]}" in result.stdout, result.output
        assert not docker_client.api.images(all=True, filters={"label": f"{NAME_LABEL}={name}"})
    finally:
        _removed_quietly(docker_client, bake.id, new.id, old.id)


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_whose_dir_is_gone_is_not_pinned(project: Path) -> None:
    # `pin` said "pinned" of a cache whose dir had vanished: a pin keeps nothing there, and
    # held the cache from being recorded gone, so the ledger went on calling it live.
    from lifecycle.ledger.removal import pins

    boot, ids = _boot(project)
    added = _cli(project, "result", "add", boot["id"], "--name", "smoke", "--status", "pass",
                 "--json")  # fmt: skip
    assert added.exit_code == 0, added.output
    gone = _caches()[ids[0]]
    shutil.rmtree(gone.host_path)

    def pinned() -> dict[str, list[str]]:
        ledger = Ledger.open(_home())
        try:
            return pins(ledger)
        finally:
            ledger.close()

    refused = _cli(project, "pin", gone.id)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.strip() == (
        f"{gone.id}: its dir {gone.host_path} is gone; nothing on this host to keep"
        " (the next `lifecycle teardown` records it gone)"
    )
    assert pinned() == {}
    # A result's pin takes the caches behind it that are there, and says which it skipped.
    done = _cli(project, "pin", json.loads(added.stdout)["id"])
    assert done.exit_code == 0, done.output
    assert f"skipped {gone.id}: its dir {gone.host_path} is gone" in done.stdout, done.stdout
    assert sorted(pinned()) == ids[1:]


@pytest.mark.docker
def test_removing_a_bake_leaves_the_untagged_engine_image_of_another_home_under_it(
    docker_client: Any,
) -> None:
    # Two homes on one dockerd: this home baked on an engine image another home built (and
    # rebuilt since: untagged). Removing the bake, dockerd pruned the untagged images under
    # it, the other home's engine image too: gone with no word in the plan, and the other
    # home's ledger went on saying it is there. Only the bake's own steps go with it.
    from lifecycle.demo.setup import ensure_demo
    from lifecycle.ledger.builds import BakeRecord, record_bake
    from lifecycle.teardown.containers import NAME_LABEL

    ensure_demo(docker_client)
    name = f"teardown-test-{secrets.token_hex(4)}"
    tag, baked = f"lifecycle-test/{name}:engine", f"lifecycle-test/{name}:baked"
    theirs = _engine_image(docker_client, name, tag, record=False)  # the other home's build
    mine = {"label": f"{NAME_LABEL}={name}"}
    before = {i["Id"] for i in docker_client.api.images(all=True, filters=mine)}
    bake = _engine_image(docker_client, name, baked, on=theirs.id, record=False)
    docker_client.api.remove_image(tag)  # rebuilt there: only untagged, the bake on it
    ledger = Ledger.open(_home())
    made = BakeRecord(bake.id, baked, name, "d" * 64, theirs.id, "serve", "x", "[]", _stamp())
    record_bake(ledger, made)
    ledger.close()
    try:
        assert _images_planned(name) == {bake.id: (True, "no remaining cache refers to it")}
        result = CliRunner().invoke(
            cli, ["teardown", "--images", "--manifest", name, "--yes"], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        assert f"removed image {baked}" in result.stdout, result.output
        docker_client.images.get(theirs.id)  # still there, as its home's ledger says
        after = {i["Id"] for i in docker_client.api.images(all=True, filters=mine)}
        assert after == before  # and the bake's own steps went with it
    finally:
        _removed_quietly(docker_client, bake.id, theirs.id)


def _homes_of_a_manifest(
    tmp_path: Path, repo_root: Path, prefix: str
) -> tuple[str, Callable[..., Any]]:
    """The demo's manifests under a name of the test's own (its own images), and a way to run
    lifecycle on them in a home of tmp_path by name (`lifecycle("a", "build", "0.2")`), which
    must succeed: homes on one dockerd."""
    manifests = tmp_path / "manifests"
    shutil.copytree(repo_root / "manifests/demo", manifests)
    first = manifests / "0.1/manifest.yaml"
    name = f"{prefix}-{secrets.token_hex(4)}"
    first.write_text(first.read_text().replace("\nname: demo\n", f"\nname: {name}\n", 1))

    def lifecycle(home: str, *args: str) -> Any:
        env = {"LIFECYCLE_HOME": str(tmp_path / home)}
        done = CliRunner().invoke(
            cli, ["--manifests", str(manifests), *args], env=env, catch_exceptions=False
        )
        assert done.exit_code == 0, done.output
        return done

    return name, lifecycle


@pytest.mark.docker
def test_an_image_two_homes_record_is_removed_only_by_the_home_that_built_it(
    demo_images: None, docker_client: Any, tmp_path: Path, repo_root: Path
) -> None:
    # dockerd knows no homes: home b's `build` found home a's image by its labels (up to
    # date) and recorded it, and b's teardown removed it from under a once no container held
    # it; a's `verify` then said it went "with no record here". Only a home that built an
    # image removes it; one that only found it keeps it, and says why.
    from docker.errors import ImageNotFound

    name, lifecycle = _homes_of_a_manifest(tmp_path, repo_root, "twohome")
    built = json.loads(lifecycle("a", "build", "0.2", "--json").stdout)
    found = json.loads(lifecycle("b", "build", "0.2", "--json").stdout)
    image, tag = built["image_id"], built["tag"]
    try:
        assert (built["outcome"], found["outcome"]) == ("built", "up-to-date")
        assert found["image_id"] == image  # b found a's image
        torn = ["teardown", "--images", "--manifest", name]
        planned = json.loads(lifecycle("b", *torn, "--dry-run", "--json").stdout)["plan"]
        assert [(i["id"], i["removes"], i["why"]) for i in planned["images"]] == [
            (image, False, FOUND)
        ], planned["images"]
        done = lifecycle("b", *torn, "--yes")
        assert f"image {tag}: keep ({FOUND})" in done.stdout, done.output
        docker_client.images.get(image)  # a built it: still there
        # Found again since by the home that built it: still its own, removed as before.
        assert json.loads(lifecycle("a", "build", "0.2", "--json").stdout)["outcome"] == (
            "up-to-date"
        )
        done = lifecycle("a", *torn, "--yes")
        assert f"removed image {tag}" in done.stdout, done.output
        with pytest.raises(ImageNotFound):
            docker_client.images.get(image)
    finally:
        _removed_quietly(docker_client, image)


@pytest.mark.docker
def test_status_counts_no_cache_warm_ready_once_its_engine_image_is_gone(
    demo_images: None, docker_client: Any, tmp_path: Path, repo_root: Path
) -> None:
    # Home b boots home a's image (found: up to date); a, which built it, removes it. b's
    # status still counted its caches warm-ready: no boot can run them until it builds again.
    name, lifecycle = _homes_of_a_manifest(tmp_path, repo_root, "imagegone")
    image = json.loads(lifecycle("a", "build", "0.2", "--json").stdout)["image_id"]
    try:
        lifecycle("b", "build", "0.2")
        booted = json.loads(lifecycle("b", "boot", "0.2", "--cold", "--json").stdout)
        assert booted["image_id"] == image, booted  # a's
        caches = len(booted["caches"])
        ready = {"manifest": name, "caches": caches, "warm_ready": caches, "image_gone": 0}
        status = json.loads(lifecycle("b", "status", "--json").stdout)["caches"]
        assert [{k: m[k] for k in ready} for m in status] == [ready], status
        docker_client.containers.get(booted["container_id"]).remove()  # its only guard
        torn = lifecycle("a", "teardown", "--images", "--manifest", name, "--yes").stdout
        assert "removed image" in torn, torn
        status = json.loads(lifecycle("b", "status", "--json").stdout)["caches"]
        gone = {**ready, "warm_ready": 0, "image_gone": caches}
        assert [{k: m[k] for k in ready} for m in status] == [gone], status
        said = lifecycle("b", "status").stdout
        assert f"{name}: {caches} caches not warm-ready: image gone" in said, said
        lifecycle("b", "build", "0.2")  # built again: the same key, warm-ready again
        status = json.loads(lifecycle("b", "status", "--json").stdout)["caches"]
        assert [{k: m[k] for k in ready} for m in status] == [ready], status
    finally:
        for built in docker_client.api.images(filters={"label": f"{NAME_LABEL}={name}"}):
            _removed_quietly(docker_client, built["Id"])
