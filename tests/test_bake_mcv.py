"""MCV's cache-only image of a baked cache (docs/mcv.md): the labels, manifest.json and counts
read from a cache tree; and, on a real dockerd, one layer FROM scratch holding the documented
paths, labelled as documented, refused when the layer is not the tree baked."""

from __future__ import annotations

import io
import json
import secrets
import tarfile
from pathlib import Path
from typing import Any

import pytest

from lifecycle.bake.mcv import McvImage, build_mcv, mcv_image
from lifecycle.boot.baked import BakedCache, BakedUnreadable
from lifecycle.errors import AnswerNo
from lifecycle.fingerprint import scan
from tests.services import TEST_LABEL

TARGET = '{"targets":[{"backend":"cuda","arch":"90","warp_size":32}]}'


def _write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def _kernel_meta(name: str, arch: float, **knobs: Any) -> str:
    """A kernel's metadata as Triton writes it beside the kernel (the fields MCV reads, and some
    it does not)."""
    target = {"backend": "cuda", "arch": arch, "warp_size": 32}
    meta = {"hash": f"{name}-hash", "target": target, "name": name, "shared": 0, **knobs}
    return json.dumps(meta)


def _triton_tree(root: Path) -> Path:
    """A Triton cache: two kernels (one arch written as 90.0), a group file, a launcher."""
    tree = root / "triton"
    _write(tree / "AAAA/add_kernel.json", _kernel_meta("add_kernel", 90, num_warps=4, debug=False))
    _write(tree / "AAAA/add_kernel.cubin", b"\x7fELF cubin")
    _write(tree / "AAAA/__grp__add_kernel.json", '{"child_paths": {"add_kernel.json": "x"}}')
    _write(tree / "BBBB/mul_kernel.json", _kernel_meta("mul_kernel", 90.0, ptx_version=84))
    _write(tree / "CCCC/cuda_utils.so", b"\x7fELF so" * 10)
    return tree


def _vllm_tree(root: Path) -> Path:
    """A vLLM cache root: a binary-format compile dir, one with no artifact (counted, not
    described), and an AOT-compiled model."""
    tree = root / "vllm"
    backbone = tree / "torch_compile_cache/abcdef0123/rank_0_0/backbone"
    env = {"VLLM_TARGET_DEVICE": "cuda", "VLLM_MAIN_CUDA_VERSION": "12.9"}
    factors = {"code_hash": "c0de", "config_hash": "c0f1", "compiler_hash": "c0c0", "env": env}
    _write(backbone / "cache_key_factors.json", json.dumps(factors))
    _write(backbone / "artifact_compile_range_1_8192_subgraph_0", b"artifact 0")
    _write(backbone / "artifact_compile_range_1_8192_subgraph_1", b"artifact 1")
    _write(backbone / "computation_graph.py", "graph = 1\n")
    bare = tree / "torch_compile_cache/0123456789/rank_0_0/backbone"
    _write(bare / "cache_key_factors.json", json.dumps({**factors, "code_hash": "other"}))
    _write(tree / "torch_compile_cache/torch_aot_compile/9a5549f2/rank_0_0/model", b"model")
    _write(tree / "modelinfos/m.json", '{"model": "demo"}')
    return tree


def _baked(name: str, tree: Path, digest: str | None = None) -> BakedCache:
    digest = digest or scan(tree).tree_digest
    return BakedCache(name, f"/var/cache/lifecycle/{name}", f"{name}-c1", digest, "b-1", {})


def _image(cache: BakedCache, tree: Path) -> McvImage:
    """`cache`'s MCV image on a host whose GPU is an H100 (cuda, 90, warps of 32)."""
    return mcv_image(cache, tree, backend="cuda", arch="90", warp_size=32)


def _build(client: Any, tag: str, cache: BakedCache, tree: Path, extra: dict[str, str]) -> str:
    return build_mcv(
        client, tag, cache, tree, backend="cuda", arch="90", warp_size=32, labels_extra=extra,
        on_line=lambda _: None,
    )  # fmt: skip


def _bytes(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file() and not p.is_symlink())


# ---- the labels and manifest.json read from a tree --------------------------------------------


def test_a_triton_cache_is_described_kernel_by_kernel(tmp_path: Path) -> None:
    tree = _triton_tree(tmp_path)
    (tree / "CCCC/alias.so").symlink_to("cuda_utils.so")  # extract writes no symlink bytes
    image = _image(_baked("triton", tree), tree)
    assert image.kind == "triton"
    assert image.labels == {
        "cache.triton.image/entry-count": "2",  # the group file and the .so are no kernels
        "cache.triton.image/cache-size-bytes": str(_bytes(tree)),
        "cache.triton.image/summary": TARGET,  # the two kernels' target, once
    }
    assert image.manifest == {
        "triton": [
            {"hash": "add_kernel-hash", "num_warps": 4, "backend": "cuda", "arch": "90",
             "warp_size": 32},
            {"hash": "mul_kernel-hash", "ptx_version": 84, "backend": "cuda", "arch": "90",
             "warp_size": 32},
        ]
    }  # fmt: skip


def test_the_summary_lists_each_kernel_target_once_and_falls_back_to_the_gpu(
    tmp_path: Path,
) -> None:
    tree = _triton_tree(tmp_path)
    hip = {"hash": "h", "target": {"backend": "hip", "arch": "gfx90a", "warp_size": 64}}
    _write(tree / "DDDD/k.json", json.dumps(hip))
    summary = _image(_baked("triton", tree), tree).labels
    assert json.loads(summary["cache.triton.image/summary"]) == {
        "targets": [
            {"backend": "cuda", "arch": "90", "warp_size": 32},
            {"backend": "hip", "arch": "gfx90a", "warp_size": 64},
        ]
    }
    empty = tmp_path / "empty"
    empty.mkdir()
    labels = _image(_baked("triton", empty), empty).labels
    assert labels["cache.triton.image/entry-count"] == "0"
    assert labels["cache.triton.image/summary"] == TARGET


def test_a_vllm_cache_copies_vllms_key_factors_into_the_manifest(tmp_path: Path) -> None:
    tree = _vllm_tree(tmp_path)
    image = _image(_baked("vllm", tree), tree)
    assert image.kind == "vllm"
    assert image.labels == {
        "cache.vllm.image/entry-count": "3",  # every compile dir, and the AOT one
        "cache.vllm.image/cache-size-bytes": str(_bytes(tree)),
        "cache.vllm.image/summary": TARGET,
        "cache.vllm.image/format": "binary",
        "io.kserve.km/framework": "vllm",
        "io.kserve.km/cache-type": "torch-compile",
        "io.kserve.km/cache-hash": "abcdef0123,9a5549f2",
        "io.kserve.km/cache-mount-subpath": "torch_compile_cache",
        "io.kserve.km/cache-root-env": "VLLM_CACHE_ROOT=/var/cache/lifecycle/vllm",
    }
    binary, aot = image.manifest["vllm"]
    assert binary == {
        "vllmHash": "abcdef0123",
        "cacheFormat": "binary",
        "binary": [
            {
                "rank": "rank_0_0",
                "prefix": "backbone",
                "artifact_count": 2,
                "artifact_names": [
                    "artifact_compile_range_1_8192_subgraph_0",
                    "artifact_compile_range_1_8192_subgraph_1",
                ],
                "code_hash": "c0de",
                "config_hash": "c0f1",
                "compiler_hash": "c0c0",
                "cache_save_format": "binary",
                "target_device": "cuda",
                "env": {"VLLM_TARGET_DEVICE": "cuda", "VLLM_MAIN_CUDA_VERSION": "12.9"},
            }
        ],
    }
    assert aot["vllmHash"] == "9a5549f2" and aot["cacheFormat"] == "binary"
    assert [(e["rank"], e["artifact_names"], e["cache_save_format"]) for e in aot["binary"]] == [
        ("rank_0_0", ["model"], "mega-aot")
    ]


def test_a_vllm_cache_with_nothing_mcv_describes_is_counted_but_not_hinted(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "vllm"
    _write(tree / "torch_compile_cache/0123456789/rank_0_0/backbone/computation_graph.py", "g\n")
    image = _image(_baked("vllm", tree), tree)
    assert image.manifest == {"vllm": []}
    assert image.labels["cache.vllm.image/entry-count"] == "1"
    assert image.labels["cache.vllm.image/format"] == "unpacked"
    assert not [key for key in image.labels if key.startswith("io.kserve.km/")]


def test_a_cache_mcv_has_no_layout_for_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AnswerNo, match="flashinfer has no MCV layout"):
        _image(_baked("flashinfer", tmp_path), tmp_path)


def test_the_dockerfile_is_one_copy_from_scratch_and_mcvs_labels_win(tmp_path: Path) -> None:
    tree = _triton_tree(tmp_path)
    image = _image(_baked("triton", tree), tree)
    text = image.dockerfile({"cache.triton.image/entry-count": "99", "lifecycle.bake.x": "y"})
    lines = text.splitlines()
    assert lines[:2] == ["FROM scratch", "COPY caches/ /"]
    assert sum(line.split()[0] in ("COPY", "ADD", "RUN") for line in lines) == 1
    assert 'cache.triton.image/entry-count="2"' in text and 'lifecycle.bake.x="y"' in text


# ---- the image on a real dockerd ---------------------------------------------------------------


def _member(tar: tarfile.TarFile, name: str | tarfile.TarInfo) -> bytes:
    found = tar.extractfile(name)
    assert found is not None, name
    return found.read()


def _layer(docker_client: Any, image_id: str) -> dict[str, bytes | None]:
    """The image's one layer as `docker save` gives it: path -> content (None: a dir)."""
    saved = io.BytesIO(b"".join(docker_client.images.get(image_id).save()))
    with tarfile.open(fileobj=saved) as outer:
        (layer_path,) = json.loads(_member(outer, "manifest.json"))[0]["Layers"]
        layer = io.BytesIO(_member(outer, layer_path))
    with tarfile.open(fileobj=layer) as inner:
        return {m.name: _member(inner, m) if m.isfile() else None for m in inner.getmembers()}


def _expected(tree: Path, payload: str) -> dict[str, bytes | None]:
    """The payload's paths and contents as docs/mcv.md says the layer holds them."""
    found: dict[str, bytes | None] = {payload: None}
    for path in sorted(tree.rglob("*")):
        found[f"{payload}/{path.relative_to(tree)}"] = path.read_bytes() if path.is_file() else None
    return found


@pytest.mark.docker
@pytest.mark.parametrize("name", ["triton", "vllm"])
def test_the_image_is_one_layer_from_scratch_as_docs_mcv_says(
    docker_client: Any, tmp_path: Path, name: str
) -> None:
    tree = (_triton_tree if name == "triton" else _vllm_tree)(tmp_path)
    cache = _baked(name, tree)
    tag = f"lifecycle-test/mcv-{name}:{secrets.token_hex(4)}"
    extra = {TEST_LABEL: "mcv", "lifecycle.bake.caches": "[]"}
    image_id = None
    try:
        image_id = _build(docker_client, tag, cache, tree, extra)
        attrs = docker_client.images.get(image_id).attrs
        assert len(attrs["RootFS"]["Layers"]) == 1  # FROM scratch: no layer under the cache's

        described = _image(cache, tree)
        labels = attrs["Config"]["Labels"]
        assert labels == {
            **described.labels, **extra, "org.opencontainers.image.title": f"mcv-{name}"
        }  # fmt: skip

        layer = _layer(docker_client, image_id)
        payload, meta = f"io.{name}.cache", f"io.{name}.manifest"
        manifest = layer.pop(f"{meta}/manifest.json")
        assert layer.pop(meta) is None and set(layer) == set(_expected(tree, payload))
        assert layer == _expected(tree, payload)
        assert json.loads(manifest or b"") == described.manifest
        # What MCV's extract checks: the bytes of the payload's files are the size label.
        written = sum(len(data) for data in layer.values() if data is not None)
        assert str(written) == labels[f"cache.{name}.image/cache-size-bytes"]
    finally:
        if image_id is not None:
            docker_client.images.remove(image_id, force=True)


@pytest.mark.docker
def test_a_layer_that_is_not_the_tree_baked_is_removed_and_refused(
    docker_client: Any, tmp_path: Path
) -> None:
    tree = _triton_tree(tmp_path)
    tag = f"lifecycle-test/mcv-impostor:{secrets.token_hex(4)}"
    cache = _baked("triton", tree, digest="0" * 64)
    try:
        with pytest.raises(BakedUnreadable, match="its layer holds tree"):
            _build(docker_client, tag, cache, tree, {TEST_LABEL: "mcv"})
        assert docker_client.images.list(name=tag) == []
    finally:
        for image in docker_client.images.list(name=tag):
            docker_client.images.remove(image.id, force=True)
