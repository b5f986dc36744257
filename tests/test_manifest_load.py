"""The production manifests load, resolve `extends`, and carry the night's tuned value."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from lifecycle.errors import ManifestError
from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.manifest.checks import DEFAULT_CACHES


def test_production_031_extends_030(repo_root: Path) -> None:
    loaded = load_manifest(repo_root / "manifests/0.31/manifest.yaml")
    manifest = loaded.manifest
    assert manifest.engine.vllm == "0.31.0"
    # the package index's metadata for vllm 0.31.0 requires flashinfer-python==0.7.0.post1
    assert Version(manifest.engine.flashinfer).release == (0, 7, 0)
    assert manifest.engine.package_dir == "/usr/local/lib/python3.12/dist-packages/vllm"
    assert manifest.name == "vllm-prod"  # inherited from 0.30
    assert manifest.profiles["serve"].secrets == ["HF_TOKEN"]  # inherited
    tuned = manifest.tuned["gpu_memory_utilization"]
    assert (tuned.value, tuned.status) == (0.94, "validated")
    assert tuned.margin is not None and "174 MiB" in tuned.margin
    assert [p.name for p in loaded.chain] == ["manifest.yaml", "manifest.yaml"]
    assert loaded.chain[1].parent.name == "0.30"
    assert all(p.parent.parent.name == "0.31" for p in loaded.patch_files)


def test_production_030_margin(repo_root: Path) -> None:
    manifest = load_manifest(repo_root / "manifests/0.30/manifest.yaml").manifest
    assert manifest.engine.flashinfer == "0.6.18.post1"
    margin = manifest.tuned["gpu_memory_utilization"].margin
    assert margin is not None and "232 MiB" in margin


def test_default_caches_need_not_be_repeated(repo_root: Path) -> None:
    manifest = load_manifest(repo_root / "manifests/0.30/manifest.yaml").manifest
    assert set(manifest.active_caches()) == set(DEFAULT_CACHES)
    assert manifest.caches["flashinfer"].env == "FLASHINFER_WORKSPACE_BASE"


def test_a_cache_default_can_be_switched_off_and_one_added(tmp_path: Path, repo_root: Path) -> None:
    child = tmp_path / "m.yaml"
    child.write_text(
        f"extends: {repo_root}/manifests/0.30/manifest.yaml\n"
        "caches:\n  triton: {enabled: false}\n"
        "  deep-gemm: {path: /cache/deep_gemm, env: DG_JIT_CACHE_DIR}\n"
    )
    manifest = load_manifest(child).manifest
    assert "triton" not in manifest.active_caches()
    assert manifest.caches["deep-gemm"].path == "/cache/deep_gemm"


def test_child_patch_series_replaces_parent(tmp_path: Path, repo_root: Path) -> None:
    (tmp_path / "mine.patch").write_text("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n")
    child = tmp_path / "m.yaml"
    child.write_text(
        f"extends: {repo_root}/manifests/0.30/manifest.yaml\n"
        "patches:\n  - {file: mine.patch, reason: ours}\n"
    )
    loaded = load_manifest(child)
    assert [p.file for p in loaded.manifest.patches] == ["mine.patch"]
    assert loaded.patch_files == (tmp_path / "mine.patch",)


def test_a_child_that_declares_a_tuned_value_replaces_its_provenance_whole(
    tmp_path: Path, repo_root: Path
) -> None:
    # 0.30's block says what was measured on 0.30 (its note; a night's `validity`): merged key
    # by key into a child that carries the value, it read as the child's own provenance.
    child = tmp_path / "m.yaml"
    child.write_text(
        f"extends: {repo_root}/manifests/0.30/manifest.yaml\n"
        "tuned:\n  gpu_memory_utilization:\n    value: 0.94\n    status: carried\n"
        "    carried_from: '0.30'\n    measured_on: vllm 0.30.0\n    method: the 0.30 ladder\n"
        "    margin: 232 MiB on 0.30\n"
    )
    tuned = load_manifest(child).manifest.tuned["gpu_memory_utilization"]
    assert tuned.status == "carried" and tuned.margin == "232 MiB on 0.30"
    assert tuned.note is None and tuned.validity is None
    # A child that does not write the value keeps it, and what the parent says of it.
    child.write_text(
        f"extends: {repo_root}/manifests/0.30/manifest.yaml\n"
        "tuned:\n  gpu_memory_utilization: {status: carried, carried_from: '0.30'}\n"
    )
    kept = load_manifest(child).manifest.tuned["gpu_memory_utilization"]
    assert (kept.value, kept.status) == (0.94, "carried") and kept.note


def test_error_in_parent_names_the_parent_file(tmp_path: Path) -> None:
    parent = tmp_path / "parent.yaml"
    parent.write_text("schema_version: 1\nname: Bad Name\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: parent.yaml\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(child)
    names = [p for p in caught.value.problems if p.key_path == "name"]
    assert names and names[0].file == parent and names[0].line == 2


def test_find_manifest_lists_known_versions(repo_root: Path) -> None:
    assert find_manifest(repo_root / "manifests", "0.31").parent.name == "0.31"
    with pytest.raises(Exception, match=r"known: .*0\.30, 0\.31"):
        find_manifest(repo_root / "manifests", "0.99")
    # A name and its release, two dirs deep, are known too, and a near miss is named.
    with pytest.raises(Exception, match=r"known: .*demo/0\.1, demo/0\.2.*did you mean 'demo/0\.2'"):
        find_manifest(repo_root / "manifests", "demo/0.3")
