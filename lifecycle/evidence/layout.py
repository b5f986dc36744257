"""What the files of real JIT caches are, by where they sit and what they are called.

- vLLM: `torch_compile_cache/<hash10>/rank_<r>_<dp>/<prefix>/` holding `cache_key_factors.json`,
  `computation_graph.py`, `vllm_compile_cache.py`, `artifact_compile_range_*`; newer releases
  also `torch_compile_cache/torch_aot_compile/<sha256>/`.
- Inductor (its own dir, or `inductor_cache/` inside a vLLM compile dir): `fxgraph/<xx>/<key>/`
  entries and `aotautograd/<key>/` entries (pickles), `<xx>/c<hash>.cpp` kernels built into
  `.so` files, `<xx>/c<hash>.py` wrappers, precompiled headers (`.gch`), `locks/`.
- Triton: one dir per kernel key with `.json` metadata and `.cubin`/`.ptx`/`.ttir`/`.ttgir`/`.llir`.
- FlashInfer: `cached_ops/<module>/` with `build.ninja`, `.ninja_log`, `*.o` and `<module>.so`;
  `generated/`, `cubins/`, `flashinfer_jit.log`.

`inventory` counts each kind of artefact and each unit of compiled work (a compile dir, an FX
graph, a kernel, a built op), telling apart what this boot created from what it found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_COMPILE_DIR = re.compile(r"(^|/)torch_compile_cache/([^/]+)/(rank_\d+_\d+)/([^/]+)/")
_TRITON_FILES = frozenset({".cubin", ".ptx", ".ttir", ".ttgir", ".llir", ".hsaco", ".fatbin"})
_SOURCES = frozenset({".cpp", ".cu", ".c", ".h", ".cuh", ".hpp"})


def artefact_kind(relative: str) -> str:
    """The kind of one cache file, from its path relative to the cache root."""
    parts, name, suffix = _split(relative)
    if name == "cache_key_factors.json":
        return "vllm-cache-key-factors"
    if name == "computation_graph.py":
        return "vllm-graph"
    if name == "vllm_compile_cache.py" or name.startswith("artifact_compile_range"):
        return "vllm-compiled-artifact"
    if "torch_aot_compile" in parts:
        return "vllm-aot-artifact"
    if "fxgraph" in parts:
        return "inductor-fxgraph"
    if "aotautograd" in parts:
        return "inductor-aotautograd"
    if suffix in (".gch", ".pch"):
        return "precompiled-header"
    if suffix == ".so":
        return "shared-object"
    if suffix == ".o":
        return "object"
    if suffix in _SOURCES:
        return "kernel-source"
    if suffix in _TRITON_FILES:
        return "triton-kernel"
    if suffix == ".json" and ("triton" in relative or "triton_cache" in parts):
        return "triton-metadata"
    if name in (".ninja_log", "build.ninja", ".ninja_deps"):
        return "ninja"
    if name.endswith(".log"):
        return "jit-log"
    if suffix == ".py":
        return "generated-python"  # Inductor's wrapper code, FlashInfer's generated sources
    return "other"


def work_unit(relative: str) -> tuple[str, str] | None:
    """(kind, name) of the unit of compiled work a file belongs to, if it marks one: one
    file per unit is chosen, so counting them counts units."""
    parts, name, suffix = _split(relative)
    if name == "cache_key_factors.json" and (match := _COMPILE_DIR.search(relative)):
        return "vllm compile dir", "/".join(match.groups()[1:])
    if "fxgraph" in parts and len(parts) >= parts.index("fxgraph") + 4:
        return "inductor fx graph entry", "/".join(parts[parts.index("fxgraph") + 2 :])
    if "aotautograd" in parts and len(parts) >= parts.index("aotautograd") + 3:
        return "aotautograd entry", "/".join(parts[parts.index("aotautograd") + 1 :])
    if suffix == ".so" and "cached_ops" in parts:
        return "flashinfer op", name.removesuffix(suffix)
    if suffix == ".so":
        return "compiled kernel", name
    if suffix in (".cubin", ".hsaco"):
        return "triton kernel", "/".join(parts[:-1])
    if suffix in (".gch", ".pch"):
        return "precompiled header", name
    return None


def _split(relative: str) -> tuple[list[str], str, str]:
    """(parts, name, suffix) as PurePosixPath gives them, with string operations only: a
    scan may hold 20k files, and this runs for each at the end of every boot."""
    parts = relative.split("/")
    name = parts[-1]
    dot = name.rfind(".")
    return parts, name, name[dot:] if dot > 0 else ""


@dataclass(frozen=True)
class CacheFile:
    """A file of a cache as a scan saw it."""

    path: str  # relative to the cache root
    size: int
    new: bool  # created or changed by the boot being judged


def inventory(files: Iterable[CacheFile]) -> dict[str, Any]:
    """Per artefact kind and per unit of work: how many, how big, and how many are new."""
    kinds: dict[str, dict[str, int]] = {}
    units: dict[str, dict[str, int]] = {}
    compile_dirs: list[dict[str, Any]] = []
    for file in files:
        kind = kinds.setdefault(
            artefact_kind(file.path), {"files": 0, "bytes": 0, "new_files": 0, "new_bytes": 0}
        )
        kind["files"] += 1
        kind["bytes"] += file.size
        kind["new_files"] += file.new
        kind["new_bytes"] += file.size if file.new else 0
        if (unit := work_unit(file.path)) is not None:
            counts = units.setdefault(unit[0], {"total": 0, "new": 0})
            counts["total"] += 1
            counts["new"] += file.new
            if unit[0] == "vllm compile dir":
                compile_dirs.append({"dir": unit[1], "new": file.new})
    return {
        "artefacts": dict(sorted(kinds.items())),
        "units": dict(sorted(units.items())),
        "compile_dirs": sorted(compile_dirs, key=lambda d: d["dir"]),
    }
