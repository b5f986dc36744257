"""Cross-field checks that must let good manifests through (the refusals are corpus cases)."""

from __future__ import annotations

from pathlib import Path

from lifecycle.manifest import load_manifest

BASE = """\
schema_version: 1
name: demo
engine:
  vllm: "0.31.0"
  flashinfer: "0.7.0"
  base_image: demo:1
  package_dir: /opt/engine/vllm
upstream:
  repository: https://example.invalid/engine.git
"""


def _load(tmp_path: Path, tail: str) -> None:
    file = tmp_path / "manifest.yaml"
    file.write_text(BASE + tail)
    load_manifest(file)


def test_a_cache_in_a_dir_of_its_own_under_a_system_dir_is_fine(tmp_path: Path) -> None:
    _load(
        tmp_path,
        "caches:\n"
        "  vllm: {path: /tmp/vllm-cache}\n"
        "  triton: {path: /opt/triton}\n"
        "  mine: {path: /root/.cache/mine, env: MINE_DIR}\n",
    )


def test_a_disabled_cache_neither_collides_nor_overlaps(tmp_path: Path) -> None:
    _load(
        tmp_path,
        "caches:\n"
        "  triton: {enabled: false, path: /}\n"
        "  inductor: {enabled: false}\n"
        "  mine: {path: /var/cache/lifecycle/inductor, env: TORCHINDUCTOR_CACHE_DIR}\n"
        "profiles:\n"
        "  serve: {env: {TRITON_CACHE_DIR: /tmp/t}}\n",
    )
