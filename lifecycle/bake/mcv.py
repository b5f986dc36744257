"""A baked cache as MCV's cache-only image (docs/mcv.md): one layer FROM scratch, the cache under
`io.<kind>.cache/`, its entries in `io.<kind>.manifest/manifest.json`, MCV's labels, so MCV, GKM
and KServe's kernel cache take lifecycle's proven trees as they take MCV's own. MCV reads one
kind (Triton or vLLM) per image: one cache, one image."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lifecycle.bake.image import build_baked
from lifecycle.boot.baked import BakedCache
from lifecycle.errors import AnswerNo

KINDS = {"triton": "triton", "vllm": "vllm"}  # lifecycle's cache -> MCV's kind; others have none
COMPILE_DIR, AOT_DIR = "torch_compile_cache", "torch_aot_compile"  # vLLM's, under its cache root
_RANK = re.compile(r"rank_\d+_\d+")
_KERNEL_KNOBS = ("ptx_version", "num_stages", "num_warps", "debug")  # MCV omits them when unset
_KEY_FACTORS = ("code_hash", "config_hash", "compiler_hash")  # as vLLM's key factors name them
# An AOT-compiled rank (one `model` file) as MCV describes it: a binary entry of its own kind.
_AOT = dict(prefix="", artifact_count=1, artifact_names=["model"], cache_save_format="mega-aot")


@dataclass(frozen=True)
class McvImage:
    """What one cache's MCV image says of it: the kind, MCV's labels, the manifest.json."""

    kind: str
    labels: dict[str, str]
    manifest: dict[str, list[dict[str, Any]]]

    def dockerfile(self, extra: Mapping[str, str]) -> str:
        """FROM scratch, one COPY (the one layer MCV reads), one LABEL; MCV's labels win."""
        pairs = [f"{k}={json.dumps(v)}" for k, v in sorted({**extra, **self.labels}.items())]
        return "FROM scratch\nCOPY caches/ /\nLABEL " + " \\\n      ".join(pairs) + "\n"


def mcv_image(
    cache: BakedCache, tree: Path, *, backend: str, arch: str, warp_size: int
) -> McvImage:
    """The MCV image of `cache`, read from its host dir `tree`; the target (what this host's
    GPU is) is the summary's wherever no kernel's metadata names one."""
    kind = KINDS.get(cache.name)
    if kind is None:
        raise AnswerNo(f"cache {cache.name} has no MCV layout (MCV knows {', '.join(KINDS)})")
    files = [p for p in sorted(tree.rglob("*")) if p.is_file() and not p.is_symlink()]
    size = sum(p.stat().st_size for p in files)  # regular files only: what MCV's extract counts
    given = {"backend": backend, "arch": arch, "warp_size": warp_size}
    if kind == "triton":
        kernels = [k for p in files if p.suffix == ".json" and (k := _kernel(p))]
        labels = _labels(kind, len(kernels), size, _targets(kernels) or [given])
        return McvImage(kind, labels, {"triton": kernels})
    count, hashes = _compiled(tree / COMPILE_DIR)
    labels = _labels(kind, count, size, [given])  # as MCV's: the GPU it is built on
    labels["cache.vllm.image/format"] = "binary" if hashes else "unpacked"
    return McvImage(kind, {**labels, **_kserve(hashes, cache.path)}, {"vllm": hashes})


def build_mcv(
    client: Any,
    tag: str,
    cache: BakedCache,
    tree: Path,
    *,
    backend: str,
    arch: str,
    warp_size: int,
    labels_extra: Mapping[str, str],
    on_line: Callable[[str], None],
) -> str:
    """Build `cache`'s MCV image from `tree` (its host dir); its id, once the layer holds the
    very tree baked (else it is removed and refused, as an engine bake is)."""
    image = mcv_image(cache, tree, backend=backend, arch=arch, warp_size=warp_size)
    title = tag.rpartition("/")[2].partition(":")[0]  # MCV titles an image by its repository
    extra = {"org.opencontainers.image.title": title, **labels_extra}
    payload, meta = f"io.{image.kind}.cache", f"io.{image.kind}.manifest"
    with tempfile.TemporaryDirectory(prefix="lifecycle-mcv-") as staged:
        Path(staged).chmod(0o755)  # its dir lands in the layer: readable to any consumer
        (Path(staged) / "manifest.json").write_text(json.dumps(image.manifest, indent=2) + "\n")
        trees = {payload: tree, meta: Path(staged)}
        checked = replace(cache, path=f"/{payload}")  # the layer is checked where MCV reads it
        return build_baked(client, tag, image.dockerfile(extra), trees, [checked], on_line)


def _labels(kind: str, count: int, size: int, targets: list[dict[str, Any]]) -> dict[str, str]:
    summary = json.dumps({"targets": targets}, separators=(",", ":"))  # compact, as Go writes it
    prefix = f"cache.{kind}.image"
    return {
        f"{prefix}/entry-count": str(count),
        f"{prefix}/cache-size-bytes": str(size),
        f"{prefix}/summary": summary,
    }


def _kernel(path: Path) -> dict[str, Any] | None:
    """A Triton kernel's metadata as MCV's manifest lists it; None for any other JSON (Triton's
    group files, vLLM's own): a kernel's is the one with a `hash`."""
    meta = _json(path)
    if meta is None or not _text(meta.get("hash")):
        return None
    target = meta.get("target")
    target = target if isinstance(target, dict) else {}
    arch = target.get("arch", "")
    return {
        "hash": meta["hash"],
        **{key: meta[key] for key in _KERNEL_KNOBS if meta.get(key)},
        "backend": str(target.get("backend", "")),
        "arch": f"{arch:.0f}" if isinstance(arch, float) else str(arch),  # 90 and 90.0: "90"
        "warp_size": int(target.get("warp_size") or 0),
    }


def _targets(kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct (backend, arch, warp size) of the kernels, first seen first."""
    seen = {(k["backend"], k["arch"], k["warp_size"]): None for k in kernels}
    return [{"backend": b, "arch": a, "warp_size": w} for b, a, w in seen]


def _compiled(root: Path) -> tuple[int, list[dict[str, Any]]]:
    """vLLM's compile dirs as MCV counts them (every hash dir; an AOT one when it holds a
    model), and the manifest entries of those it describes (binary format and AOT only)."""
    count, hashes = 0, []
    for hashed in _dirs(root):
        if hashed.name == AOT_DIR:
            for one in _dirs(hashed):
                ranks = [r.name for r in _ranks(one) if (r / "model").is_file()]
                if ranks:
                    count += 1
                    hashes.append(_hashed(one.name, [{"rank": r, **_AOT} for r in ranks]))
            continue
        count += 1  # described or not, as MCV counts
        if found := [e for r in _ranks(hashed) for p in _dirs(r) if (e := _binary(r.name, p))]:
            hashes.append(_hashed(hashed.name, found))
    return count, hashes


def _hashed(name: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"vllmHash": name, "cacheFormat": "binary", "binary": entries}


def _binary(rank: str, prefix: Path) -> dict[str, Any] | None:
    """One rank's compiled piece in vLLM's binary format: its artifacts and what vLLM keyed them
    by (cache_key_factors.json); None when it lacks either, as MCV skips it."""
    factors = _json(prefix / "cache_key_factors.json")
    names = [p.name for p in _dirs(prefix, files=True)]
    artifacts = [name for name in names if name.startswith("artifact_compile_range_")]
    if factors is None or not artifacts:
        return None
    env = factors.get("env")
    env = env if isinstance(env, dict) else {}
    entry = {"rank": rank, "prefix": prefix.name, "artifact_count": len(artifacts)}
    entry |= {"artifact_names": artifacts}
    entry |= {key: factors[key] for key in _KEY_FACTORS if _text(factors.get(key))}
    entry["cache_save_format"] = "unpacked" if (prefix / artifacts[0]).is_dir() else "binary"
    if _text(device := env.get("VLLM_TARGET_DEVICE")):
        entry["target_device"] = device
    return entry | ({"env": env} if env else {})  # MCV leaves out what is empty


def _kserve(hashes: list[dict[str, Any]], mounted_at: str) -> dict[str, str]:
    """The mount hints MCV adds for KServe's kernel cache: what the vLLM cache is and where its
    compile dirs go; none when no compile dir is described."""
    if not hashes:
        return {}
    first = hashes[0].get("binary", [{}])[0]
    under = f"{COMPILE_DIR}/{AOT_DIR}" if first.get("cache_save_format") == "mega-aot" else ""
    return {
        "io.kserve.km/framework": "vllm",
        "io.kserve.km/cache-type": "torch-compile",
        "io.kserve.km/cache-hash": ",".join(dict.fromkeys(h["vllmHash"] for h in hashes)),
        "io.kserve.km/cache-mount-subpath": under or COMPILE_DIR,
        "io.kserve.km/cache-root-env": f"VLLM_CACHE_ROOT={mounted_at}",
    }


def _ranks(hashed: Path) -> list[Path]:
    return [rank for rank in _dirs(hashed) if _RANK.fullmatch(rank.name)]


def _dirs(root: Path, *, files: bool = False) -> list[Path]:
    """The entries of `root` by name (its dirs, or all with `files`); none when it is no dir."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if files or (p.is_dir() and not p.is_symlink()))


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return found if isinstance(found, dict) else None
