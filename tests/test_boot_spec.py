"""The command a boot sends: tuned values go to the profiles that run the engine, and only there.

No Docker: the spec is built from the manifest, and `boot --dry-run` prints it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from lifecycle.boot.spec import CacheMount, build_spec
from lifecycle.cli import cli
from lifecycle.manifest import load_manifest
from lifecycle.manifest.model import Manifest

# 0.31 (tuned.gpu_memory_utilization 0.94), with a profile that runs a benchmark client
# instead of the engine: the client's own flag of the same name is its business.
BENCH = """\
extends: {repo}/manifests/0.31/manifest.yaml
profiles:
  serve-again:
    engine: true
    command: [vllm, serve]
  bench:
    engine: false
    command: [python3, -m, bench]
    args: [--gpu-memory-utilization, "0.5"]
"""
MOUNT = CacheMount("vllm-1", "vllm", "/h/vllm", "/var/cache/vllm", "VLLM_CACHE_ROOT", "cold")


def _bench(repo_root: Path, tmp_path: Path) -> Path:
    file = tmp_path / "bench.yaml"
    file.write_text(BENCH.format(repo=repo_root))
    return file


def _manifest(repo_root: Path, tmp_path: Path) -> Manifest:
    return load_manifest(_bench(repo_root, tmp_path)).manifest


def test_an_engine_profile_gets_the_tuned_args_after_its_own(
    repo_root: Path, tmp_path: Path
) -> None:
    manifest = _manifest(repo_root, tmp_path)
    host = {"HF_TOKEN": "hf_x"}
    burst = ("--burst", "64")
    serve = build_spec(manifest, "serve", "img", [MOUNT], host, {}, {}, extra_args=burst)
    assert serve.command == [
        "vllm", "serve", "--model", "/models/served", "--port", "8000",
        "--gpu-memory-utilization", "0.94", "--burst", "64",
    ]  # fmt: skip
    declared = build_spec(manifest, "serve-again", "img", [MOUNT], host, {}, {})
    assert declared.command == ["vllm", "serve", "--gpu-memory-utilization", "0.94"]


def test_a_profile_that_runs_another_program_gets_no_tuned_args(
    repo_root: Path, tmp_path: Path
) -> None:
    manifest = _manifest(repo_root, tmp_path)
    bench = build_spec(manifest, "bench", "img", [MOUNT], {}, {}, {}, extra_args=("-n", "3"))
    assert bench.command == ["python3", "-m", "bench", "--gpu-memory-utilization", "0.5", "-n", "3"]


def test_dry_run_of_a_profile_that_runs_another_program(repo_root: Path, tmp_path: Path) -> None:
    file = _bench(repo_root, tmp_path)
    manifests = str(repo_root / "manifests")
    result = CliRunner().invoke(
        cli, ["--manifests", manifests, "boot", str(file), "--profile", "bench", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)
    assert spec["command"] == ["python3", "-m", "bench", "--gpu-memory-utilization", "0.5"]


def test_dry_run_of_a_baked_boot_mounts_nothing_and_names_the_bake(
    repo_root: Path, tmp_path: Path
) -> None:
    """A baked boot's caches are in the image's layers: its dry run showed host dirs to mount."""
    manifests = str(repo_root / "manifests")
    args = ["--manifests", manifests, "boot", "demo/0.2", "--baked", "--dry-run", "--json"]
    result = CliRunner().invoke(cli, args, env={"LIFECYCLE_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    spec = json.loads(result.stdout)
    assert spec["image"].startswith("(the newest bake of demo "), spec["image"]
    assert {m["mode"] for m in spec["mounts"]} == {"baked"}
    assert {m["source"] for m in spec["mounts"]} == {"(a layer of the image)"}
    assert spec["environment"]["VLLM_CACHE_ROOT"] == "/var/cache/lifecycle/vllm"
    assert not (tmp_path / "home").exists()  # a dry run makes nothing
