"""A full disk, the everyday failure of a GPU host whose boot caches run to tens of GB: small
tmpfs mounts filled to the last byte under the real CLI (a process of its own), the real dockerd
and S3. Each command says so in one line (exit 3, the path named, no traceback), keeps nothing
that looks whole and is not, and once space is freed, running it again completes it."""

from __future__ import annotations

import errno
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.fingerprint import scan
from tests.trust_support import boot, boots, cache_ids, caches, cli, home, process

pytestmark = [pytest.mark.docker, pytest.mark.s3]

REPO = Path(__file__).resolve().parent.parent
FULL = "no space left on device (the disk is full)"


class SmallDisk:
    """A 4 MiB tmpfs mounted over `path`, what `path` held copied onto it: filled on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / ".filler"

    def mount(self) -> None:
        kept = self.path.with_name(f"{self.path.name}.before-mount")
        shutil.copytree(self.path, kept, symlinks=True)
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(self.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if mounted.returncode != 0:
            shutil.rmtree(kept)
            pytest.skip(f"cannot mount a tmpfs here (root needed): {mounted.stderr.strip()}")
        shutil.copytree(kept, self.path, symlinks=True, dirs_exist_ok=True)
        shutil.rmtree(kept)

    def fill(self, leave: int = 0) -> None:
        """Write zeros until the file system holds only `leave` bytes more (or none)."""
        free = shutil.disk_usage(self.path).free - leave
        with self.filler.open("ab") as out:
            try:
                while free > 0:
                    free -= out.write(b"\0" * min(free, 1 << 16))
                    out.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        for _ in range(50):  # a process that just exited may still hold it for a moment
            if subprocess.run(["umount", str(self.path)], check=False).returncode == 0:
                return
            time.sleep(0.1)
        subprocess.run(["umount", "--lazy", str(self.path)], check=True)


@pytest.fixture
def small_disks() -> Iterator[list[SmallDisk]]:
    """Disks a test mounts (`disks.append(SmallDisk(path)); disk.mount()`), unmounted after."""
    mounted: list[SmallDisk] = []
    yield mounted
    for disk in reversed(mounted):
        disk.unmount()


def _small_disk(disks: list[SmallDisk], path: Path) -> SmallDisk:
    disk = SmallDisk(path)
    disk.mount()
    disks.append(disk)
    return disk


def _filling_hook(project: Path, disk: SmallDisk, event: str) -> None:
    """hooks/fill-disk: at `event`, it fills `disk` to the last byte."""
    hook = project / "hooks/fill-disk"
    hook.write_text(f'#!/bin/sh\n[ "$1" = {event} ] && cat /dev/zero > {disk.filler}\nexit 0\n')
    hook.chmod(0o755)


def _one_clear_line(result: subprocess.CompletedProcess[str], *names: str) -> str:
    """The error, the last line of stderr: exit 3, a full disk said, `names` in it, no
    traceback on the terminal or in crashes/ (a full disk is no bug)."""
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert FULL in line and "Traceback" not in result.stderr, result.stderr
    for name in names:
        assert name in line, line
    assert not list(home().glob("crashes/*")), result.stderr
    return line


def test_a_restore_into_a_full_disk_leaves_no_cache_and_completes_once_there_is_room(
    archive_project: Path, small_disks: list[SmallDisk]
) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    digests = {cache_id: caches()[cache_id].tree_digest for cache_id in ids}
    cache_id = max(ids, key=lambda i: caches()[i].files or 0)  # the one of the most files
    target = Path(caches()[cache_id].host_path)
    files = [f for f in target.rglob("*") if f.is_file()]
    largest = max(files, key=lambda f: f.stat().st_size).relative_to(target).as_posix()
    assert cli(archive_project, "archive", "--all", "--with-content").exit_code == 0
    torn = cli(archive_project, "teardown", "--yes")
    assert torn.exit_code == 0, torn.output
    disk = _small_disk(small_disks, target.parent)
    disk.fill(leave=4096)  # room for a file or so of the cache: it fills halfway

    full = process(archive_project, "restore", cache_id)
    _one_clear_line(full, f"restore of {cache_id}", str(target))
    # Nothing a boot could take for the cache: no dir at its place, no half beside it.
    assert sorted(p.name for p in target.parent.iterdir()) == [disk.filler.name]
    assert caches()[cache_id].state == "torn-down"
    disk.fill()  # and one file of it, to a new file there: no room for a byte of it
    one = process(
        archive_project, "restore", cache_id, "--file", largest, "--output", str(target) + ".one"
    )
    _one_clear_line(one, str(target) + ".one")
    assert sorted(p.name for p in target.parent.iterdir()) == [disk.filler.name]

    disk.free()
    again = process(archive_project, "restore", cache_id)
    assert again.returncode == 0, again.stderr
    assert scan(target).tree_digest == digests[cache_id]
    assert caches()[cache_id].state == "live"


def test_a_boot_that_fills_the_disk_after_its_engine_ran_is_settled_by_the_next(
    archive_project: Path, small_disks: list[SmallDisk]
) -> None:
    boot(archive_project, "--cold")
    disk = _small_disk(small_disks, home())
    # After the engine ran, before its log, scans, bundle and outcome are written.
    _filling_hook(archive_project, disk, "post-boot")

    full = process(archive_project, "boot", "demo/0.2", "--hook", "fill-disk")
    line = _one_clear_line(full, "its outcome not recorded", str(home() / "ledger.sqlite3"))
    [dead] = [b for b in boots().values() if b.outcome == "running"]
    assert f"boot {dead.id} ended (exit 0)" in line

    disk.free()
    again = process(archive_project, "boot", "demo/0.2")
    assert again.returncode == 0, again.stderr
    assert boots()[dead.id].outcome == "interrupted"  # its process is gone: settled, not lost
    assert all(c.in_use_by is None for c in caches().values())


def test_a_boot_whose_log_does_not_fit_is_recorded_failed_saying_why(
    archive_project: Path, small_disks: list[SmallDisk]
) -> None:
    boot(archive_project, "--cold")
    boots_dir = home() / "evidence/boots"
    disk = _small_disk(small_disks, boots_dir)
    disk.fill(leave=4096)  # the boot's spec fits (one page of tmpfs), its log no longer

    full = process(archive_project, "boot", "demo/0.2")
    assert full.returncode == 1, full.stderr  # the answer is no: not an ok boot
    assert "Traceback" not in full.stderr and not list(home().glob("crashes/*")), full.stderr
    [failed] = [b for b in boots().values() if b.outcome == "failed"]
    assert failed.exit_code == 0 and failed.log_path is None
    assert failed.error is not None and f"log not kept: {boots_dir}/{failed.id}.log" in failed.error
    assert f"boot {failed.id}: failed (exit 0) (log not kept: " in full.stdout
    assert all(c.in_use_by is None for c in caches().values())


def test_a_teardown_on_a_full_disk_removes_nothing_unjournalled_and_completes_once_there_is_room(
    archive_project: Path, small_disks: list[SmallDisk]
) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", "--all", "--with-content").exit_code == 0
    disk = _small_disk(small_disks, home())
    _filling_hook(archive_project, disk, "pre-teardown")  # its plan made, nothing removed yet

    full = process(archive_project, "teardown", "--yes", "--hook", "fill-disk")
    _one_clear_line(full, str(home() / "ledger.sqlite3"))
    assert all(Path(caches()[i].host_path).is_dir() for i in ids)  # its journal came first

    disk.free()
    again = process(archive_project, "teardown", "--yes")
    assert again.returncode == 0, again.stderr
    assert {caches()[i].state for i in ids} == {"torn-down"}
    assert not [p for p in Path(caches()[ids[0]].host_path).parent.iterdir()]


def test_a_tuned_value_that_does_not_fit_leaves_the_manifest_and_its_dir_as_they_were(
    tmp_path: Path, small_disks: list[SmallDisk]
) -> None:
    """A night or tune writes a measured value into its manifest through a file beside it,
    renamed over it once it loads: one whose write found the disk full was left beside the
    manifest (an untracked file in the user's repository)."""
    from lifecycle.night.settle import write_tuned
    from tests.test_tuned_write import MEASURED

    for version in ("0.1", "0.2"):
        shutil.copytree(REPO / f"manifests/demo/{version}", tmp_path / f"demo/{version}")
    disk = SmallDisk(tmp_path / "demo/0.2")
    small_disks.append(disk)
    disk.mount()
    file = tmp_path / "demo/0.2/manifest.yaml"
    before = {path.name: path.read_bytes() for path in file.parent.iterdir() if path.is_file()}
    disk.fill()
    with pytest.raises(OSError, match="No space left"):
        write_tuned(file, "gpu_memory_utilization", MEASURED)
    disk.free()
    after = {path.name: path.read_bytes() for path in file.parent.iterdir() if path.is_file()}
    assert after == before
