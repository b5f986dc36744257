"""What `restore --into DIR` and `restore --file PATH --output FILE` leave beside DIR and FILE
(in the user's own directory) when SIGKILLed half way, with the real S3 and real processes: the
next restore into the same place removes it and completes; and a partial a live restore is
still writing is never removed by another restore running beside it.

Each restore is held at `restore-fetched` (a file down, nothing in place) by the test-only
delay point, so the kill lands mid-download every time.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lifecycle.faults import DELAY_ENV
from lifecycle.fingerprint import Fingerprint, scan
from tests.trust_support import boot, cache_ids, caches, cli, process, start

pytestmark = [pytest.mark.docker, pytest.mark.s3]
HELD = {DELAY_ENV: "restore-fetched=25"}  # longer than a whole restore beside it takes


@pytest.fixture
def archived(archive_project: Path) -> tuple[str, Fingerprint]:
    """A cache of many files archived with its content: `CACHE@TREE` and its tree as scanned."""
    cache_id = cache_ids(boot(archive_project, "--cold", "--profile", "bulky"))[0]
    done = cli(archive_project, "archive", "--all", "--with-content")
    assert done.exit_code == 0, done.output
    tree = scan(Path(caches()[cache_id].host_path))
    return f"{cache_id}@{tree.tree_digest}", tree


def test_into_killed_mid_download_is_cleaned_by_the_next_restore(
    archive_project: Path, archived: tuple[str, Fingerprint], tmp_path: Path
) -> None:
    version, tree = archived
    into = tmp_path / "user" / "beside"
    into.parent.mkdir()
    killed = start(archive_project, "restore", version, "--into", str(into), env=HELD)
    partial = _partial_being_written(into, killed)
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    assert _left_beside(into) == [partial.name]  # what the kill left in the user's dir

    again = process(archive_project, "restore", version, "--into", str(into))
    assert again.returncode == 0, again.stdout + again.stderr
    assert scan(into).tree_digest == tree.tree_digest
    assert _left_beside(into) == [], "a killed restore's partial outlived the next restore"


def test_file_killed_mid_download_is_cleaned_by_the_next_restore(
    archive_project: Path, archived: tuple[str, Fingerprint], tmp_path: Path
) -> None:
    version, tree = archived
    path, sha256 = _largest_file(tree)
    output = tmp_path / "user" / "one.bin"
    output.parent.mkdir()
    args = ("restore", version, "--file", path, "--output", str(output))
    killed = start(archive_project, *args, env=HELD)
    partial = _partial_being_written(output, killed)
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    assert _left_beside(output) == [partial.name]

    again = process(archive_project, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert hashlib.sha256(output.read_bytes()).hexdigest() == sha256
    assert _left_beside(output) == [], "a killed restore's partial outlived the next restore"


def test_a_live_restores_partial_is_never_removed_by_one_beside_it(
    archive_project: Path, archived: tuple[str, Fingerprint], tmp_path: Path
) -> None:
    version, tree = archived
    path, sha256 = _largest_file(tree)
    user = tmp_path / "user"
    user.mkdir()
    into, output = user / "beside", user / "one.bin"
    for args, place, code in (
        (("--into", str(into)), into, 1),
        (("--file", path, "--output", str(output)), output, 2),
    ):
        first = start(archive_project, "restore", version, *args, env=HELD)
        partial = _partial_being_written(place, first)
        assert f"-{first.pid}@" in partial.name  # named after its writer
        second = process(archive_project, "restore", version, *args)
        assert second.returncode == 0, second.stdout + second.stderr
        assert partial.exists(), f"{place.name}: the live restore's partial was removed"
        # The first wakes to find its place taken: it refuses, replaces nothing, and takes
        # its own partial away.
        out, err = first.communicate(timeout=120)
        assert first.returncode == code and f"{place}: File exists" in err, (out, err)
        assert _left_beside(place) == [], place
    assert scan(into).tree_digest == tree.tree_digest
    assert hashlib.sha256(output.read_bytes()).hexdigest() == sha256


def _partial_being_written(place: Path, running: subprocess.Popen[str]) -> Path:
    """The partial `running` writes beside `place`, once it holds some bytes of the tree."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert running.poll() is None, running.communicate()
        for partial in place.parent.glob(f".{place.name}.restore-*"):
            if partial.is_file() and partial.stat().st_size:
                return partial
            if any(p.is_file() for p in partial.rglob("*")):
                return partial
        time.sleep(0.05)
    running.kill()
    raise AssertionError(f"no partial of {place} with content: {running.communicate()}")


def _left_beside(place: Path) -> list[str]:
    return sorted(p.name for p in place.parent.glob(f".{place.name}.restore-*"))


def _largest_file(tree: Fingerprint) -> tuple[str, str]:
    """The path and sha256 of the tree's largest file."""
    entry = max((e for e in tree.entries if e.kind == "file"), key=lambda e: e.size)
    assert entry.sha256 is not None
    return entry.path, entry.sha256
