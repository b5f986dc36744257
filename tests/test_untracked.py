"""JIT output written outside the caches, read from the container's own layer on this host's
disk (lifecycle.boot.untracked) or, when that cannot be read here, asked of dockerd: both readers
find the same writes, with the same kinds and sizes."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lifecycle.boot.untracked import layer_writes, untracked_writes
from lifecycle.ledger.boots import UntrackedWrite

TRACKED = ["/var/cache/lifecycle/triton"]


def _overlay(upper: Path, lower: Path) -> dict[str, Any]:
    """A container's inspect as overlay2 reports it, its layer at `upper` over `lower`."""
    data = {"UpperDir": str(upper), "LowerDir": f"{lower}-init:{lower}"}
    return {"GraphDriver": {"Name": "overlay2", "Data": data}}


def _write(root: Path, path: str, content: bytes = b"x") -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)


class _Container:
    """A stopped container as the docker SDK shows it: its inspect, and its changes."""

    id = "c0ffee"

    def __init__(self, attrs: dict[str, Any], changes: list[dict[str, Any]]) -> None:
        self.attrs = attrs
        self.changes = changes
        self.diffs = 0

    def diff(self) -> list[dict[str, Any]]:
        self.diffs += 1
        return self.changes


class _Api:
    """dockerd's archive endpoint, answering HEAD with a path's stat header."""

    timeout = 5.0

    def __init__(self, stats: dict[str, dict[str, int]]) -> None:
        self.stats = stats

    def _url(self, template: str, *args: str) -> str:
        return template.format(*args)

    def head(self, url: str, params: dict[str, str], timeout: float) -> Any:
        stat = self.stats.get(params["path"])
        if stat is None:
            return SimpleNamespace(status_code=404, headers={})
        header = base64.b64encode(json.dumps(stat).encode()).decode()
        return SimpleNamespace(status_code=200, headers={"X-Docker-Container-Path-Stat": header})


class _Client:
    def __init__(self, api: _Api) -> None:
        self.api = api


def test_the_layer_gives_added_and_changed_files_with_their_sizes(tmp_path: Path) -> None:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    _write(lower, "/usr/lib/python3/k.so")
    _write(upper, "/usr/lib/python3/k.so", b"rewritten")  # an image file written over
    _write(upper, "/tmp/torchinductor_root/precompiled_headers/h.gch", b"g" * 1000)
    _write(upper, "/root/.cache/flashinfer/op/op.so", b"o" * 10)
    _write(upper, "/usr/lib/python3/__pycache__/k.cpython-311.pyc")  # noise
    _write(upper, "/var/log/engine.log")  # not JIT output
    _write(upper, "/var/cache/lifecycle/triton/kernel.cubin")  # a tracked cache's
    container = _Container(_overlay(upper, lower), changes=[])

    writes = untracked_writes(None, container, "b-1", TRACKED)

    assert writes == [
        UntrackedWrite("b-1", "/root/.cache/flashinfer/op/op.so", "added", 10),
        UntrackedWrite("b-1", "/tmp/torchinductor_root/precompiled_headers/h.gch", "added", 1000),
        UntrackedWrite("b-1", "/usr/lib/python3/k.so", "changed", 9),
    ]
    assert container.diffs == 0  # dockerd was not asked


@pytest.mark.skipif(os.geteuid() != 0, reason="a whiteout is a 0/0 device: root makes it")
def test_a_deleted_file_leaves_a_whiteout_that_is_no_write(tmp_path: Path) -> None:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    _write(lower, "/usr/lib/gone.so")
    (upper / "usr/lib").mkdir(parents=True)
    os.mknod(upper / "usr/lib/gone.so", 0o600 | 0o020000, os.makedev(0, 0))
    assert layer_writes(_overlay(upper, lower), lambda path: True) == []


def test_a_layer_it_cannot_vouch_for_is_left_to_dockerd(tmp_path: Path) -> None:
    changes = [{"Path": "/tmp/torchinductor_root", "Kind": 1}]  # a dir: dockerd's stat says so
    api = _Api({"/tmp/torchinductor_root": {"mode": 1 << 31, "size": 4096}})
    gone = _overlay(tmp_path / "removed-upper", tmp_path / "lower")
    vfs = {"GraphDriver": {"Name": "vfs", "Data": {"UpperDir": str(tmp_path)}}}
    for attrs in (gone, vfs, {}):
        container = _Container(attrs, changes)
        assert untracked_writes(_Client(api), container, "b-1", TRACKED) == []
        assert container.diffs == 1


def test_a_dir_renamed_within_the_layer_is_left_to_dockerd(tmp_path: Path) -> None:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    _write(upper, "/root/.triton/cache/k.cubin")
    try:  # trusted.* needs root; tmpfs takes user.* since Linux 6.6
        name = "trusted.overlay.redirect" if os.geteuid() == 0 else "user.overlay.redirect"
        os.setxattr(upper / "root/.triton", name, b"/root/.triton-old")
    except OSError as exc:
        pytest.skip(f"no overlay xattrs on {tmp_path}: {exc}")
    assert layer_writes(_overlay(upper, lower), lambda path: True) is None


@pytest.mark.docker
def test_both_readers_agree_on_a_real_container(
    docker_client: Any, demo_images: None, tmp_path: Path
) -> None:
    cache = tmp_path / "triton"
    cache.mkdir()
    dynload = "/usr/lib/python3.11/lib-dynload"
    script = (
        "mkdir -p /tmp/torchinductor_root/precompiled_headers /root/.triton/cache"
        " && head -c 5000 /dev/zero > /tmp/torchinductor_root/precompiled_headers/h.gch"
        " && echo kernel > /root/.triton/cache/k.cubin"
        f" && echo >> {dynload}/_bz2.cpython-311-x86_64-linux-gnu.so"
        f" && rm {dynload}/_asyncio.cpython-311-x86_64-linux-gnu.so"
        f" && echo tracked > {TRACKED[0]}/kept.cubin && echo noise > /var/log/x.log"
    )
    container = docker_client.containers.create(
        "lifecycle-demo/engine:v0.2.0",
        ["sh", "-c", script],
        network_mode="none",
        volumes={str(cache): {"bind": TRACKED[0], "mode": "rw"}},
        labels={"lifecycle-test": "untracked"},
    )
    try:
        container.start()
        assert container.wait()["StatusCode"] == 0
        from_layer = layer_writes(container.attrs, lambda path: True)
        writes = untracked_writes(docker_client, container, "b-1", TRACKED)
        container.attrs = {"Id": container.id}  # no layer named: dockerd is asked
        asked = untracked_writes(docker_client, container, "b-1", TRACKED)
    finally:
        container.remove(force=True)
    bz2 = f"{dynload}/_bz2.cpython-311-x86_64-linux-gnu.so"
    assert [(w.path, w.change) for w in asked] == [
        ("/root/.triton/cache/k.cubin", "added"),
        ("/tmp/torchinductor_root/precompiled_headers/h.gch", "added"),
        (bz2, "changed"),
    ]
    assert [w.bytes for w in asked][:2] == [7, 5000]
    if from_layer is None:
        pytest.skip("the container's layer cannot be read here; dockerd's answer was checked")
    assert writes == asked
