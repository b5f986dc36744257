"""What a boot log says: vLLM's and FlashInfer's lines (older and newer wordings), Inductor's
cache counters, and the rows of ninja build logs."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

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
