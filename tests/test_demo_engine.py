"""The demo engine: its upstream repo, its image booting cold then warm, and its patch."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from lifecycle.demo.images import default_cache_dir, ensure_base_image, ensure_engine_image
from lifecycle.demo.upstream import RELEASES, ensure_upstream_repo, git
from tests.services import TEST_LABEL

CACHE_ENV = {
    "vllm": "VLLM_CACHE_ROOT",
    "flashinfer": "FLASHINFER_WORKSPACE_BASE",
    "triton": "TRITON_CACHE_DIR",
    "inductor": "TORCHINDUCTOR_CACHE_DIR",
}
UNPATCHED_CHECKSUM = "demo kernel checksum: 190219369"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo upstream repo, built in tmp space."""
    return ensure_upstream_repo(tmp_path_factory.mktemp("upstream") / "upstream.git")


def checkout(repo: Path, tag: str, dest: Path) -> Path:
    """The tree of `tag`, extracted with `git archive`."""
    archive = subprocess.run(
        ["git", f"--git-dir={repo}", "archive", "--format=tar", tag],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root: (inode, mtime_ns)."""
    return {
        str(path.relative_to(root)): (path.stat().st_ino, path.stat().st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file()
    }


def test_upstream_has_tagged_releases_with_pins(upstream: Path, tmp_path: Path) -> None:
    tags = git(["tag", "--list"], upstream).split()
    assert tags == ["v0.1.0", "v0.2.0"]
    for version in RELEASES:
        requirements = git(["show", f"v{version}:requirements.txt"], upstream)
        assert f"demoinfer=={version}" in requirements.splitlines()
        init = git(["show", f"v{version}:demollm/__init__.py"], upstream)
        assert f'__version__ = "{version}"' in init
    # Fixed identities and dates: the same commit ids on every machine, and idempotent.
    again = ensure_upstream_repo(tmp_path / "again.git")
    ids = ["v0.1.0^{commit}", "v0.2.0^{commit}"]
    assert git(["rev-parse", *ids], again) == git(["rev-parse", *ids], upstream)
    # Pinned: 0.2.0 is stored as a patch on 0.1.0, and must still make exactly this release.
    assert git(["rev-parse", *ids], upstream).split() == [
        "057f07a058898bafc6da822cbf3efa2ae6373017",
        "22bcdde207f2e63f361e6f38ae491975e936b590",
    ]
    assert ensure_upstream_repo(again) == again


def boot(client: Any, image: str, caches: Path) -> str:
    """Run the engine once with the four caches bind-mounted; its log, asserting exit 0."""
    volumes: dict[str, dict[str, str]] = {}
    environment: dict[str, str] = {}
    for name, env in CACHE_ENV.items():
        (caches / name).mkdir(parents=True, exist_ok=True)
        volumes[str(caches / name)] = {"bind": f"/var/cache/lifecycle/{name}", "mode": "rw"}
        environment[env] = f"/var/cache/lifecycle/{name}"
    container = client.containers.run(
        image,
        ["python3", "-m", "demollm.serve", "--gpu-memory-utilization", "0.92"],
        detach=True,
        network_mode="none",
        volumes=volumes,
        environment=environment,
        labels={TEST_LABEL: "demo-engine"},
    )
    try:
        status = container.wait(timeout=120)
        log: str = container.logs().decode()
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 0, log
    return log


@pytest.mark.docker
def test_engine_image_compiles_cold_then_loads_warm(
    docker_client: Any, upstream: Path, tmp_path: Path
) -> None:
    ensure_base_image(docker_client, default_cache_dir())
    image = ensure_engine_image(docker_client, upstream, "0.2.0")
    labels = docker_client.images.get(image).labels
    assert labels["org.opencontainers.image.version"] == "0.2.0"

    cold = boot(docker_client, image, tmp_path)
    assert "Compiling a graph for dynamic shape takes" in cold
    assert "Building JIT module demo_mix_31; this can take several minutes" in cold
    assert "Directly load the compiled graph(s)" not in cold
    for line in ("Available KV cache memory: ", "GPU KV cache size: ", UNPATCHED_CHECKSUM):
        assert line in cold
    ops = tmp_path / "flashinfer/.cache/flashinfer/0.2.0/cpu/cached_ops/demo_mix_31"
    so, ninja_log = ops / "demo_mix_31.so", ops / ".ninja_log"
    assert so.stat().st_size > 0
    lines = ninja_log.read_text().splitlines()
    assert lines[0] == "# ninja log v5" and len(lines) == 3
    assert lines[2].split("\t")[3] == "demo_mix_31.so"
    [backbone] = (tmp_path / "vllm/torch_compile_cache").glob("*/rank_0_0/backbone")
    assert {p.name for p in backbone.iterdir()} == {
        "computation_graph.py",
        "vllm_compile_cache.py",
        "cache_key_factors.json",
    }
    assert list((tmp_path / "triton").glob("*/demo_mix.llir"))
    assert list((tmp_path / "inductor/fxgraph").rglob("*"))
    before = snapshot(tmp_path)

    warm = boot(docker_client, image, tmp_path)
    assert "Directly load the compiled graph(s) for dynamic shape from the cache" in warm
    assert "Loading JIT ops: demo_mix_31" in warm
    assert "Compiling a graph" not in warm and "Building JIT module" not in warm
    assert UNPATCHED_CHECKSUM in warm
    after = snapshot(tmp_path)
    # flashinfer_jit.log is appended to on every boot; everything else is left as it was.
    log_name = "flashinfer/.cache/flashinfer/0.2.0/cpu/flashinfer_jit.log"
    assert {k: v for k, v in after.items() if k != log_name} == {
        k: v for k, v in before.items() if k != log_name
    }
    assert ninja_log.read_text().splitlines() == lines


# 0.1's patch on the 0.2.0 tree: the context drifted (offsets), and fuzz 0 still applies it.
@pytest.mark.parametrize(
    ("series", "version"), [("0.1", "0.1.0"), ("0.2", "0.2.0"), ("0.1", "0.2.0")]
)
def test_patch_applies_at_fuzz_0_and_changes_the_boot(
    upstream: Path, repo_root: Path, tmp_path: Path, series: str, version: str
) -> None:
    tree = checkout(upstream, f"v{version}", tmp_path / "src")
    patch = repo_root / "manifests/demo" / series / "patches/kernel-mix.patch"
    subprocess.run(
        ["patch", "-p1", "--fuzz=0", "--input", str(patch)],
        cwd=tree / "demollm",
        check=True,
        capture_output=True,
    )
    caches = {env: str(tmp_path / "caches" / name) for name, env in CACHE_ENV.items()}
    done = subprocess.run(
        [sys.executable, "-m", "demollm.serve"],
        env={**os.environ, **caches, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "demo patch: kernel-mix applied" in done.stdout
    assert "Building JIT module demo_mix_37" in done.stdout
    assert "demo kernel checksum: " in done.stdout
    assert UNPATCHED_CHECKSUM not in done.stdout
