"""The digest ignores YAML layout, and sees any patch byte or series order."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from lifecycle.manifest import load_manifest
from lifecycle.manifest.load import manifest_digest


def _copy_030(repo_root: Path, tmp_path: Path) -> Path:
    target = tmp_path / "0.30"
    shutil.copytree(repo_root / "manifests/0.30", target)
    return target / "manifest.yaml"


def _digest(path: Path) -> str:
    return manifest_digest(load_manifest(path))


def test_digest_is_64_hex_and_stable(repo_root: Path, tmp_path: Path) -> None:
    path = _copy_030(repo_root, tmp_path)
    digest = _digest(path)
    assert re.fullmatch("[0-9a-f]{64}", digest)
    assert _digest(path) == digest


def test_reformatted_yaml_keeps_the_digest(repo_root: Path, tmp_path: Path) -> None:
    path = _copy_030(repo_root, tmp_path)
    before = _digest(path)
    data = yaml.safe_load(path.read_text())
    reordered = dict(reversed(list(data.items())))
    reordered["engine"] = dict(reversed(list(data["engine"].items())))
    # flow style, different indentation, comments, and a default written out explicitly
    reordered["upstream"]["tag"] = "v{version}"
    text = "# a comment that means nothing\n" + yaml.safe_dump(
        reordered, default_flow_style=True, width=60, sort_keys=False
    )
    path.write_text(text)
    assert _digest(path) == before


def test_one_patch_byte_changes_the_digest(repo_root: Path, tmp_path: Path) -> None:
    path = _copy_030(repo_root, tmp_path)
    before = _digest(path)
    patch = path.parent / "patches/kv-offload-readback-log.patch"
    content = bytearray(patch.read_bytes())
    content[-2] ^= 0x01
    patch.write_bytes(bytes(content))
    assert _digest(path) != before


def test_reordered_series_changes_the_digest(repo_root: Path, tmp_path: Path) -> None:
    path = _copy_030(repo_root, tmp_path)
    before = _digest(path)
    data = yaml.safe_load(path.read_text())
    data["patches"].reverse()
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _digest(path) != before


def test_extends_path_is_not_part_of_the_digest(repo_root: Path, tmp_path: Path) -> None:
    """A derived manifest that changes nothing is the same engine as its parent."""
    path = _copy_030(repo_root, tmp_path)
    child = tmp_path / "child.yaml"
    child.write_text("extends: 0.30/manifest.yaml\n")
    assert _digest(child) == _digest(path)


def test_a_profile_that_runs_the_engine_digests_as_before_the_engine_key(
    repo_root: Path, tmp_path: Path
) -> None:
    """`engine: true` is the default: writing it changes nothing (images and caches keep their
    keys); `engine: false` boots another command, so it is another manifest."""
    path = _copy_030(repo_root, tmp_path)
    before = _digest(path)
    data = yaml.safe_load(path.read_text())
    data["profiles"]["serve"]["engine"] = True
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _digest(path) == before
    data["profiles"]["serve"]["engine"] = False
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _digest(path) != before


def test_a_credential_in_the_upstream_url_is_neither_in_the_digest_nor_in_the_snapshot(
    repo_root: Path, tmp_path: Path
) -> None:
    """A boot archives the canonical form in its manifest's snapshot: a token written into the
    URL must not reach it, and a new token is not a new engine."""
    from lifecycle.manifest.load import canonical_form

    path = _copy_030(repo_root, tmp_path)
    data = yaml.safe_load(path.read_text())
    data["upstream"]["repository"] = "https://github.com/vllm-project/vllm.git"
    path.write_text(yaml.safe_dump(data))
    plain = _digest(path)
    token = "ghp_" + "T0k3n" * 8
    data["upstream"]["repository"] = (
        f"https://x-access-token:{token}@github.com/vllm-project/vllm.git"
    )
    path.write_text(yaml.safe_dump(data))
    loaded = load_manifest(path)
    assert token not in repr(canonical_form(loaded))
    assert manifest_digest(loaded) == plain
    # A user name is no credential: `ssh://git@host/…` is as written, and so its digest.
    data["upstream"]["repository"] = "ssh://git@github.com/vllm-project/vllm.git"
    path.write_text(yaml.safe_dump(data))
    assert canonical_form(load_manifest(path))["upstream"]["repository"].startswith("ssh://git@")
