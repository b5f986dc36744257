"""Which partials beside a restore's place go (lifecycle.archive.partials): only those a restore
on this host left when it died; never a live one's, another host's, or through a link."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lifecycle.archive import partials
from lifecycle.archive.partials import partial_prefix, remove_dead_partials


def test_only_a_dead_writers_partial_goes(tmp_path: Path) -> None:
    place = tmp_path / "beside"
    host = partial_prefix(place).split("@")[1].rstrip("+")
    dead = _dead_pid()
    made = {
        "dead": f".beside.restore-{dead}@{host}+abcd1234",
        "live": f"{partial_prefix(place)}abcd1234",
        "elsewhere": f".beside.restore-{dead}@another-host+abcd1234",
        "legacy": ".beside.restore-k1ll3d",  # no writer named: not judged
        "another place": f".besides.restore-{dead}@{host}+abcd1234",
    }
    for name in made.values():
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "part.so").write_bytes(b"\0" * 10)
        (tmp_path / name / "sub").chmod(0o500)  # read-only, as a restored dir may be
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("the user's")
    link = tmp_path / f".beside.restore-{dead}@{host}+linked01"
    link.symlink_to(outside)

    remove_dead_partials(place)

    left = {p.name for p in tmp_path.iterdir()}
    assert left == {*made.values(), "outside"} - {made["dead"]}
    assert (outside / "kept").read_text() == "the user's"  # the link went, not what it names


def test_a_pid_no_process_has_is_dead_and_a_live_one_is_not() -> None:
    assert not partials._alive(_dead_pid())
    assert partials._alive(os.getpid())
    assert partials._alive(1)  # init: there as long as the host is
    assert partials._alive(0)  # no process's: never judged dead


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid
