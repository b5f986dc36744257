"""Judging a boot's warmth from files and log (lifecycle.evidence.verdict, layout, untracked):
pure logic, on crafted inputs shaped like real caches and real container changes."""

from __future__ import annotations

import pytest

from lifecycle.evidence.layout import (
    CacheFile,
    artefact_kind,
    inventory,
    looks_like_jit_output,
    summarize,
    work_unit,
)
from lifecycle.evidence.verdict import (
    CacheJudged,
    RecordedUse,
    describe_boot,
    judge_boot,
    judge_cache,
    log_names,
    recorded_warmth,
)

PCH = "/tmp/torchinductor_root/precompiled_headers/c4x.h.gch"
BACKBONE = "torch_compile_cache/f216dd9a6a/rank_0_0/backbone"
INDUCTOR = f"{BACKBONE}/inductor_cache"


@pytest.mark.parametrize(
    ("before", "after", "compiled", "read", "verdict"),
    [
        (0, 0, 0, False, "empty"),
        (29, 0, 0, True, "empty"),  # an empty cache is empty, not warm
        (0, 29, 21, False, "cold-compiled"),
        (0, 1, 0, False, "cold-compiled"),  # it wrote into an empty cache: a JIT log is a write
        (29, 29, 0, True, "warm-hit"),
        (29, 29, 0, False, "unused"),  # nothing opened: whatever a log says
        (29, 40, 11, True, "mounted-but-missed"),  # read some, compiled the rest
        (29, 40, 11, False, "mounted-but-missed"),
    ],
)
def test_judge_cache(before: int, after: int, compiled: int, read: bool, verdict: str) -> None:
    assert judge_cache(before, after, compiled, read) == verdict


def test_log_names_a_path_inside_the_mount_only() -> None:
    lines = ["INFO Using cache directory: /var/cache/lifecycle/vllm/torch_compile_cache/x"]
    assert log_names(lines, "/var/cache/lifecycle/vllm")
    assert not log_names(lines, "/var/cache/lifecycle/vl")
    assert not log_names(lines, "/var/cache/lifecycle/triton")


def test_a_warm_boot_with_untracked_writes_is_partial() -> None:
    caches = [
        CacheJudged("vllm", "warm-hit", 0),
        CacheJudged("flashinfer", "empty", 0),
        CacheJudged("inductor", "unused", 0),
    ]
    untracked = summarize([(PCH, 155_000_000), ("/tmp/torchinductor_root/x/k.so", 5_000)])
    modes = {"vllm": "warm", "flashinfer": "warm", "inductor": "warm"}
    assert judge_boot(caches, untracked) == "partial"
    assert describe_boot(caches, untracked, modes) == (
        "warm (partial: 147.8 MiB written outside tracked caches)"
    )
    assert judge_boot(caches, None) == "warm-hit"
    assert describe_boot(caches, None, modes) == "warm"


def test_missed_names_the_cache_and_what_it_wrote() -> None:
    caches = [CacheJudged("vllm", "mounted-but-missed", 19), CacheJudged("triton", "unused", 0)]
    assert judge_boot(caches, None) == "mounted-but-missed"
    assert describe_boot(caches, None, {}) == "missed (vllm: +19 files while warm)"


def test_cold_and_empty_boots() -> None:
    cold = [CacheJudged("vllm", "cold-compiled", 21), CacheJudged("triton", "empty", 0)]
    assert describe_boot(cold, None, {"vllm": "cold"}) == "cold"
    empty = [CacheJudged("vllm", "empty", 0)]
    assert judge_boot(empty, None) == "empty"
    assert describe_boot(empty, None, {}) == "no JIT output"


def test_recorded_warmth_of_a_boot_recorded_before_verdicts() -> None:
    assert recorded_warmth([RecordedUse("vllm", "warm", None, 0)], []) == ("unknown", "-")
    uses = [RecordedUse("vllm", "warm", "warm-hit", 0)]
    assert recorded_warmth(uses, [(PCH, 1024 * 1024)]) == (
        "partial",
        "warm (partial: 1.0 MiB written outside tracked caches)",
    )


@pytest.mark.parametrize(
    ("path", "jit"),
    [
        (PCH, True),
        ("/tmp/torchinductor_root/fxgraph/ab/fabc/xyz", True),
        ("/root/.triton/cache/KEY/kernel.cubin", True),
        ("/root/.cache/flashinfer/0.7.0/90a/cached_ops/m/m.so", True),
        ("/root/.cache/vllm/torch_compile_cache/abc/rank_0_0/backbone/x.py", True),
        ("/root/.nv/ComputeCache/0/1/abc", True),
        ("/opt/app/build/kernel.o", True),
        ("/usr/lib/python3/dist-packages/x/__pycache__/y.cpython-311.pyc", False),
        ("/root/.cache/torch/__pycache__/a.pyc", False),
        ("/var/log/app.log", False),
        ("/root/.bash_history", False),
    ],
)
def test_what_looks_like_jit_output(path: str, jit: bool) -> None:
    assert looks_like_jit_output(path) is jit


def test_untracked_writes_are_told_by_root() -> None:
    summary = summarize(
        [
            (PCH, 155_000_000),
            ("/tmp/torchinductor_root/precompiled_headers/c4x.h", 100),
            ("/root/.triton/cache/K1/k.cubin", 2000),
            ("/opt/app/k.so", None),
        ]
    )
    assert (summary.files, summary.bytes, summary.unsized) == (4, 155_002_100, 1)
    assert summary.roots[0] == ("/tmp/torchinductor_root/precompiled_headers", 2, 155_000_100)
    assert ("/root/.triton/cache", 1, 2000) in summary.roots
    assert ("/opt/app", 1, 0) in summary.roots


@pytest.mark.parametrize(
    ("relative", "kind"),
    [
        (
            "torch_compile_cache/ab/rank_0_0/backbone/cache_key_factors.json",
            "vllm-cache-key-factors",
        ),
        ("torch_compile_cache/ab/rank_0_0/backbone/computation_graph.py", "vllm-graph"),
        (
            "torch_compile_cache/ab/rank_0_0/backbone/artifact_compile_range_1_8",
            "vllm-compiled-artifact",
        ),
        ("torch_compile_cache/torch_aot_compile/" + "e" * 64 + "/model", "vllm-aot-artifact"),
        (f"{INDUCTOR}/fxgraph/4c/f4cf/hhrc", "inductor-fxgraph"),
        (f"{INDUCTOR}/aotautograd/agub/nr7b", "inductor-aotautograd"),
        (f"{INDUCTOR}/33/c33z.main.cpp", "kernel-source"),
        (f"{INDUCTOR}/33/c33z.main.so", "shared-object"),
        (f"{INDUCTOR}/ou/couw.py", "generated-python"),
        ("precompiled_headers/c4x.h.gch", "precompiled-header"),
        ("KEY/_attn_fwd.cubin", "triton-kernel"),
        ("triton/0/KEY/_attn_fwd.json", "triton-metadata"),
        (".cache/flashinfer/0.7.0/90a/cached_ops/m/.ninja_log", "ninja"),
        (".cache/flashinfer/0.7.0/90a/cached_ops/m/m.so", "shared-object"),
        (".cache/flashinfer/0.7.0/90a/flashinfer_jit.log", "jit-log"),
        ("modelinfos/m.json", "other"),
    ],
)
def test_artefact_kinds_of_real_layouts(relative: str, kind: str) -> None:
    assert artefact_kind(relative) == kind


def test_inventory_counts_units_and_what_is_new() -> None:
    files = [
        CacheFile(f"{BACKBONE}/cache_key_factors.json", 407, False),
        CacheFile(f"{INDUCTOR}/fxgraph/4c/f4cf/hhrc", 102_465, False),
        CacheFile(f"{INDUCTOR}/aotautograd/agub/nr7b", 84_514, False),
        CacheFile(f"{INDUCTOR}/33/c33z.main.so", 30_000, False),
        CacheFile(f"{INDUCTOR}/3g/c3g2.so", 29_000, True),  # rebuilt: the .so was deleted
        CacheFile(".cache/flashinfer/0.7.0/90a/cached_ops/rope/rope.so", 1_000, True),
    ]
    found = inventory(files)
    assert found["units"]["compiled kernel"] == {"total": 2, "new": 1}
    assert found["units"]["inductor fx graph entry"] == {"total": 1, "new": 0}
    assert found["units"]["aotautograd entry"] == {"total": 1, "new": 0}
    assert found["units"]["flashinfer op"] == {"total": 1, "new": 1}
    assert found["compile_dirs"] == [{"dir": "f216dd9a6a/rank_0_0/backbone", "new": False}]
    assert found["artefacts"]["shared-object"] == {
        "files": 3, "bytes": 60_000, "new_files": 2, "new_bytes": 30_000
    }  # fmt: skip
    assert work_unit("notes.txt") is None
