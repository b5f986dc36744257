"""What JIT files are: a cache file's kind and unit of work, and JIT output outside the caches.

The layouts of vLLM's, Inductor's, Triton's and FlashInfer's caches are listed in docs/warm.md
("What a cache holds"). A boot's tracked caches are bind mounts, so its writes into them never
show in `docker diff`; what does show was written into the container's layer, lost with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

# Default cache roots of the JITs a vLLM engine runs, matched anywhere in a path.
_JIT_ROOTS = re.compile(
    r"(^/tmp/torchinductor_[^/]+(/|$))"
    r"|(/\.triton(/|$))"
    r"|(/\.cache/(vllm|flashinfer|torch|torch_extensions|triton|deep_gemm|tvm-ffi)(/|$))"
    r"|(/\.nv/ComputeCache(/|$))"
)
# What compilers and JIT builds leave behind.
_JIT_SUFFIXES = frozenset(
    {".so", ".o", ".gch", ".pch", ".cubin", ".ptx", ".ttir", ".ttgir", ".llir", ".hsaco"}
)
_JIT_NAMES = frozenset({".ninja_log", "build.ninja", ".ninja_deps"})
_NOISE = re.compile(r"(/__pycache__/)|(\.pyc$)")
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
    if name in _JIT_NAMES:
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


def looks_like_jit_output(path: str) -> bool:
    """Whether a path written in a container looks like a JIT's output: under a JIT's default
    cache root (Inductor puts its ~155 MB precompiled header under `/tmp/torchinductor_<user>`
    whatever `TORCHINDUCTOR_CACHE_DIR` says), or a compiler's output wherever it is."""
    if _NOISE.search(path):
        return False
    pure = PurePosixPath(path)
    return bool(_JIT_ROOTS.search(path) or pure.suffix in _JIT_SUFFIXES or pure.name in _JIT_NAMES)


def inside_any(path: str, roots: Iterable[str]) -> bool:
    """Whether `path` is one of `roots` or lies under one of them."""
    pure = PurePosixPath(path)
    return any(pure == PurePosixPath(root) or pure.is_relative_to(root) for root in roots)


@dataclass(frozen=True)
class UntrackedSummary:
    """What a boot wrote outside its tracked caches, told in one line per JIT root."""

    files: int
    bytes: int
    unsized: int  # files dockerd gave no size for
    roots: tuple[tuple[str, int, int], ...]  # (dir, files, bytes), biggest first


def summarize(writes: Sequence[tuple[str, int | None]]) -> UntrackedSummary:
    """(path, bytes) of each untracked file → totals, grouped by the dir two levels below
    the first JIT root or, for a stray file, its own dir."""
    groups: dict[str, list[int]] = {}
    unsized = 0
    for path, size in writes:
        unsized += size is None
        group = groups.setdefault(_root_of(path), [0, 0])
        group[0] += 1
        group[1] += size or 0
    roots = sorted(((d, n, b) for d, (n, b) in groups.items()), key=lambda r: (-r[2], r[0]))
    return UntrackedSummary(
        files=len(writes),
        bytes=sum(size or 0 for _, size in writes),
        unsized=unsized,
        roots=tuple(roots),
    )


def _root_of(path: str) -> str:
    match = _JIT_ROOTS.search(path)
    parent = str(PurePosixPath(path).parent)
    if match is None:
        return parent
    # /tmp/torchinductor_root/precompiled_headers/x.gch -> …/torchinductor_root/precompiled_headers
    rest = PurePosixPath(path[match.end() :].lstrip("/")).parts
    root = path[: match.end()].rstrip("/")
    return f"{root}/{rest[0]}" if len(rest) > 1 else root
