"""Attacks on the removal invariant, with the demo engine booted for real, the real S3 server and
real dirs: a cache dir goes only if, under its lease, its tree is the one its verified record
holds, with the files when they were asked for, and no boot used it since the record."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import pytest

from tests.trust_support import (
    boot,
    boots,
    cache_ids,
    caches,
    cli,
    gone,
    home,
    journal,
    plan_of,
    process,
    record,
    start,
)

pytestmark = [pytest.mark.docker, pytest.mark.s3]


def test_a_file_written_after_archiving_keeps_the_cache_until_it_is_archived_again(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    target = ids[0]
    archived = cli(archive_project, "archive", target, "--with-content")
    assert archived.exit_code == 0, archived.output
    late = Path(caches()[target].host_path) / "late" / "kernel.so"
    late.parent.mkdir()
    late.write_bytes(b"\x7fELF" + os.urandom(2000))

    kept = cli(archive_project, "teardown", target, "--yes", "--json")
    assert kept.exit_code == 0, kept.output
    decision = plan_of(kept)[target]
    assert decision["action"] == "keep" and decision["archive_state"] == "out of date"
    assert decision["why"] == [
        "changed since archived: 2 added (late, late/kernel.so) (--archive archives it first)"
    ]
    assert late.is_file() and journal(target) == []

    done = cli(archive_project, "teardown", target, "--archive", "--yes", "--json")
    assert done.exit_code == 0, done.output
    assert plan_of(done)[target]["action"] == "archive, then remove"
    assert gone(caches()[target])
    document = record(s3_client, s3_bucket, target)
    assert document is not None and document["with_content"]  # never downgraded
    restored = cli(archive_project, "restore", target)
    assert restored.exit_code == 0, restored.output
    assert late.read_bytes()[:4] == b"\x7fELF" and len(late.read_bytes()) == 2004


def test_of_versions_archived_within_one_second_the_last_is_the_one_restored(
    archive_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Archiving, a teardown's archive and the next archive of one cache can fall in one second
    # (they did on CI): "the newest" among them was then the one with the larger key, by chance.
    target = cache_ids(boot(archive_project, "--cold"))[0]
    second = datetime.now(UTC).replace(microsecond=0)
    ticks = itertools.count()

    class OneSecond(datetime):  # each stamp a millisecond after the last, all in one second
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> OneSecond:
            return cls.fromtimestamp((second + timedelta(milliseconds=next(ticks))).timestamp(), tz)

    monkeypatch.setattr("lifecycle.archive.run.datetime", OneSecond)
    cache = Path(caches()[target].host_path)
    for n in range(6):
        (cache / f"late-{n}.so").write_bytes(os.urandom(64))
        archived = cli(archive_project, "archive", target, "--with-content")
        assert archived.exit_code == 0, archived.output
    done = cli(archive_project, "teardown", target, "--yes")
    assert done.exit_code == 0, done.output
    assert gone(caches()[target])

    restored = cli(archive_project, "restore", target)
    assert restored.exit_code == 0, restored.output
    held = sorted(p.name for p in cache.iterdir())
    assert all(f"late-{n}.so" in held for n in range(6)), held


def test_content_asked_for_archives_again_a_cache_archived_without_it(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", *ids).exit_code == 0
    tree = {i: caches()[i].tree_digest for i in ids}

    done = cli(archive_project, "teardown", "--archive", "--with-content", "--yes", "--json")
    assert done.exit_code == 0, done.output
    for cache_id in ids:
        decision = plan_of(done)[cache_id]
        assert decision["action"] == "archive, then remove", decision
        assert "its files are not in the archive" in decision["why"][0]
        document = record(s3_client, s3_bucket, cache_id)
        assert document is not None and document["with_content"]
        assert gone(caches()[cache_id])
    for cache_id in ids:
        restored = cli(archive_project, "restore", cache_id, "--json")
        assert restored.exit_code == 0, restored.output
        assert json.loads(restored.stdout)["tree_digest"] == tree[cache_id]


def test_a_boot_that_takes_a_cache_after_the_plan_keeps_it(archive_project: Path) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", "--all").exit_code == 0
    # The teardown plans to remove every cache, then waits before touching any.
    teardown = start(
        archive_project, "teardown", "--yes", env={"LIFECYCLE_TEST_DELAY": "teardown-planned=10"}
    )
    try:
        _wait_for_plan(teardown)
        warm = boot(archive_project)  # takes the archived caches while the teardown waits
        assert cache_ids(warm) == ids and {u["mode"] for u in warm["caches"]} == {"warm"}
        out, err = teardown.communicate(timeout=120)
    finally:
        teardown.kill()
    assert teardown.returncode == 1, (out, err)  # planned removals refused at their moment
    for cache_id in ids:
        # Refused because the boot holds it still, or because it used it since the record.
        refusal = next(line for line in out.splitlines() if line.startswith(f"kept {cache_id}:"))
        assert (
            f"booted since archived: {warm['id']} has no record there" in refusal
            or "a boot holds it" in refusal
        ), out
        assert Path(caches()[cache_id].host_path).is_dir()
        assert [s.step for s in journal(cache_id)] == ["intent", "refused"]


def _wait_for_plan(teardown: Any) -> None:
    """Read the teardown's stdout up to its plan's last line ('to remove: …')."""
    assert teardown.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = teardown.stdout.readline()
        if line.startswith("to remove:"):
            return
        assert line, f"teardown ended before its plan: {teardown.stderr.read()}"
    raise AssertionError("no plan within 60 s")


def test_a_teardown_holding_a_cache_makes_a_warm_boot_start_that_one_cold(
    archive_project: Path,
) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", "--all").exit_code == 0
    # The teardown holds the first cache's lease (verified, not yet moved) for 6 s.
    teardown = start(
        archive_project, "teardown", "--yes", env={"LIFECYCLE_TEST_DELAY": "after-verified=6"}
    )
    try:
        held = _wait_for_step(ids, "verified")
        warm = boot(archive_project)
        out, err = teardown.communicate(timeout=120)
    finally:
        teardown.kill()
    others = [i for i in ids if i != held]
    modes = {u["cache_id"]: u["mode"] for u in warm["caches"]}
    assert held not in modes  # never mounted: the teardown held it, then its dir went
    assert sorted(m for c, m in modes.items() if c not in ids) == ["cold"]
    assert all(modes[i] == "warm" for i in others)
    assert teardown.returncode == 1, (out, err)  # the other three: taken by the boot
    now = caches()
    assert now[held].state == "torn-down" and gone(now[held])
    for cache_id in others:
        assert now[cache_id].state == "live" and Path(now[cache_id].host_path).is_dir()
    listed = json.loads(cli(archive_project, "caches", "--json").stdout)["caches"]
    assert not [c for c in listed if c["state"] == "live" and not Path(c["host_path"]).is_dir()]
    final = cli(archive_project, "teardown", "--archive", "--yes")
    assert final.exit_code == 0, final.output
    assert all(c.state == "torn-down" for c in caches().values())


def test_a_file_written_between_the_check_and_the_removal_keeps_its_cache(
    archive_project: Path,
) -> None:
    """The archive was verified against the tree as it was; a writer outside lifecycle (an
    engine run by hand with the dir mounted, a JIT pointed at it) adds a file before the dir
    goes: that file was removed, in no archive. The dir is checked again where it was moved,
    and goes back when it is not the tree verified."""
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", "--all", "--with-content").exit_code == 0
    teardown = start(
        archive_project, "teardown", ids[0], "--yes",
        env={"LIFECYCLE_TEST_DELAY": "after-verified=4"},
    )  # fmt: skip
    try:
        _wait_for_step(ids[:1], "verified")
        late = Path(caches()[ids[0]].host_path) / "compiled-late.so"
        late.write_bytes(b"a kernel no archive holds")
        out, err = teardown.communicate(timeout=120)
    finally:
        teardown.kill()
    assert teardown.returncode == 1, (out, err)
    assert "changed between its check and its removal" in out, (out, err)
    assert late.read_bytes() == b"a kernel no archive holds"
    assert caches()[ids[0]].state == "archived"
    assert [s.step for s in journal(ids[0])][-1] == "refused"
    # Archived again, with the new file, it goes.
    assert cli(archive_project, "archive", ids[0], "--with-content").exit_code == 0
    assert cli(archive_project, "teardown", ids[0], "--yes").exit_code == 0
    assert gone(caches()[ids[0]])


def test_a_cache_dir_moved_to_another_disk_and_linked_back_is_kept_as_it_is(
    archive_project: Path, tmp_path: Path
) -> None:
    """A full disk: the cache's dir moved elsewhere, a symbolic link left in its place. The
    teardown renamed the link into the trash, then could not remove it, every run after saying
    "the next teardown finishes it", the cache shown missing. Kept, named, nothing
    moved; a link an earlier teardown left in the trash goes back in place."""
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", "--all", "--with-content").exit_code == 0
    host = Path(caches()[ids[0]].host_path)
    moved = tmp_path / "big-disk" / host.name
    moved.parent.mkdir()
    shutil.move(host, moved)
    host.symlink_to(moved)
    files = sorted(p.relative_to(moved) for p in moved.rglob("*"))
    for _ in range(2):
        kept = cli(archive_project, "teardown", ids[0], "--yes")
        assert kept.exit_code == 1, kept.output
        assert f"{host} is a symbolic link to {moved}" in kept.output, kept.output
        assert host.is_symlink() and sorted(p.relative_to(moved) for p in moved.rglob("*")) == files
        assert caches()[ids[0]].state == "archived"
    # As an earlier teardown left it: the link in the trash, the dir missing from its place.
    trash = host.parent / f".trash-{host.name}"
    host.rename(trash)
    again = cli(archive_project, "teardown", ids[0], "--yes")
    assert again.exit_code == 1 and "is a symbolic link" in again.output, again.output
    assert host.is_symlink() and not os.path.lexists(trash)
    assert sorted(p.relative_to(moved) for p in moved.rglob("*")) == files
    host.unlink()
    shutil.move(moved, host)  # moved back: it goes
    assert cli(archive_project, "teardown", ids[0], "--yes").exit_code == 0
    assert gone(caches()[ids[0]])


def test_a_file_teardown_may_not_remove_is_named_with_the_way_out_not_left_to_a_rerun(
    archive_project: Path,
) -> None:
    """An engine runs as its image's user, often root: a user in the docker group may not
    remove what it wrote. Every teardown after said "the next teardown finishes it", which
    none could. (Here root is held back by the immutable attribute instead.) The way out is
    named; once the trash is removed by hand, the next teardown records the cache gone."""
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", "--all", "--with-content").exit_code == 0
    host = Path(caches()[ids[0]].host_path)
    pinned = next(p for p in sorted(host.rglob("*")) if p.is_file())
    if subprocess.run(["chattr", "+i", str(pinned)], capture_output=True).returncode:
        pytest.skip("chattr +i is not supported on this file system")
    trash = host.parent / f".trash-{host.name}"
    try:
        for _ in range(2):
            kept = cli(archive_project, "teardown", ids[0], "--yes")
            assert kept.exit_code == 1, kept.output
            assert f"cannot remove {trash}: Operation not permitted" in kept.output, kept.output
            assert f"remove {trash} as its owner" in kept.output
            assert "the next teardown" not in kept.output
    finally:
        held = trash / pinned.relative_to(host)
        subprocess.run(["chattr", "-i", str(held if held.exists() else pinned)], check=True)
    shutil.rmtree(trash)  # by hand, as its owner would
    assert cli(archive_project, "teardown", ids[0], "--yes").exit_code == 0
    assert gone(caches()[ids[0]])


def _wait_for_step(cache_ids: list[str], step: str) -> str:
    """The first of the caches whose journal reaches `step`."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for cache_id in cache_ids:
            if any(s.step == step for s in journal(cache_id)):
                return cache_id
        time.sleep(0.05)
    raise AssertionError(f"none of {cache_ids} reached {step}")


def test_a_dir_gone_behind_the_ledgers_back_shows_missing_and_teardown_settles_it(
    archive_project: Path,
) -> None:
    archived = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", *archived).exit_code == 0
    lost = cache_ids(boot(archive_project, "--cold"))
    shutil.rmtree(caches()[archived[0]].host_path)
    shutil.rmtree(caches()[lost[0]].host_path)

    listed = {
        c["id"]: c for c in json.loads(cli(archive_project, "caches", "--json").stdout)["caches"]
    }
    assert listed[archived[0]]["state"] == "missing" and listed[lost[0]]["state"] == "missing"
    assert listed[archived[1]]["state"] == "archived" and listed[lost[1]]["state"] == "live"

    settled = cli(archive_project, "teardown", "--yes")
    assert settled.exit_code == 0, settled.output
    assert f"recorded {archived[0]} as torn-down: its dir was gone" in settled.stdout
    assert f"recorded {lost[0]} as missing: its dir was gone" in settled.stdout
    now = caches()
    assert now[archived[0]].state == "torn-down" and now[lost[0]].state == "missing"
    again = cli(archive_project, "teardown", "--archive", "--yes")
    assert again.exit_code == 0, again.output
    assert {c.state for i, c in caches().items() if i != lost[0]} == {"torn-down"}


def test_a_cache_whose_last_boot_failed_is_never_reused_warm(archive_project: Path) -> None:
    good = cache_ids(boot(archive_project, "--cold"))
    failed = cli(archive_project, "boot", "demo/0.2", "--profile", "fails", "--json")
    assert failed.exit_code == 1
    report = json.loads(failed.stdout)
    assert report["outcome"] == "failed" and {u["mode"] for u in report["caches"]} == {"warm"}
    # The good caches were reused by the failed boot: they may now be half built.
    after = boot(archive_project)
    assert {u["mode"] for u in after["caches"]} == {"cold"}
    assert not set(cache_ids(after)) & set(good)
    again = boot(archive_project)  # the fresh ones ended ok: warm from them
    assert cache_ids(again) == cache_ids(after)
    assert {u["mode"] for u in again["caches"]} == {"warm"}


# Whatever comes next settles it: a teardown with nothing to remove (its caches are not
# archived) and an archive (a night's end is one) as much as a teardown that archives first.
@pytest.mark.parametrize(
    "first", [("teardown", "--yes"), ("archive", "--all"), ("teardown", "--archive", "--yes")]
)
def test_a_boot_killed_before_its_outcome_is_settled_and_its_caches_let_go(
    archive_project: Path, first: tuple[str, ...]
) -> None:
    killed = start(
        archive_project,
        "boot",
        "demo/0.2",
        "--cold",
        env={"LIFECYCLE_TEST_DELAY": "boot-recorded=60"},
    )
    try:
        deadline = time.monotonic() + 60
        while not any(b.outcome == "running" for b in boots().values()):
            assert time.monotonic() < deadline and killed.poll() is None
            time.sleep(0.05)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        killed.kill()
    [dead] = boots().values()
    held = [c for c in caches().values() if c.in_use_by == dead.id]
    assert len(held) == 4
    done = cli(archive_project, *first)
    assert done.exit_code == 0, done.output
    settled = boots()[dead.id]
    assert settled.outcome == "interrupted" and "ended without recording" in str(settled.error)
    assert all(c.in_use_by is None for c in caches().values())
    done = cli(archive_project, "teardown", "--archive", "--yes")
    assert done.exit_code == 0, done.output
    assert all(c.state == "torn-down" for c in caches().values())


def test_a_sigkilled_archive_leaves_no_process_and_frees_the_teardown_lock(
    archive_project: Path,
) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    many = Path(caches()[ids[0]].host_path) / "many"
    many.mkdir()
    for n in range(800):
        (many / f"k{n}.bin").write_bytes(os.urandom(64) + n.to_bytes(4, "big"))
    teardown = start(archive_project, "teardown", "--archive", "--with-content", "--yes")
    try:
        time.sleep(1.5)  # into the scan or the upload
        teardown.send_signal(signal.SIGKILL)
        teardown.wait(timeout=30)
        assert not [pid for pid in _children(teardown.pid) if _alive(pid)]
    finally:
        teardown.kill()
    again = process(archive_project, "teardown", "--archive", "--with-content", "--yes")
    assert again.returncode == 0, again.stderr  # not "another teardown is running"
    assert all(c.state == "torn-down" for c in caches().values())
    assert not list((home() / "caches").glob(".trash-*"))


def _children(pid: int) -> list[int]:
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _parent(int(entry.name)) == pid
    ]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
