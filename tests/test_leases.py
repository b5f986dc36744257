"""`lifecycle.leases`: one holder per cache across processes, given back when the holder dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from lifecycle.home import Home
from lifecycle.leases import lease_held, try_lease

_HOLD = """
import sys, time
from pathlib import Path
from lifecycle.home import Home
from lifecycle.leases import try_lease
lease = try_lease(Home(Path(sys.argv[1])), sys.argv[2])
print("held" if lease else "busy", flush=True)
time.sleep(60)
"""


def _holder(home: Path, cache_id: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(home), cache_id], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "held"
    return process


def test_one_holder_at_a_time_and_release_gives_it_back(tmp_path: Path) -> None:
    first = try_lease(Home(tmp_path), "vllm-1")
    assert first is not None and lease_held(Home(tmp_path), "vllm-1")
    assert try_lease(Home(tmp_path), "vllm-1") is None  # another open file description: refused
    assert try_lease(Home(tmp_path), "vllm-2") is not None  # leases are per cache
    first.release()
    first.release()  # twice is harmless
    assert not lease_held(Home(tmp_path), "vllm-1")
    with try_lease(Home(tmp_path), "vllm-1") as again:
        assert again is not None
    assert Home(tmp_path).cache_lock("vllm-1").is_file()


def test_a_lease_held_by_another_process_is_refused_and_freed_by_its_sigkill(
    tmp_path: Path,
) -> None:
    process = _holder(tmp_path, "triton-9")
    try:
        assert lease_held(Home(tmp_path), "triton-9")
        assert try_lease(Home(tmp_path), "triton-9") is None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        deadline = time.monotonic() + 5
        while lease_held(Home(tmp_path), "triton-9") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not lease_held(Home(tmp_path), "triton-9")  # the kernel dropped it with the process
    finally:
        process.kill()
        process.wait()


def test_no_lock_file_means_nobody_holds_it_and_asking_creates_nothing(tmp_path: Path) -> None:
    assert not lease_held(Home(tmp_path), "inductor-3")
    assert not (tmp_path / "locks").exists()
