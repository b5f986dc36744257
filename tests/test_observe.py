"""What the kernel reports of a cache's files (lifecycle.boot.observe), against the real
kernel: reads and writes by another process, dirs made during the watch, JIT lock and
temporary files, through a container's bind mount, and a queue that overflowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle.boot.observe import IN_Q_OVERFLOW, AccessWatch

# Another process, as an engine is: what it does to the cache dir given as argv[1].
ENGINE = """
import os, sys
root = sys.argv[1]
with open(os.path.join(root, "kept/graph.so"), "rb") as f:  # a warm hit reads
    f.read()
os.listdir(os.path.join(root, "kept"))                      # a listing opens no file
for i in range(int(sys.argv[2])):                           # a miss compiles into new dirs
    d = os.path.join(root, "new", str(i), "deep")
    os.makedirs(d)
    with open(os.path.join(d, "k.so"), "wb") as f:
        f.write(b"x")
os.makedirs(os.path.join(root, "locks"), exist_ok=True)
open(os.path.join(root, "locks", "k.lock"), "w").close()    # a JIT's lock file
tmp = os.path.join(root, "kept", ".123.456.tmp")            # written, then renamed into place
with open(tmp, "w") as f:
    f.write("entry")
os.replace(tmp, os.path.join(root, "kept", "entry.json"))
"""


def _cache(tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    (root / "kept").mkdir(parents=True)
    (root / "kept" / "graph.so").write_bytes(b"\x7fELF")
    (root / "kept" / "unread.so").write_bytes(b"\x7fELF")
    return root


def test_reads_writes_and_new_dirs_of_another_process(tmp_path: Path) -> None:
    root = _cache(tmp_path)
    watch = AccessWatch({"inductor": root})
    watch.start()
    subprocess.run([sys.executable, "-c", ENGINE, str(root), "50"], check=True)
    seen = watch.stop()["inductor"]
    assert seen.complete
    new = {f"new/{i}/deep/k.so" for i in range(50)}
    # Every file in a dir made during the watch, whether the kernel told it or the walk that
    # added the dir's watch found it already there.
    assert seen.written == new | {"kept/entry.json"}
    # Read: opened and not written (a file the walk found has no open event to show).
    assert seen.opened - seen.written == {"kept/graph.so"}
    assert "kept/unread.so" not in seen.opened  # untouched is not read


def test_nothing_opened_is_nothing_seen(tmp_path: Path) -> None:
    root = _cache(tmp_path)
    watch = AccessWatch({"triton": root})
    watch.start()
    subprocess.run(["ls", "-lR", str(root)], check=True, capture_output=True)  # listing only
    seen = watch.stop()["triton"]
    assert (seen.opened, seen.written, seen.complete) == (set(), set(), True)


def test_a_night_of_boots_keeps_no_watch_open(tmp_path: Path) -> None:
    """The watch is closed beside the boot's finish, not before it; it is closed all the same:
    a night boots hundreds of times in one process."""
    import time

    def watches() -> int:
        fds = Path("/proc/self/fd")
        return sum(1 for fd in fds.iterdir() if "inotify" in _link(fd))

    before = watches()
    for _ in range(20):
        watch = AccessWatch({"vllm": _cache(tmp_path / str(time.monotonic_ns()))})
        watch.start()
        watch.stop()
    deadline = time.monotonic() + 10
    while watches() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert watches() == before, f"{watches() - before} inotify fds still open"


def _link(fd: Path) -> str:
    try:
        return str(fd.readlink())
    except OSError:  # the listing's own fd, closed by now
        return ""


def test_a_queue_that_overflowed_makes_the_access_incomplete(tmp_path: Path) -> None:
    import struct

    watch = AccessWatch({"vllm": _cache(tmp_path)})
    watch._parse(struct.pack("iIII", -1, IN_Q_OVERFLOW, 0, 0))
    assert not watch.access["vllm"].complete


@pytest.mark.docker
def test_a_container_reading_through_its_bind_mount_is_seen(
    tmp_path: Path, docker_client: Any, demo_images: None
) -> None:
    root = _cache(tmp_path)
    watch = AccessWatch({"vllm": root})
    watch.start()
    docker_client.containers.run(
        "lifecycle-demo/base:bookworm",
        ["sh", "-c", "cat /c/kept/graph.so >/dev/null; mkdir -p /c/a/b; echo 1 > /c/a/b/x.so"],
        volumes={str(root): {"bind": "/c", "mode": "rw"}},
        network_mode="none",
        remove=True,
    )
    seen = watch.stop()["vllm"]
    assert seen.opened - seen.written == {"kept/graph.so"}
    assert seen.written == {"a/b/x.so"}
