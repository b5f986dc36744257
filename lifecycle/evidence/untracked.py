"""JIT output written outside the tracked caches: which container changes look like it.

A boot's tracked caches are bind mounts, so the engine's writes into them never show in the
container's own changes (`docker diff`); everything that does show was written into the
container's layer and is lost with it. Most of that is noise (`__pycache__`, logs); what
looks like a JIT's output is kept: anything under a JIT's default cache root (Inductor's
`/tmp/torchinductor_<user>`, where torch puts its ~155 MB precompiled header whatever
`TORCHINDUCTOR_CACHE_DIR` says; `~/.triton`, `~/.cache/{vllm,flashinfer,torch,…}`, CUDA's
`~/.nv/ComputeCache`) and any file with a compiler's output suffix wherever it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

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


def looks_like_jit_output(path: str) -> bool:
    """Whether a path written in a container looks like a JIT's output (see module doc)."""
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
