"""A boot whose lifecycle process is SIGKILLed leaves its engine running: dockerd, not
lifecycle, runs the container. A real server never exits by itself; it holds its GPUs and its
caches until somebody stops it. The next boot on the host stops it, settles the dead boot, and
takes its caches warm again where the dead boot's engine left them as they were (before, they
were held by a boot nobody runs, and every later boot went cold)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import NotFound

from lifecycle.manifest.checks import DEFAULT_CACHES
from tests.services import _demo_root, boot_demo, run_lifecycle
from tests.trust_support import boots, cache_ids, caches, start

pytestmark = [pytest.mark.docker]

# Serves for ten minutes, as a real engine serves until it is stopped.
_STAYS = (
    "  stays:\n    command: [python3, -m, demollm.serve, --serve-seconds, '600']\n"
    "    network: none\n"
)


@pytest.fixture
def stays_project(tmp_path: Path, demo_images: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = _demo_root(tmp_path, _STAYS)
    monkeypatch.chdir(root)
    return root


def _orphan(stays_project: Path, docker_client: Any) -> tuple[str, Any]:
    """A warm boot of `stays`, its lifecycle process SIGKILLed once its engine runs: the dead
    boot's id and its container, still running."""
    killed = start(stays_project, "boot", "demo/0.2", "--profile", "stays")
    try:
        deadline = time.monotonic() + 120
        while True:
            running = [b.id for b in boots().values() if b.outcome == "running"]
            label = [f"lifecycle.boot.id={b}" for b in running]
            found = docker_client.containers.list(filters={"label": label}) if label else []
            if found:
                break
            assert time.monotonic() < deadline and killed.poll() is None, killed.stderr
            time.sleep(0.1)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        killed.kill()
    [container] = found
    container.reload()
    assert container.status == "running"  # dockerd runs it on: nobody stops it
    return running[0], container


def _next_boot_stops(stays_project: Path, container: Any) -> Any:
    """The next boot's result, once it has stopped the dead boot's engine."""
    result = run_lifecycle(stays_project, "boot", "demo/0.2", "--json")
    assert result.exit_code == 0, result.output
    container.reload()
    assert container.status != "running", "the dead boot's engine still runs"
    return result


def test_the_next_boot_stops_a_killed_boots_engine_and_reuses_its_caches_warm(
    stays_project: Path, docker_client: Any
) -> None:
    first = boot_demo(stays_project, "--cold")
    dead, container = _orphan(stays_project, docker_client)
    try:
        result = _next_boot_stops(stays_project, container)
        assert f"boot {dead}" in result.stderr and "stopped" in result.stderr
        settled = boots()[dead]
        assert settled.outcome == "interrupted", settled
        # Each cache the dead boot left as its last scan saw it is warm again; one its engine
        # wrote (the demo's FlashInfer appends to its JIT log) was never scanned after: passed
        # over as changed, never trusted.
        second = json.loads(result.stdout)
        reused = set(cache_ids(second)) & set(cache_ids(first))
        passed = {d["cache_id"] for d in second["passed_over"]}
        assert reused | passed == set(cache_ids(first)) and not reused & passed, second
        [vllm] = [c for c in reused if c.startswith("vllm-")]
        assert {u["cache_id"]: u["verdict"] for u in second["caches"]}[vllm] == "warm-hit"
    finally:
        container.remove(force=True)


def test_a_boot_leaves_alone_the_engine_of_a_boot_that_still_runs(
    stays_project: Path, docker_client: Any
) -> None:
    boot_demo(stays_project, "--cold")
    alive = start(stays_project, "boot", "demo/0.2", "--profile", "stays", "--timeout", "600")
    try:
        deadline = time.monotonic() + 120
        while not (running := [b.id for b in boots().values() if b.outcome == "running"]):
            assert time.monotonic() < deadline and alive.poll() is None, alive.stderr
            time.sleep(0.1)
        label = f"lifecycle.boot.id={running[0]}"
        while not docker_client.containers.list(filters={"label": label}):
            assert time.monotonic() < deadline and alive.poll() is None, alive.stderr
            time.sleep(0.1)
        result = run_lifecycle(stays_project, "boot", "demo/0.2", "--json")
        assert result.exit_code == 0, result.output
        [container] = docker_client.containers.list(filters={"label": label})
        assert container.status == "running"
        assert boots()[running[0]].outcome == "running"
        assert "stopped" not in result.stderr
    finally:
        alive.send_signal(signal.SIGINT)  # it stops its engine and records how it ended
        alive.wait(timeout=60)
        alive.kill()


def test_a_killed_boot_that_holds_no_cache_is_told_dead_and_its_engine_stopped(
    stays_project: Path, docker_client: Any
) -> None:
    # A boot that mounts no cache (a baked image's boot; here every cache switched off) left
    # no lease to tell that it died: its row said `running` and its engine served for ever.
    manifest = stays_project / "manifests/demo/0.2/manifest.yaml"
    off = "".join(f"  {name}: {{enabled: false}}\n" for name in DEFAULT_CACHES)
    manifest.write_text(manifest.read_text() + "caches:\n" + off)
    built = run_lifecycle(stays_project, "build", "demo/0.2")
    assert built.exit_code == 0, built.output
    dead, container = _orphan(stays_project, docker_client)
    try:
        result = _next_boot_stops(stays_project, container)
        assert boots()[dead].outcome == "interrupted", result.stderr
        assert not caches()  # it held none, as a baked boot holds none
    finally:
        with contextlib.suppress(NotFound):
            container.remove(force=True)


@pytest.fixture
def archived_orphan(
    stays_project: Path, docker_client: Any, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Any]]:
    """A cold boot's caches, then a killed boot's engine running on: (dead boot, container)."""
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/test")
    boot_demo(stays_project, "--cold")
    dead, container = _orphan(stays_project, docker_client)
    try:
        yield dead, container
    finally:
        with contextlib.suppress(NotFound):
            container.remove(force=True)


@pytest.mark.s3
def test_teardown_stops_a_killed_boots_engine_then_removes_its_caches(
    stays_project: Path, docker_client: Any, archived_orphan: tuple[str, Any]
) -> None:
    dead, container = archived_orphan
    result = run_lifecycle(stays_project, "teardown", "--archive", "--yes")
    assert result.exit_code == 0, result.output
    assert boots()[dead].outcome == "interrupted"
    assert {c.state for c in caches().values()} == {"torn-down"}, result.output
    # Stopped first, then removed with the other stopped containers of its caches' boots.
    assert not docker_client.containers.list(all=True, filters={"id": container.id})


@pytest.mark.s3
def test_archive_stops_a_killed_boots_engine_before_it_archives_its_caches(
    stays_project: Path, archived_orphan: tuple[str, Any]
) -> None:
    # Settled in the ledger only, the caches went to S3 while the engine still wrote them: a
    # half-written kernel archived as the cache's newest version, restored warm later.
    dead, container = archived_orphan
    result = run_lifecycle(stays_project, "archive", "--all", "--with-content")
    assert result.exit_code == 0, result.output
    container.reload()
    assert container.status != "running", "archived while the dead boot's engine ran"
    assert f"boot {dead}" in result.stderr and "stopped" in result.stderr
    assert boots()[dead].outcome == "interrupted"
    assert {c.state for c in caches().values()} == {"archived"}, result.output
