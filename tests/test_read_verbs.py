"""The verbs that only read (`boots`, `caches`, `status`, `why`, `audit`, `plan`, …) read the
ledger beside a writer, read a kept record only up to a record's bound, and change nothing in
the home, on a home made by real builds and boots."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.services import boot_demo

pytestmark = [pytest.mark.docker, pytest.mark.s3]

REPO = Path(__file__).resolve().parent.parent
READ_SECONDS = 10.0  # a read verb answers in about one; the ledger's busy wait is 30 s

# A writer mid-transaction as lifecycle's are: the writers' flock, then SQLite's write lock.
_WRITER = """
import fcntl, sqlite3, sys
home = sys.argv[1]
lock = open(home + "/ledger.lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)
conn = sqlite3.connect(home + "/ledger.sqlite3", isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
sys.stdin.read()
"""


@contextmanager
def _writer_holding(home: Path) -> Iterator[None]:
    """Another process holding the ledger's write locks for the block."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "holding\n"
        yield
    finally:
        writer.kill()
        writer.wait()


def _lifecycle(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`lifecycle ARGS…` as a process of its own (the writer's locks are other processes')."""
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), *args],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=READ_SECONDS * 2,
    )


def _home_files(home: Path) -> dict[str, str]:
    """Every file under the home with its sha256 (the ledger's bytes too)."""
    return {
        str(path.relative_to(home)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(home.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def test_a_read_verb_reads_beside_a_writer_holding_the_ledger(project: Path) -> None:
    boot_demo(project)  # cold; `why` explains the warm one against it
    boot = boot_demo(project)
    home = Path(os.environ["LIFECYCLE_HOME"])
    with _writer_holding(home):
        for verb in (
            ["boots"],
            ["caches"],
            ["why", boot["id"]],
            ["audit", "cache", boot["caches"][0]["cache_id"]],
        ):
            try:
                read = _lifecycle(project, *verb, "--json")
            except subprocess.TimeoutExpired:
                pytest.fail(f"`{' '.join(verb)}` waited for the writer")
            assert read.returncode == 0, read.stderr
            assert json.loads(read.stdout), verb


def test_a_read_verb_writes_no_file_of_the_home(project: Path) -> None:
    boot_demo(project)  # cold; `why` explains the warm one against it
    boot = boot_demo(project)
    home = Path(os.environ["LIFECYCLE_HOME"])
    (home / "ledger.lock").unlink()  # a home copied from another host without it
    before = _home_files(home)
    for verb in (["boots"], ["caches"], ["status"], ["plan"], ["why", boot["id"]]):
        read = _lifecycle(project, *verb, "--json")
        assert read.returncode == 0, read.stderr
        assert _home_files(home) == before, verb


def test_audit_names_a_snapshot_grown_past_a_records_bound_without_reading_it(
    project: Path,
) -> None:
    boot = boot_demo(project)
    added = _lifecycle(project, "result", "add", boot["id"], "--name", "smoke", "--status", "pass")
    assert added.returncode == 0, added.stderr
    result = added.stdout.split()[1]
    home = Path(os.environ["LIFECYCLE_HOME"])
    snapshot = home / "evidence" / "manifests" / f"{boot['manifest_digest']}.json"
    with snapshot.open("r+b") as grown:
        grown.truncate(2 * 2**30)  # sparse: no disk, 2 GiB to whoever reads it whole
    started = time.monotonic()
    audit = _lifecycle(project, "audit", "result", result, "--json")
    assert time.monotonic() - started < READ_SECONDS / 2, "the snapshot was read whole"
    assert audit.returncode == 1 and audit.stdout == "", audit.stdout
    assert (
        audit.stderr == f"{snapshot}: damaged snapshot: larger than 16 MiB; not a record of ours\n"
    )


def test_audit_hashes_a_huge_boot_log_without_holding_it(project: Path, tmp_path: Path) -> None:
    """A chatty engine's log runs to gigabytes; `audit result` names it by its sha256, which it
    read whole into memory to take (2 GiB: 2.1 GB resident)."""
    boot = boot_demo(project)
    added = _lifecycle(project, "result", "add", boot["id"], "--name", "smoke", "--status", "pass")
    assert added.returncode == 0, added.stderr
    result = added.stdout.split()[1]
    log = Path(boot["log_path"])
    with log.open("r+b") as grown:
        grown.truncate(2 * 2**30)  # sparse: no disk
    peak = tmp_path / "peak"
    audit = _lifecycle_measured(project, peak, "audit", "result", result, "--json")
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["boot"]["log"]["size"] == 2 * 2**30
    assert int(peak.read_text()) < 400 * 1024  # KiB: the interpreter and the SDKs, no log


def _lifecycle_measured(project: Path, peak: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`_lifecycle`, its peak resident size (KiB) written to `peak` as it exits."""
    program = (
        "import atexit, resource, sys\n"
        f"atexit.register(lambda: open({str(peak)!r}, 'w').write("
        "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))\n"
        "from lifecycle.cli import main\n"
        "sys.argv[0] = 'lifecycle'\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program, "--manifests", str(project / "manifests"), *args],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_in_a_home_where_nothing_is_recorded_makes_no_ledger(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`status` was the one listing that opened the ledger to write: an empty home (a new host,
    a typo in LIFECYCLE_HOME) got a ledger and its lock."""
    home = tmp_path / "new-host"
    home.mkdir()
    monkeypatch.setenv("LIFECYCLE_HOME", str(home))
    before = sorted(home.iterdir())
    for args in (["status"], ["status", "--json"]):
        read = _lifecycle(project, *args)
        assert read.returncode == 0, read.stderr
        assert "nothing is recorded on this host" in read.stderr
    assert json.loads(read.stdout)["policy_problem"] == "nothing is recorded on this host yet"
    assert sorted(home.iterdir()) == before


def test_a_plan_or_dry_run_in_a_home_where_nothing_is_recorded_makes_no_ledger(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan`, `gc --remote --dry-run` and `bake` (refused: nothing to bake) opened the ledger
    to write, so a new host's home, or one a typo in LIFECYCLE_HOME named, got one."""
    for home in (tmp_path / "new-host", tmp_path / "not-there"):
        if home.name == "new-host":
            home.mkdir()
        monkeypatch.setenv("LIFECYCLE_HOME", str(home))
        for args, answer in (
            (["plan"], 0),
            (["gc", "--remote", "--dry-run"], 0),
            (["bake", "demo/0.2", "--dry-run"], 1),
            (["bake", "demo/0.2"], 1),
        ):
            read = _lifecycle(project, *args, "--json")
            assert read.returncode == answer, (args, read.stderr)
            assert json.loads(read.stdout), args
            # gc keeps a copy of each archive record it read (records/): the one file it makes.
            made = sorted(p.name for p in home.iterdir()) if home.exists() else []
            assert made in ([], ["records"]), (args, made)
            assert "nothing is recorded on this host" in read.stderr, args
