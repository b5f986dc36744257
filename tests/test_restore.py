"""`lifecycle restore` against a real S3 server: round trip to a warm boot, on this host and on
another, links and FIFOs, and the refusals."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from lifecycle.fingerprint import scan
from lifecycle.home import Home
from lifecycle.leases import try_lease
from lifecycle.ledger import Ledger
from tests.archive_support import newest_version
from tests.services import ArchiveTarget, boot_demo, run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]

HIT = "Directly load the compiled graph(s) for dynamic shape from the cache"


def _home() -> Path:
    return Path(os.environ["LIFECYCLE_HOME"])


def _caches(project: Path) -> dict[str, dict[str, Any]]:
    rows = json.loads(run_lifecycle(project, "caches", "--json").stdout)["caches"]
    return {row["id"]: row for row in rows}


def _archive(project: Path, target: ArchiveTarget, *args: str) -> None:
    result = run_lifecycle(project, "archive", "--to", target.url, *args, env=target.env)
    assert result.exit_code == 0, result.output


def _restore(project: Path, target: ArchiveTarget, cache_id: str) -> dict[str, Any]:
    result = run_lifecycle(
        project, "restore", cache_id, "--from", target.url, "--json", env=target.env
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _tear_down(project: Path, cache_ids: list[str]) -> dict[str, str]:
    """What teardown leaves: the dirs gone, the caches marked torn-down. Their tree digests."""
    caches = _caches(project)
    ledger = Ledger.open(_home())
    with ledger.transaction() as conn:
        for cache_id in cache_ids:
            shutil.rmtree(caches[cache_id]["host_path"])
            conn.execute("UPDATE caches SET state = 'torn-down' WHERE id = ?", (cache_id,))
    ledger.close()
    return {cache_id: caches[cache_id]["tree_digest"] for cache_id in cache_ids}


def test_round_trip_then_a_warm_boot_hits(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    cold = boot_demo(demo_project)
    cache_ids = [u["cache_id"] for u in cold["caches"]]
    _archive(demo_project, archive_target, "--all", "--with-content")
    digests = _tear_down(demo_project, cache_ids)
    # What a restore SIGKILLed half way leaves beside the dir: the next one takes it away.
    killed = _home() / "caches" / f".{cache_ids[0]}.restore-k1ll3d" / "half"
    killed.mkdir(parents=True)
    (killed / "part.so").write_bytes(b"\0" * 100)
    killed.chmod(0o500)
    held = try_lease(Home(_home()), cache_ids[1])  # a boot, a teardown or a restore has it
    assert held is not None
    with held:
        busy = run_lifecycle(
            demo_project, "restore", cache_ids[1], "--from", archive_target.url,
            env=archive_target.env,
        )  # fmt: skip
    assert busy.exit_code == 1 and "a boot, a teardown or a restore holds it now" in busy.stderr

    for cache_id in cache_ids:
        report = _restore(demo_project, archive_target, cache_id)
        assert report["tree_digest"] == digests[cache_id]
        assert report["known"] and not report["already_present"]
    caches = _caches(demo_project)
    assert {caches[c]["state"] for c in cache_ids} == {"live"}
    assert {caches[c]["tree_digest"] for c in cache_ids} == set(digests.values())
    assert not [p for p in (_home() / "caches").iterdir() if p.name.startswith(".")]  # no temp

    warm = boot_demo(demo_project)
    assert {u["mode"] for u in warm["caches"]} == {"warm"}
    assert sorted(u["cache_id"] for u in warm["caches"]) == sorted(cache_ids)
    log = Path(warm["log_path"]).read_text()
    assert HIT in log and "Compiling a graph" not in log and "Building JIT module" not in log
    assert sum(u["files_added"] for u in warm["caches"]) == 0

    again = _restore(demo_project, archive_target, cache_ids[0])  # in place already: no-op
    assert again["already_present"]


def test_restore_on_another_host_makes_the_cache_row(
    demo_project: Path, archive_target: ArchiveTarget, tmp_path: Path, monkeypatch: Any
) -> None:
    cold = boot_demo(demo_project)
    cache_ids = [u["cache_id"] for u in cold["caches"]]
    _archive(demo_project, archive_target, "--all", "--with-content")
    monkeypatch.setenv("LIFECYCLE_HOME", str(tmp_path / "other-host"))  # an empty ledger

    for cache_id in cache_ids:
        report = _restore(demo_project, archive_target, cache_id)
        assert not report["known"]
        assert report["host_path"] == str(tmp_path / "other-host" / "caches" / cache_id)
    caches = _caches(demo_project)
    assert sorted(caches) == sorted(cache_ids)
    assert {c["state"] for c in caches.values()} == {"live"}
    # Same image (same dockerd), same cache keys: the first boot here starts warm.
    warm = boot_demo(demo_project)
    assert {u["mode"] for u in warm["caches"]} == {"warm"}
    assert HIT in Path(warm["log_path"]).read_text()

    # Archiving it again from here: the warm boot changed nothing, so the version this host
    # restored is its archive still (nothing rewritten); the boot gets its own record, and the
    # cache's index lists the first host's boot and this one.
    before = archive_target.objects()
    _archive(demo_project, archive_target, cache_ids[0])
    prefix = f"{archive_target.prefix}/caches/{cache_ids[0]}"
    appeared = set(archive_target.objects()) - set(before)
    assert not [key for key in appeared if key.startswith(f"{prefix}/versions/")]
    assert [k for k in appeared if k.startswith(f"{archive_target.prefix}/boots/")]
    booted = {key.rsplit("/", 1)[1] for key in archive_target.objects() if "/boots/" in key}
    assert {cold["id"], warm["id"]} <= booted


def test_links_and_fifos_are_never_followed_and_come_back_as_they_were(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    boot = boot_demo(demo_project)
    cache_id = next(u["cache_id"] for u in boot["caches"] if u["cache_id"].startswith("triton"))
    root = Path(_caches(demo_project)[cache_id]["host_path"])
    (root / "etc-link").symlink_to("/etc")
    (root / "passwd-link").symlink_to("/etc/passwd")
    os.mkfifo(root / "a-fifo", 0o640)
    _archive(demo_project, archive_target, cache_id, "--with-content")

    etc = [Path("/etc/passwd"), Path("/etc/hostname"), Path("/etc/hosts")]
    outside = {hashlib.sha256(p.read_bytes()).hexdigest() for p in etc if p.is_file()}
    keys = archive_target.objects()
    assert not [key for key in keys if key.rsplit("/", 1)[-1] in outside]
    record = newest_version(
        archive_target.client, archive_target.bucket, archive_target.prefix, cache_id
    )
    assert record is not None
    assert not {b["sha256"] for b in record["blobs"]} & outside

    [digest] = _tear_down(demo_project, [cache_id]).values()
    report = _restore(demo_project, archive_target, cache_id)
    assert report["tree_digest"] == digest
    assert (root / "etc-link").is_symlink() and str((root / "etc-link").readlink()) == "/etc"
    assert str((root / "passwd-link").readlink()) == "/etc/passwd"
    fifo = (root / "a-fifo").lstat()
    assert stat.S_ISFIFO(fifo.st_mode) and stat.S_IMODE(fifo.st_mode) == 0o640


def test_refusals(demo_project: Path, archive_target: ArchiveTarget) -> None:
    boot = boot_demo(demo_project)
    evidence_only, with_files = (u["cache_id"] for u in boot["caches"][:2])
    _archive(demo_project, archive_target, evidence_only)
    _archive(demo_project, archive_target, with_files, "--with-content")
    url = archive_target.url

    result = run_lifecycle(demo_project, "restore", evidence_only, "--from", url)
    assert result.exit_code == 1
    assert "archived without --with-content" in result.stderr

    root = Path(_caches(demo_project)[with_files]["host_path"])
    (root / "changed-since").write_text("not in the archive\n")
    result = run_lifecycle(demo_project, "restore", with_files, "--from", url)
    assert result.exit_code == 1 and "exists and holds another tree" in result.stderr
    assert (root / "changed-since").is_file()  # left as it was

    result = run_lifecycle(demo_project, "restore", "vllm-000000000000", "--from", url)
    assert result.exit_code == 1
    assert f"no cache vllm-000000000000 archived at {url}" in result.stderr


def test_no_mode_a_record_asks_for_is_dangerous_after_restore(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    report = boot_demo(demo_project, "--cold")
    cache_id = sorted(u["cache_id"] for u in report["caches"])[0]
    root = Path(_caches(demo_project)[cache_id]["host_path"])
    (root / "tool").write_bytes(b"#!/bin/sh\n")
    (root / "tool").chmod(0o4755)  # setuid, as a crafted record would ask for
    (root / "open").mkdir()
    (root / "open").chmod(0o1777)  # sticky and world-writable
    (root / "shared.so").write_bytes(b"\x7fELF")
    (root / "shared.so").chmod(0o2666)  # setgid, world-writable
    _archive(demo_project, archive_target, cache_id, "--with-content")
    _tear_down(demo_project, [cache_id])

    restored = _restore(demo_project, archive_target, cache_id)

    assert sorted(restored["modes_masked"]) == ["open", "shared.so", "tool"]
    assert stat.S_IMODE((root / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "open").stat().st_mode) == 0o775
    assert stat.S_IMODE((root / "shared.so").stat().st_mode) == 0o664
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        assert info.st_uid == os.getuid() and info.st_gid == os.getgid(), path
        if not stat.S_ISLNK(info.st_mode):
            assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o002), path


def test_into_a_new_dir_a_second_tree_stands_beside_the_live_one(
    demo_project: Path, archive_target: ArchiveTarget, tmp_path: Path
) -> None:
    cold = boot_demo(demo_project)
    cache_id = sorted(u["cache_id"] for u in cold["caches"])[0]
    _archive(demo_project, archive_target, cache_id, "--with-content")
    first = _caches(demo_project)[cache_id]["tree_digest"]
    live = Path(_caches(demo_project)[cache_id]["host_path"])
    (live / "grown-later.bin").write_bytes(os.urandom(4096))
    _archive(demo_project, archive_target, cache_id, "--with-content")
    row = _caches(demo_project)[cache_id]
    assert row["tree_digest"] != first

    args = ("restore", f"{cache_id}@{first[:12]}", "--from", archive_target.url)
    in_place = run_lifecycle(demo_project, *args, env=archive_target.env)
    assert in_place.exit_code == 1 and "holds another tree" in in_place.stderr  # the live one
    beside = tmp_path / "first-tree"
    done = run_lifecycle(demo_project, *args, "--into", str(beside), "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["beside"] and report["host_path"] == str(beside)
    assert report["tree_digest"] == first
    assert scan(beside).tree_digest == first and not (beside / "grown-later.bin").exists()
    assert scan(live).tree_digest == row["tree_digest"]  # the live cache as it was
    now = _caches(demo_project)[cache_id]
    assert {**now, "age_s": 0} == {**row, "age_s": 0}  # and its row
    again = run_lifecycle(demo_project, *args, "--into", str(beside))
    assert again.exit_code == 2 and f"{beside}: File exists" in again.stderr


def test_a_cache_changed_after_a_restore_of_an_older_version_grew_from_that_version(
    archive_project: Path,
) -> None:
    """The parent of a version is the tree it grew from: after `restore CACHE@OLDER` on the
    host that archived a newer tree since, the next version named the newer tree (the newest
    version row this host knew), not the restored one."""
    from lifecycle.ledger.archives import versions_of
    from tests.trust_support import boot, cache_ids, caches, cli

    cache_id = cache_ids(boot(archive_project, "--cold"))[0]
    assert cli(archive_project, "archive", "--all", "--with-content").exit_code == 0
    older = caches()[cache_id].tree_digest
    boot(archive_project, "--profile", "grows")
    gone = cli(archive_project, "teardown", "--archive", "--with-content", "--yes")
    assert gone.exit_code == 0, gone.output
    restored = cli(archive_project, "restore", f"{cache_id}@{older}")
    assert restored.exit_code == 0, restored.output
    boot(archive_project, "--profile", "grows")  # grows the restored tree into a third one
    assert cli(archive_project, "archive", cache_id).exit_code == 0
    grown = caches()[cache_id].tree_digest
    ledger = Ledger.open(_home())
    try:
        parents = {row.tree_digest: row.parent for row in versions_of(ledger, cache_id)}
    finally:
        ledger.close()
    assert grown not in (older, None) and parents[grown] == older, parents
