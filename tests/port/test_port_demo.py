"""End to end: `lifecycle port demo/0.1 demo/0.2` on the demo engine's real upstream history."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lifecycle.cli import cli
from lifecycle.demo.setup import ensure_demo
from lifecycle.demo.upstream import ensure_upstream_repo
from lifecycle.manifest import load_manifest
from lifecycle.manifest.load import canonical_form
from tests.port_support import git


@pytest.fixture
def project(tmp_path: Path, repo_root: Path) -> Path:
    """A project holding only manifests/demo/0.1, with the demo upstream repo beside it."""
    root = tmp_path / "project"
    shutil.copytree(repo_root / "manifests/demo/0.1", root / "manifests/demo/0.1")
    ensure_upstream_repo(root / "manifests/demo/upstream.git")
    (root / ".gitignore").write_text("manifests/demo/upstream.git/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "demo 0.1")
    return root


def _lifecycle(manifests: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--manifests", str(manifests), *args])
    assert result.exit_code == 0, result.stderr or result.stdout
    return json.loads(result.stdout) if "--json" in args else result.stdout


def _port_and_check_out(project: Path) -> Path:
    report = _lifecycle(project / "manifests", "port", "demo/0.1", "demo/0.2", "--json")
    assert report["branch"] == "port/demo/0.2"
    checkout = project.parent / "checkout"
    git(project, "worktree", "add", "-q", str(checkout), "port/demo/0.2")
    return checkout / "manifests"


def test_port_between_the_demo_releases_gives_a_buildable_manifest(
    project: Path, repo_root: Path
) -> None:
    report = _lifecycle(project / "manifests", "port", "demo/0.1", "demo/0.2", "--json")

    assert [(p["file"], p["outcome"]) for p in report["patches"]] == [
        ("patches/kernel-mix.patch", "CLEAN")
    ]
    assert {p["name"]: (p["new"], p["flagged"]) for p in report["pins"]} == {
        "vllm": ("0.2.0", False),
        "flashinfer": ("0.2.0", False),  # demollm 0.2.0's requirements.txt pins demoinfer
        "base_image": ("lifecycle-demo/engine:v0.2.0", False),
    }
    checkout = project.parent / "checkout"
    git(project, "worktree", "add", "-q", str(checkout), "port/demo/0.2")
    manifests = checkout / "manifests"
    ported = manifests / "demo/0.2"
    # The port reproduces the hand-ported patch of the repository byte for byte, below the
    # line that records the port (the hunk moved)...
    hand_ported = repo_root / "manifests/demo/0.2"
    assert (ported / "patches/kernel-mix.patch").read_bytes() == (
        b"Ported-From: demo/0.1 -> demo/0.2 (CLEAN)\n\n"
        + (hand_ported / "patches/kernel-mix.patch").read_bytes()
    )
    # ...and its manifest resolves to the hand-written one, but for the tuned value's provenance.
    ours = canonical_form(load_manifest(ported / "manifest.yaml"))
    theirs = canonical_form(load_manifest(hand_ported / "manifest.yaml"))
    assert ours.pop("tuned")["gpu_memory_utilization"]["status"] == "carried"
    theirs.pop("tuned")
    assert ours == theirs

    assert "ok " in _lifecycle(manifests, "validate", str(ported / "manifest.yaml"))
    plan = _lifecycle(manifests, "build", "demo/0.2", "--dry-run", "--json")
    assert plan["dockerfile"].splitlines()[2] == "FROM lifecycle-demo/engine:v0.2.0"
    assert plan["labels"]["lifecycle.pin.vllm"] == "0.2.0"
    assert plan["labels"]["lifecycle.pin.flashinfer"] == "0.2.0"
    assert plan["labels"]["lifecycle.patch.01.file"] == "patches/kernel-mix.patch"
    assert json.loads(plan["labels"]["lifecycle.tuned"]) == {
        "gpu_memory_utilization": {"status": "carried", "value": 0.92}
    }
    assert plan["digest"] == report["digest"]


@pytest.mark.docker
def test_ported_demo_manifest_builds_and_boots_for_real(project: Path, docker_client: Any) -> None:
    ensure_demo(docker_client)
    manifests = _port_and_check_out(project)

    built = _lifecycle(manifests, "build", "demo/0.2", "--json")

    try:
        labels = docker_client.images.get(built["tag"]).labels
        assert labels["lifecycle.pin.vllm"] == "0.2.0"
        logs = docker_client.containers.run(
            built["tag"],
            ["python3", "-m", "demollm.serve"],
            network_mode="none",
            remove=True,
            stderr=True,
        ).decode()
        assert "demollm version 0.2.0 (demoinfer 0.2.0)" in logs
        assert "demo patch: kernel-mix applied" in logs
    finally:
        docker_client.images.remove(built["tag"], force=True)


def test_port_onto_the_existing_validated_demo_release_keeps_it_validated(
    project: Path, repo_root: Path
) -> None:
    shutil.copytree(repo_root / "manifests/demo/0.2", project / "manifests/demo/0.2")
    manifest = project / "manifests/demo/0.2/manifest.yaml"
    carried = "status: carried\n    carried_from: demo/0.1\n"
    text = manifest.read_text().replace(carried, "status: validated\n")
    manifest.write_text(text.replace("demollm 0.1.0 + demoinfer 0.1.0", "demollm 0.2.0"))
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "demo 0.2, validated")
    manifests = project / "manifests"

    refused = CliRunner().invoke(
        cli, ["--manifests", str(manifests), "port", "demo/0.1", "demo/0.2"]
    )
    assert refused.exit_code == 2
    assert "demo/0.2 already exists" in refused.stderr
    report = _lifecycle(manifests, "port", "demo/0.1", "demo/0.2", "--force", "--json")

    assert report["tuned"] == {
        "gpu_memory_utilization": {"status": "validated", "kept_from": "demo/0.2"}
    }
    checkout = project.parent / "checkout"
    git(project, "worktree", "add", "-q", str(checkout), "port/demo/0.2")
    ported = load_manifest(checkout / "manifests/demo/0.2/manifest.yaml").manifest
    hand = load_manifest(manifest).manifest
    assert ported.tuned == hand.tuned  # validated, with 0.2's own measurement and margin
