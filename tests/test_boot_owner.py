"""Caches an engine wrote as another user: given back at the end of the boot, or, written
before, named as unreadable with the way out, never called different.

lifecycle runs as a user in the docker group, the engine as root. The user is played by root
in a user namespace of its own (`unshare --user --map-root-user`), where files of an unmapped
uid are another user's: readable as their modes say, no more. The `private` profile's engine
leaves its caches so: JIT files 0600 and dirs 0700 (a mkstemp then rename does), all of an
unmapped uid's.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from docker.errors import NotFound

from lifecycle.boot.engine import BOOT_LABEL
from lifecycle.boot.owner import held_by_another
from lifecycle.fingerprint import Fingerprint
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    BootRecord,
    CacheRecord,
    CacheUse,
    all_boots,
    all_caches,
    cache_uses,
)
from tests.services import boot_demo, demo_copy, run_lifecycle

OTHER = 12345  # no uid of the namespace: another user's
PRIVATE = (
    "  private:\n    command:\n      - sh\n      - -c\n      - |\n"
    '        python3 -m demollm.serve "$@"; rc=$?\n'
    "        for d in /var/cache/lifecycle/*; do\n"
    "          find \"$d\" -mindepth 1 -type f -name '*.json' -exec chmod 600 {} +\n"
    '          find "$d" -mindepth 1 -type d -name generated -exec chmod 700 {} +\n'
    f'          find "$d" -mindepth 1 -exec chown -h {OTHER}:{OTHER} {{}} +\n'
    "        done\n"
    "        exit $rc\n"
    "      - sh\n    network: none\n"
)


@pytest.fixture
def private_project(
    tmp_path: Path, demo_images: None, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The demo project with the `private` profile, demo/0.2 built, archiving to the bucket."""
    if subprocess.run(["unshare", "--user", "--map-root-user", "true"]).returncode != 0:
        pytest.skip("no user namespaces here: cannot run lifecycle as another user")
    root = demo_copy(tmp_path / "project")
    child = root / "manifests/demo/0.2/manifest.yaml"
    child.write_text(child.read_text() + "profiles:\n" + PRIVATE)
    assert run_lifecycle(root, "build", "demo/0.2").exit_code == 0
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/test")
    monkeypatch.chdir(root)
    return root


def _as_another(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`lifecycle ARGS…` as a user who is not the engine's."""
    argv = [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), *args]
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", *argv],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _caches() -> dict[str, CacheRecord]:
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        return {c.cache_name: c for c in all_caches(ledger)}
    finally:
        ledger.close()


def test_held_by_another_stops_at_the_first_entry_not_ours(tmp_path: Path) -> None:
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "a/b/kernel.so").write_bytes(b"\x7fELF")
    (tmp_path / "link").symlink_to("/nowhere")
    assert not held_by_another(tmp_path, os.getuid())
    os.lchown(tmp_path / "a/b/kernel.so", OTHER, OTHER)
    assert held_by_another(tmp_path, os.getuid())


def test_only_root_outside_a_user_namespace_skips_the_walk() -> None:
    """Real root reads and removes whatever an engine wrote: no cache is walked each boot to
    find another user's entries. Root in a user namespace of its own is another user."""
    code = "from lifecycle.boot.owner import _reads_everything as r; print(r())"
    ask = [sys.executable, "-c", code]
    real_root = Path("/proc/self/uid_map").read_text().split() == ["0", "0", "4294967295"]
    plain = subprocess.run(ask, capture_output=True, text=True, check=True).stdout.strip()
    assert plain == str(os.getuid() == 0 and real_root)
    if subprocess.run(["unshare", "--user", "--map-root-user", "true"]).returncode == 0:
        inside = ["unshare", "--user", "--map-root-user", *ask]
        assert subprocess.run(inside, capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.docker
@pytest.mark.s3
def test_what_the_engine_wrote_as_another_user_is_given_back_and_every_verb_reads_it(
    private_project: Path,
) -> None:
    """A boot as a user in the docker group of an engine running as root failed at its own
    end (`failed (exit 0)`: the scan could not read a 0600 file), its caches not reusable,
    not archivable. dockerd, which ran the engine, now gives what it wrote to lifecycle's
    user once the engine has exited, modes untouched."""
    cold = _as_another(private_project, "boot", "demo/0.2", "--profile", "private", "--cold")
    assert cold.returncode == 0, cold.stdout + cold.stderr
    assert ": ok (exit 0)" in cold.stdout, cold.stdout
    caches = _caches()
    assert len(caches) == 4
    vllm = caches["vllm"]
    scanned = Fingerprint.from_json(Path(vllm.scan_path or "").read_text())
    private = [e for e in scanned.entries if e.path.endswith(".json")]
    assert private and all(e.mode == 0o600 for e in private)  # as the engine wrote them
    shut = Path(caches["flashinfer"].host_path).rglob("generated")
    assert [stat.S_IMODE(p.stat().st_mode) for p in shut] == [0o700]

    warm = _as_another(private_project, "boot", "demo/0.2", "--profile", "private", "--json")
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert {c["mode"] for c in json.loads(warm.stdout)["caches"]} == {"warm"}
    archived = _as_another(private_project, "archive", "--all", "--with-content")
    assert archived.returncode == 0, archived.stderr
    for cache in caches.values():
        verified = _as_another(private_project, "verify", cache.id)
        assert verified.returncode == 0, verified.stdout
    done = _as_another(private_project, "teardown", "--yes")
    assert done.returncode == 0, done.stderr
    assert "removed 4 caches" in done.stdout, done.stdout


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_file_lifecycle_may_not_read_is_named_with_the_way_out_never_as_a_difference(
    private_project: Path,
) -> None:
    """A cache an engine left another user's before (an older lifecycle, a give-back dockerd
    refused): `verify` said DIFFERS of a file it never read, and each verb said only
    "Permission denied". Now: not read, whose and which mode, and what to do."""
    booted = run_lifecycle(private_project, "boot", "demo/0.2", "--cold")
    assert booted.exit_code == 0, booted.output
    vllm = _caches()["vllm"]
    for path in Path(vllm.host_path).rglob("*"):
        os.lchown(path, OTHER, OTHER)
    shut = next(p for p in Path(vllm.host_path).rglob("*") if p.is_dir())
    shut.chmod(0o700)

    checked = _as_another(private_project, "verify", vllm.id, "--json")
    assert checked.returncode == 1, checked.stderr
    [live] = [c for c in json.loads(checked.stdout)["checked"] if "live cache" in c["subject"]]
    assert live["status"] == "unread", live
    way_out = f"{shut}: cannot read: Permission denied (uid 65534's, mode 0700; lifecycle runs as"
    assert way_out in live["problem"] and "chown -R 0:0" in live["problem"], live
    said = _as_another(private_project, "verify", vllm.id).stdout
    assert "UNREAD" in said and "1 not read" in said and "DIFFERS" not in said, said

    refused = _as_another(private_project, "archive", vllm.id)
    assert refused.returncode == 1, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert way_out in line and "chown -R 0:0" in line, line


@pytest.mark.docker
@pytest.mark.s3
def test_one_cache_archive_cannot_read_keeps_none_of_the_others(private_project: Path) -> None:
    """`archive --all` stopped at the first cache it could not archive: one old unreadable
    cache kept every other from S3 (and so from teardown). It now archives the others, then
    names the one not archived, exit 1."""
    booted = run_lifecycle(private_project, "boot", "demo/0.2", "--cold")
    assert booted.exit_code == 0, booted.output
    caches = _caches()
    # The first `--all` takes (oldest first, then by name): the run must go on past it.
    unread = caches["vllm"]
    for path in Path(unread.host_path).rglob("*"):
        os.lchown(path, OTHER, OTHER)
    next(p for p in Path(unread.host_path).rglob("*") if p.is_dir()).chmod(0o700)

    done = _as_another(private_project, "archive", "--all", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert list(report["failed"]) == [unread.id], report
    assert "Permission denied" in report["failed"][unread.id]
    others = {c.id for c in caches.values()} - {unread.id}
    assert {c["cache_id"] for c in report["caches"]} == others and len(others) == 3
    assert all(c["verified"] for c in report["caches"]), report
    text = _as_another(private_project, "archive", "--all")
    assert text.returncode == 1 and f"NOT archived {unread.id}: " in text.stdout, text.stdout


@pytest.mark.docker
@pytest.mark.s3
def test_a_post_boot_hook_reads_the_caches_as_the_user_it_runs_as(
    private_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caches were given back after the post-boot hooks ran: a hook reading what the
    engine just wrote (a check, a copy) met files it may not read."""
    mark = tmp_path / "read"
    monkeypatch.setenv("READ_MARK", str(mark))
    hooks = private_project / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "read-caches"
    hook.write_text(
        '#!/bin/sh\n[ "$1" = post-boot ] || exit 0\n'
        'find "$LIFECYCLE_HOME/caches" -type f -exec cat {} + >/dev/null 2>"$READ_MARK.err"\n'
        'echo $? > "$READ_MARK"\n'
    )
    hook.chmod(0o755)
    args = ("boot", "demo/0.2", "--profile", "private", "--cold", "--hook", "read-caches")
    booted = _as_another(private_project, *args)
    assert booted.returncode == 0, booted.stdout + booted.stderr
    said = Path(f"{mark}.err").read_text()
    assert mark.read_text().strip() == "0", said


def _boot_as_another_held(project: Path, *args: str) -> subprocess.Popen[str]:
    """`lifecycle boot ARGS…` as a user who is not the engine's, held once its engine ended
    and its caches are given back, before its end-of-boot scan."""
    argv = [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), "boot"]
    env = {**os.environ, "LIFECYCLE_TEST_DELAY": "boot-engine-ended=20"}
    return subprocess.Popen(
        ["unshare", "--user", "--map-root-user", *argv, *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip


def _given_back(docker_client: Any, roots: list[Path]) -> None:
    """Wait until the running boot's engine exited and dockerd gave every cache back."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = [b for b in _boots() if b.outcome == "running"]
        try:
            found = running and docker_client.containers.list(
                all=True, filters={"label": f"{BOOT_LABEL}={running[0].id}"}
            )
        except NotFound:  # listed, then removed before the SDK's inspect of it: ask again
            found = []
        if found and found[0].status == "exited":
            entries = [p for root in roots for p in root.rglob("*")]
            if entries and all(p.lstat().st_uid == os.getuid() for p in entries):
                return
        time.sleep(0.1)
    raise AssertionError("the boot's engine did not end, or its caches were not given back")


def _boots() -> list[BootRecord]:
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        return all_boots(ledger)
    finally:
        ledger.close()


@pytest.mark.docker
@pytest.mark.s3
@pytest.mark.parametrize("touched", [True, False], ids=["read-by-the-scan", "read-for-secrets"])
def test_a_cache_its_boot_could_not_scan_is_not_reusable_for_that_but_the_boot_is_ok(
    private_project: Path, docker_client: Any, touched: bool
) -> None:
    """A file lifecycle could not read at the end-of-boot scan made the boot `failed (exit
    0)` though its engine ended well, and its caches "may hold a half-built file", which
    nobody saw. Now: the boot ends ok, that cache is named not scanned (the file and why) and
    never mounted warm, its tree unknown; the other caches are judged as ever."""
    assert run_lifecycle(private_project, "boot", "demo/0.2", "--cold").exit_code == 0
    caches = _caches()
    roots = [Path(c.host_path) for c in caches.values()]
    vllm = caches["vllm"]
    held = _boot_as_another_held(private_project, "demo/0.2", "--profile", "private")
    try:
        _given_back(docker_client, roots)
        shut = sorted(Path(vllm.host_path).rglob("*.json"))[0]
        os.lchown(shut, OTHER, OTHER)  # as though it were never given back
        if touched:  # changed since its last scan: the scan itself reads it
            os.utime(shut, ns=(time.time_ns(), time.time_ns()))
        out, err = held.communicate(timeout=120)
    finally:
        held.kill()
    assert held.returncode == 0, out + err
    [boot] = [b for b in _boots() if b.profile == "private"]
    assert (boot.outcome, boot.exit_code) == ("ok", 0), boot
    assert f"boot {boot.id}: ok (exit 0)" in out, out
    cannot = f"{shut}: cannot read: Permission denied (uid 65534's, mode 0600"
    assert f"not scanned {vllm.id}: {cannot}" in out, out
    uses = {u.cache_id: u for u in cache_uses_of(boot.id)}
    assert uses[vllm.id].tree_digest_after is None and uses[vllm.id].verdict is None
    others = [c.id for c in caches.values() if c.id != vllm.id]
    assert all(uses[c].verdict and uses[c].tree_digest_after for c in others), uses

    listed = run_lifecycle(private_project, "caches")
    assert f"{vllm.id}: not reusable: its last boot {boot.id} could not scan it ({cannot}" in (
        listed.output
    ), listed.output
    assert "half-built" not in listed.output, listed.output
    assert listed.output.count(": not reusable: ") == 1, listed.output
    rows = {r.split()[0]: r for r in run_lifecycle(private_project, "boots").output.splitlines()}
    assert " ok (1 cache not scanned) " in rows[boot.id], rows
    assert sum("not scanned" in r for r in rows.values()) == 1, rows
    # `why` says why that cache has no verdict, not a bare "-".
    [cold] = [b for b in _boots() if b.profile != "private"]
    told = run_lifecycle(private_project, "why", boot.id, "--against", cold.id)
    said = f"  vllm: warm, not judged: its scan failed ({cannot}"
    assert told.exit_code == 0 and said in told.stdout, told.output
    os.lchown(shut, 0, 0)  # readable again: still not warm, what the boot left is unknown
    again = boot_demo(private_project)
    modes = {c["cache_id"].rsplit("-", 1)[0]: c["mode"] for c in again["caches"]}
    assert modes == {"vllm": "cold", "flashinfer": "warm", "triton": "warm", "inductor": "warm"}
    assert again["passed_over"] == []  # not called changed behind lifecycle's back


def cache_uses_of(boot_id: str) -> list[CacheUse]:
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        return cache_uses(ledger, boot_id=boot_id)
    finally:
        ledger.close()


@pytest.mark.docker
@pytest.mark.s3
def test_a_warm_cache_its_check_cannot_read_is_the_environment_named_with_the_way_out(
    private_project: Path,
) -> None:
    """The re-scan before a cache is mounted warm could not read one of its files: exit 2,
    "bad input", which it was not. Now exit 3, naming the cache, the file and the way out."""
    assert run_lifecycle(private_project, "boot", "demo/0.2", "--cold").exit_code == 0
    vllm = _caches()["vllm"]
    for path in Path(vllm.host_path).rglob("*"):
        os.lchown(path, OTHER, OTHER)
    shut = next(p for p in Path(vllm.host_path).rglob("*") if p.is_dir())
    shut.chmod(0o700)

    refused = _as_another(private_project, "boot", "demo/0.2")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert f"cache {vllm.id} cannot be checked before it is mounted warm: {shut}: cannot" in line
    assert "chown -R 0:0" in line and "`lifecycle boot --cold`" in line, line
