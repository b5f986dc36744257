"""A boot's evidence bundle: build files copied from its caches, facts parsed from its log.

The small text build files (ninja logs, FlashInfer's JIT log, vLLM's cache key factors and
graphs, Triton metadata) are copied out redacted; the log's vLLM and FlashInfer lines (older and
newer wordings) and Inductor's counters are parsed. `evidence.json` is written last: a bundle
without it is incomplete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lifecycle.home import write_atomic
from lifecycle.redact import Secrets, redact

EVIDENCE_JSON = "evidence.json"
SCHEMA_VERSION = 1
# File names that record a JIT build wherever they sit in a cache.
EVIDENCE_NAMES = frozenset(
    {
        ".ninja_log",
        "build.ninja",
        "flashinfer_jit.log",
        "cache_key_factors.json",
        "computation_graph.py",
        "vllm_compile_cache.py",
    }
)
# A ninja log over the per-file cap is not copied, but its rows are still worth parsing.
NINJA_PARSE_LIMIT = 16 * 1024 * 1024
WRITERS = 8  # threads writing the bundle: fsyncs overlap, and the disk commits them together


@dataclass(frozen=True)
class EvidenceBundle:
    """A written bundle: its directory, what evidence.json holds, what was copied or left out."""

    directory: Path
    summary: dict[str, Any]
    files: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


def is_evidence_file(cache: str, relative: str) -> bool:
    """Whether a file in cache `cache` at `relative` records how JIT work was done."""
    parts = relative.split("/")
    if parts[-1] in EVIDENCE_NAMES:
        return True
    # Inductor's C++ kernels and their Python wrappers (`<xx>/c<hash>.cpp|.py`), CUDA sources.
    if parts[-1].endswith((".cpp", ".cu", ".cuh")):
        return True
    if parts[-1].endswith(".py") and len(parts) > 1 and len(parts[-2]) == 2:
        return True
    # Triton metadata, in Triton's own cache or in the triton/ dir Inductor keeps.
    return parts[-1].endswith(".json") and (cache == "triton" or "triton" in parts[:-1])


@dataclass(frozen=True)
class _Found:
    cache: str
    relative: str
    size: int
    sha256: str
    content: bytes | None  # None past the read limit


def collect_evidence(
    caches: Mapping[str, Path],
    boot_log: str,
    out_dir: Path,
    *,
    secret_values: Secrets = (),
    cap_bytes: int = 4 * 1024 * 1024,
    per_file_cap: int = 256 * 1024,
    judged: Mapping[str, Mapping[str, Any]] | None = None,
    boot: Mapping[str, Any] | None = None,
) -> EvidenceBundle:
    """Write a redacted evidence bundle for one boot into `out_dir`, evidence.json last.

    `judged` adds to each cache what the end-of-boot scan found (mode, verdict, inventory of
    artefacts); `boot` the boot's own verdict and its writes outside the tracked caches."""
    if (out_dir / EVIDENCE_JSON).exists():
        raise FileExistsError(f"{out_dir} already holds an evidence bundle")
    for name, root in caches.items():
        if not name or name in (".", "..") or "/" in name:
            raise ValueError(f"cache name {name!r} cannot name a bundle directory")
        if out_dir.resolve().is_relative_to(root.resolve()):
            raise ValueError(f"bundle dir {out_dir} lies inside cache {name} ({root})")
    facts = parse_boot_log(redact(boot_log, secret_values))
    skipped: list[tuple[str, str]] = []
    per_cache: dict[str, dict[str, Any]] = {}
    found: list[_Found] = []
    for name, root in caches.items():
        per_cache[name] = {"root": redact(str(root), secret_values), "evidence": []}
        per_cache[name].update((judged or {}).get(name, {}))
        per_cache[name].update(_walk(name, root, per_file_cap, found, skipped))
    ninja: dict[str, list[dict[str, Any]]] = {}
    files: list[str] = []
    copied_bytes = 0
    copies: dict[Path, bytes] = {}  # two paths may redact to one name: the last one wins
    # Smallest first, so one big file cannot crowd out every other piece of evidence.
    for item in sorted(found, key=lambda f: (f.size, f.cache, f.relative)):
        relative = redact(item.relative, secret_values)
        text = _text(item.content)
        redacted = redact(text, secret_values).encode() if text is not None else None
        entry: dict[str, Any] = {"path": relative, "size": item.size, "copied": False}
        # A digest of a file known but for its secret would let anyone test guesses offline.
        changed = redacted is not None and redacted != item.content
        entry.update(sha256=None if changed else item.sha256, redacted=changed)
        per_cache[item.cache]["evidence"].append(entry)
        if redacted is not None and item.relative.endswith(".ninja_log"):
            rows = parse_ninja_log(redacted.decode())
            ninja[f"{item.cache}/{relative}"] = [dataclasses.asdict(row) for row in rows]
        reason = _why_not_copied(item, redacted, per_file_cap, cap_bytes - copied_bytes)
        if reason is not None or redacted is None:
            skipped.append((f"{item.cache}/{relative}", reason or "binary"))
            continue
        copies[out_dir / item.cache / relative] = redacted
        files.append(f"{item.cache}/{relative}")
        copied_bytes += len(redacted)
        entry["copied"] = True
    for cache in per_cache.values():
        cache["evidence"].sort(key=lambda entry: entry["path"])
    summary: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        # From the log alone (`boot` judges files and log); unsure when lines it reads were
        # left out of a flooded log (lifecycle.boot.log).
        "verdict": "inconclusive" if _facts_left_out(boot) else facts.verdict(),
        "boot": dict(boot or {}),
        "log": facts.to_dict(),
        "caches": per_cache,
        "ninja": ninja,
        "copied_bytes": copied_bytes,
        "caps": {"cap_bytes": cap_bytes, "per_file_cap": per_file_cap},
        "skipped": [{"path": path, "reason": reason} for path, reason in skipped],
    }
    _write_all(copies)
    # Every string of the summary, paths the engine opened included (a JIT may name a file by
    # a token), is redacted, not only the copied files.
    text = redact(json.dumps(summary, indent=1), secret_values)
    write_atomic(out_dir / EVIDENCE_JSON, text.encode() + b"\n")
    _fsync_dir(out_dir)
    return EvidenceBundle(out_dir, summary, tuple(files), tuple(skipped))


def _walk(
    name: str, root: Path, per_file_cap: int, found: list[_Found], skipped: list[tuple[str, str]]
) -> dict[str, int]:
    """Evidence files of one cache, read through dir fds so no symlink is ever followed."""
    seen = {"files_seen": 0, "bytes_seen": 0}
    try:
        root_stat = os.lstat(root)
    except OSError as err:
        skipped.append((name, f"cache root unreadable: {err.strerror}"))
        return seen
    if not stat.S_ISDIR(root_stat.st_mode):
        skipped.append((name, f"cache root is not a directory ({_kind(root_stat.st_mode)})"))
        return seen

    def unreadable(err: OSError) -> None:
        # fwalk names the entry relative to its parent dir only.
        skipped.append((name, f"unreadable: {err.filename}: {err.strerror}"))

    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, onerror=unreadable):
        prefix = os.path.relpath(dirpath, root)
        prefix = "" if prefix == "." else prefix + "/"
        for entry in sorted(dirnames + filenames):
            try:
                st = os.stat(entry, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:  # a lock or temp file that came and went
                continue
            if stat.S_ISDIR(st.st_mode):
                continue
            if entry in dirnames:
                dirnames.remove(entry)  # a symlink to a dir: never walk into it
            relative = prefix + entry
            if not stat.S_ISREG(st.st_mode):
                skipped.append((f"{name}/{relative}", _kind(st.st_mode)))
                continue
            seen["files_seen"] += 1
            seen["bytes_seen"] += st.st_size
            if is_evidence_file(name, relative):
                limit = max(per_file_cap, NINJA_PARSE_LIMIT if entry == ".ninja_log" else 0)
                try:
                    found.append(_read(name, relative, entry, dirfd, limit))
                except OSError as err:
                    skipped.append((f"{name}/{relative}", f"unreadable: {err.strerror}"))
    return seen


def _read(cache: str, relative: str, entry: str, dirfd: int, limit: int) -> _Found:
    # O_NOFOLLOW and O_NONBLOCK: a file swapped for a symlink or FIFO since the stat fails or
    # opens without blocking, and fstat below rejects it.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(entry, flags, dir_fd=dirfd)
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(0, f"became a {_kind(mode)}")
        digest, kept, size = hashlib.sha256(), bytearray(), 0
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
            if size <= limit:
                kept += chunk
    return _Found(cache, relative, size, digest.hexdigest(), bytes(kept) if size <= limit else None)


def _facts_left_out(boot: Mapping[str, Any] | None) -> bool:
    return bool(((boot or {}).get("log_cut") or {}).get("fact_lines_left_out"))


def _text(content: bytes | None) -> str | None:
    if content is None or b"\0" in content:
        return None
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _why_not_copied(
    item: _Found, redacted: bytes | None, per_file_cap: int, room: int
) -> str | None:
    if item.size > per_file_cap:
        return f"over the per-file cap ({item.size} > {per_file_cap} bytes)"
    if redacted is None:
        return "binary"
    if len(redacted) > room:
        return f"over the bundle cap ({len(redacted)} bytes, {max(room, 0)} left)"
    return None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "not a regular file"


def _write_all(copies: Mapping[Path, bytes]) -> None:
    """Write the copied files, each durable before evidence.json names it; on a few threads,
    because each waits on its own fsync (1,340 small files here: 0.55 s on one, 0.25 s on 8)."""
    with ThreadPoolExecutor(WRITERS, thread_name_prefix="evidence") as pool:
        for _ in pool.map(lambda copy: _write_copy(*copy), copies.items()):
            pass


def _write_copy(path: Path, data: bytes) -> None:
    # Straight to its name, no temp file and rename: the bundle dir is new, and a bundle is
    # complete only once evidence.json, written last, is in place.
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o600), "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# What a boot log says: vLLM's and FlashInfer's lines, Inductor's counters, ninja's rows.
Verdict = Literal["compiled", "loaded", "mixed", "no-compile-activity"]

_NUM = r"(\d+(?:\.\d+)?)"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Searched anywhere in a line: newer vLLM prefixes lines with `(EngineCore_DP0 pid=12)`.
_PATTERNS: dict[str, re.Pattern[str]] = {
    "cache_dir": re.compile(r"Using cache directory: (.+?) for vLLM's torch\.compile"),
    "cache_disabled": re.compile(r"(vLLM's torch\.compile cache is disabled)"),
    "dynamo": re.compile(rf"Dynamo bytecode transform time: {_NUM} s"),
    # "for dynamic shape" (older) or "for compile range %s" (newer).
    "compile": re.compile(rf"Compiling a graph for .+? takes {_NUM} s"),
    "load": re.compile(
        rf"Directly load the compiled graph(?:\(s\))? for .+? from the cache, took {_NUM} s"
    ),
    "aot": re.compile(r"Directly load AOT compilation from path (\S.*?)\s*$"),
    "total": re.compile(rf"torch\.compile (?:takes|took) {_NUM} s in total"),
    # Newer releases append "(compilation: ...)" after the total.
    "init": re.compile(
        rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} (?:seconds|s)\b"
    ),
    "kv_gib": re.compile(rf"Available KV cache memory: {_NUM} GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: (\d[\d,_]*) tokens"),
    "jit_build": re.compile(r"Building JIT module ([^\s;]+)"),
    "jit_load": re.compile(r"Loading JIT ops: ([^\s;]+)"),
    # vLLM's hash of each factor group and the dir they key (logged at DEBUG by vLLM).
    "factors": re.compile(
        r"torch\.compile cache factors: env=(\S+) cfg=(\S+) comp=(\S+) code=(\S+) dir=(\S.*?)\s*$"
    ),
    # Inductor's own counters, as an engine prints torch._dynamo.utils.counters.
    "counters": re.compile(r"inductor counters: ((?:\w+=\d+\s*)+)$"),
    "external_hit": re.compile(rf"External prefix cache hit rate: {_NUM}%"),
}


@dataclass(frozen=True)
class LogFacts:
    """What a boot log says about compile caches and the KV cache; a scalar is its last value."""

    compile_cache_dir: str | None
    compile_cache_disabled: bool
    dynamo_transform_s: list[float]
    graph_compiles_s: list[float]
    graph_cache_loads_s: list[float]
    aot_loads: list[str]
    torch_compile_total_s: float | None
    init_engine_s: float | None
    kv_cache_gib: float | None
    kv_cache_tokens: int | None
    jit_modules_built: list[str]
    external_prefix_hit_rate: list[float]
    lines: list[str]
    jit_modules_loaded: list[str] = dataclasses.field(default_factory=list)
    # Each "torch.compile cache factors" line: env, cfg, comp and code hashes and the dir.
    compile_factors: list[dict[str, str]] = dataclasses.field(default_factory=list)
    # Summed over the lines that print them: fxgraph_cache_hit, autograd_cache_miss, ...
    inductor_counters: dict[str, int] = dataclasses.field(default_factory=dict)

    def verdict(self) -> Verdict:
        """Whether the boot compiled, loaded from cache, both, or neither; from the log alone."""
        misses = self.inductor_counters.get("fxgraph_cache_miss", 0)
        hits = self.inductor_counters.get("fxgraph_cache_hit", 0)
        compiled = bool(self.graph_compiles_s or self.jit_modules_built or misses)
        loaded = bool(self.graph_cache_loads_s or self.aot_loads or self.jit_modules_loaded or hits)
        if compiled and loaded:
            return "mixed"
        if compiled:
            return "compiled"
        return "loaded" if loaded else "no-compile-activity"

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-ready values, with the verdict."""
        return {**dataclasses.asdict(self), "verdict": self.verdict()}


@dataclass(frozen=True)
class NinjaRow:
    """One step of a ninja build log (times in ms since the build started)."""

    output: str
    start_ms: int
    end_ms: int
    duration_ms: int


def is_fact_line(line: str) -> bool:
    """Whether `parse_boot_log` takes a fact from this line."""
    plain = _ANSI.sub("", line)
    return any(pattern.search(plain) for pattern in _PATTERNS.values())


def parse_boot_log(text: str) -> LogFacts:
    """The compile, JIT and KV cache facts of a boot log (pass it redacted)."""
    matches: dict[str, list[re.Match[str]]] = {key: [] for key in _PATTERNS}
    lines = []
    for line in text.splitlines():
        plain = _ANSI.sub("", line)
        matched = False
        for key, pattern in _PATTERNS.items():
            if match := pattern.search(plain):
                matches[key].append(match)
                matched = True
        if matched:
            lines.append(line)
    found = {key: [m[1] for m in found] for key, found in matches.items()}
    return LogFacts(
        compile_cache_dir=found["cache_dir"][-1] if found["cache_dir"] else None,
        compile_cache_disabled=bool(found["cache_disabled"]),
        dynamo_transform_s=[float(v) for v in found["dynamo"]],
        graph_compiles_s=[float(v) for v in found["compile"]],
        graph_cache_loads_s=[float(v) for v in found["load"]],
        aot_loads=found["aot"],
        torch_compile_total_s=_last_float(found["total"]),
        init_engine_s=_last_float(found["init"]),
        kv_cache_gib=_last_float(found["kv_gib"]),
        kv_cache_tokens=_last_int(found["kv_tokens"]),
        jit_modules_built=found["jit_build"],
        external_prefix_hit_rate=[float(v) for v in found["external_hit"]],
        lines=lines,
        jit_modules_loaded=found["jit_load"],
        compile_factors=[
            dict(zip(("env", "cfg", "comp", "code", "dir"), m.groups(), strict=True))
            for m in matches["factors"]
        ],
        inductor_counters=_counters(found["counters"]),
    )


def _counters(lines: list[str]) -> dict[str, int]:
    """`fxgraph_cache_hit=4 fxgraph_cache_miss=0 …` of every counters line, summed by name."""
    total: dict[str, int] = {}
    for line in lines:
        for pair in line.split():
            name, _, value = pair.partition("=")
            total[name] = total.get(name, 0) + int(value)
    return total


def _last_float(values: list[str]) -> float | None:
    return float(values[-1]) if values else None


def _last_int(values: list[str]) -> int | None:
    # "461,455": the token count is printed with thousands separators.
    return int(re.sub(r"[,_]", "", values[-1])) if values else None


def parse_ninja_log(text: str) -> list[NinjaRow]:
    """Rows of a ninja log (v5: start, end, mtime, output, hash; tab-separated, ms)."""
    rows = []
    for line in text.splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 5:
            continue
        try:
            start, end = int(fields[0]), int(fields[1])
        except ValueError:
            continue
        rows.append(NinjaRow(fields[3], start, end, end - start))
    return rows
