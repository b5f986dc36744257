"""Boot evidence: log facts in both wordings, and bundles built from real demo engine caches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from lifecycle.demo.upstream import ensure_upstream_repo
from lifecycle.evidence.bundle import (
    EVIDENCE_JSON,
    EvidenceBundle,
    LogFacts,
    collect_evidence,
    is_evidence_file,
    parse_boot_log,
    parse_ninja_log,
)
from tests.test_demo_engine import checkout

BOOT_LOGS = Path(__file__).parent / "data" / "boot_logs"
CACHE_ENV = {
    "vllm": "VLLM_CACHE_ROOT",
    "flashinfer": "FLASHINFER_WORKSPACE_BASE",
    "triton": "TRITON_CACHE_DIR",
    "inductor": "TORCHINDUCTOR_CACHE_DIR",
}
SECRET = "s3cr3t-Value-91827"
OPS = "flashinfer/.cache/flashinfer/0.2.0/cpu/cached_ops/demo_mix_31"


def vllm(message: str) -> str:
    return f"INFO 05-18 22:40:31 [backends.py:600] {message}"


def flashinfer(message: str) -> str:
    return f"2026-05-18 22:40:31,250 - INFO - flashinfer.jit: {message}"


def test_older_cold_log() -> None:
    facts = parse_boot_log((BOOT_LOGS / "older_vllm_cold.log").read_text())
    assert facts.compile_cache_dir == (
        "/root/.cache/vllm/torch_compile_cache/3f9c2a41b7/rank_0_0/backbone"
    )
    assert not facts.compile_cache_disabled
    assert facts.dynamo_transform_s == [6.12]
    assert facts.graph_compiles_s == [24.87]
    assert facts.graph_cache_loads_s == [] and facts.aot_loads == []
    assert facts.torch_compile_total_s == 30.99
    assert facts.init_engine_s == 62.40
    assert (facts.kv_cache_gib, facts.kv_cache_tokens) == (41.27, 338064)
    assert facts.jit_modules_built == [] and facts.external_prefix_hit_rate == []
    assert len(facts.lines) == 7
    assert facts.verdict() == "compiled"


def test_newer_warm_log() -> None:
    facts = parse_boot_log((BOOT_LOGS / "newer_vllm_warm.log").read_text())
    assert facts.compile_cache_dir is not None and facts.compile_cache_dir.endswith("backbone")
    assert facts.graph_compiles_s == []
    assert facts.graph_cache_loads_s == [1.215]
    [aot] = facts.aot_loads
    assert aot.startswith("/root/.cache/vllm/torch_compile_cache/torch_aot_compile/")
    assert aot.endswith("/rank_0_0/model")
    assert facts.torch_compile_total_s == 7.31
    assert facts.init_engine_s == 21.62
    assert (facts.kv_cache_gib, facts.kv_cache_tokens) == (40.95, 335440)
    # Only the external (CPU tier) rate; the GPU prefix cache rate on the same line is not it.
    assert facts.external_prefix_hit_rate == [87.5, 91.2]
    assert all(line.startswith("(") for line in facts.lines)  # kept verbatim, prefix and all
    assert facts.verdict() == "loaded"


def test_newer_mixed_log() -> None:
    facts = parse_boot_log((BOOT_LOGS / "newer_vllm_mixed.log").read_text())
    assert facts.graph_cache_loads_s == [1.307]
    assert facts.jit_modules_built == [
        "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_head_dim_qk_128",
        "sampling",
    ]
    assert facts.init_engine_s == 121.09
    assert facts.verdict() == "mixed"


@pytest.mark.parametrize(
    ("older", "newer", "field", "value"),
    [
        (
            "Compiling a graph for dynamic shape takes 21.07 s",
            "Compiling a graph for compile range (1, 8192) takes 21.07 s",
            "graph_compiles_s",
            [21.07],
        ),
        (
            "Directly load the compiled graph(s) for dynamic shape from the cache, took 1.204 s",
            "Directly load the compiled graph(s) for compile range (1, 8192) from the cache, "
            "took 1.204 s",
            "graph_cache_loads_s",
            [1.204],
        ),
        (
            "torch.compile takes 30.99 s in total",
            "torch.compile took 30.99 s in total",
            "torch_compile_total_s",
            30.99,
        ),
        (
            "init engine (profile, create kv cache, warmup model) took 62.40 seconds",
            "init engine (profile, create kv cache, warmup model) took 62.40 seconds "
            "(compilation: 30.99 s)",
            "init_engine_s",
            62.40,
        ),
        (
            "GPU KV cache size: 338064 tokens",
            "GPU KV cache size: 338,064 tokens",
            "kv_cache_tokens",
            338064,
        ),
        (
            "Using cache directory: /c/vllm/torch_compile_cache/ab/rank_0_0/backbone for "
            "vLLM's torch.compile",
            "Using cache directory: /c/vllm/torch_compile_cache/ab/rank_0_0/backbone for "
            "vLLM's torch.compile",
            "compile_cache_dir",
            "/c/vllm/torch_compile_cache/ab/rank_0_0/backbone",
        ),
    ],
)
def test_both_wordings(older: str, newer: str, field: str, value: object) -> None:
    for message in (older, newer):
        plain = parse_boot_log(vllm(message) + "\n")
        prefixed = parse_boot_log(f"(EngineCore_DP0 pid=7) \x1b[32m{vllm(message)}\x1b[0m\n")
        assert getattr(plain, field) == value, message
        assert getattr(prefixed, field) == value, message


def test_single_lines() -> None:
    text = "\n".join(
        [
            vllm("vLLM's torch.compile cache is disabled."),
            vllm("Dynamo bytecode transform time: 5.31 s"),
            vllm("Directly load AOT compilation from path /c/torch_aot_compile/ab12/rank_0_0/m"),
            vllm("Available KV cache memory: 41.27 GiB"),
            vllm("Prefix cache hit rate: 12.0%, External prefix cache hit rate: 45.5%"),
            flashinfer("Building JIT module sampling; this can take several minutes on first use."),
            vllm("max_num_batched_tokens=8192, unrelated line"),
        ]
    )
    facts = parse_boot_log(text)
    assert facts.compile_cache_disabled and facts.compile_cache_dir is None
    assert facts.dynamo_transform_s == [5.31]
    assert facts.aot_loads == ["/c/torch_aot_compile/ab12/rank_0_0/m"]
    assert facts.kv_cache_gib == 41.27
    assert facts.external_prefix_hit_rate == [45.5]
    assert facts.jit_modules_built == ["sampling"]
    assert len(facts.lines) == 6
    assert facts.verdict() == "mixed"  # built a JIT module, loaded AOT compilation


@pytest.mark.parametrize(
    ("messages", "verdict"),
    [
        (["Compiling a graph for dynamic shape takes 1.00 s"], "compiled"),
        ([], "no-compile-activity"),
        (["torch.compile takes 3.00 s in total"], "no-compile-activity"),
        (["Directly load AOT compilation from path /x"], "loaded"),
        (
            [
                "Directly load the compiled graph(s) for dynamic shape from the cache, took 1 s",
                "Compiling a graph for dynamic shape takes 1.00 s",
            ],
            "mixed",
        ),
    ],
)
def test_verdicts(messages: list[str], verdict: str) -> None:
    assert parse_boot_log("\n".join(vllm(m) for m in messages)).verdict() == verdict


def test_demo_logs_as_committed() -> None:
    cold = parse_boot_log((BOOT_LOGS / "demo_0.2.0_cold.log").read_text())
    warm = parse_boot_log((BOOT_LOGS / "demo_0.2.0_warm.log").read_text())
    assert cold.verdict() == "compiled" and warm.verdict() == "loaded"
    assert cold.jit_modules_built == ["demo_mix_31"] and warm.jit_modules_built == []
    assert len(cold.graph_compiles_s) == 1 and len(warm.graph_cache_loads_s) == 1
    assert cold.kv_cache_tokens == warm.kv_cache_tokens == 448348
    assert cold.compile_cache_dir == warm.compile_cache_dir


def test_ninja_log_rows() -> None:
    text = "# ninja log v5\n0\t58\t1795\tdemo.o\tab12\n58\t72\t1796\tdemo.so\tcd34\nbroken\n"
    rows = parse_ninja_log(text)
    assert [(r.output, r.duration_ms) for r in rows] == [("demo.o", 58), ("demo.so", 14)]


def test_evidence_file_names() -> None:
    assert is_evidence_file("flashinfer", ".cache/flashinfer/0.7.0/90a/cached_ops/m/.ninja_log")
    assert is_evidence_file("vllm", "torch_compile_cache/ab/rank_0_0/backbone/computation_graph.py")
    assert is_evidence_file("triton", "KEY/demo_mix.json")
    assert is_evidence_file("inductor", "triton/0/KEY/kernel.json")
    assert not is_evidence_file("vllm", "modelinfos/m.json")
    assert not is_evidence_file("flashinfer", ".cache/flashinfer/0.7.0/90a/cached_ops/m/m.so")


# --- bundles from the real demo engine --------------------------------------------------


def demo_release(root: Path) -> Path:
    """The demo engine's 0.2.0 sources, as its upstream repo tags them."""
    upstream = ensure_upstream_repo(root / "upstream.git")
    return checkout(upstream, "v0.2.0", root / "demo-0.2.0")


def boot_demo(engine: Path, caches: Path) -> str:
    """One demo engine boot with host python on the four caches under `caches`; its log."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV.values()}
    env.update({var: str(caches / name) for name, var in CACHE_ENV.items()})
    env.update(
        PYTHONPATH=str(engine),
        PYTHONDONTWRITEBYTECODE="1",
        HOME=str(caches / "home"),
        # Folded into cache_key_factors.json: a secret the engine writes into its cache.
        DEMOLLM_GRAPH_BATCH=SECRET,
    )
    done = subprocess.run(
        [sys.executable, "-m", "demollm.serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The secret reaches the log too, as an engine printing its environment would.
    return done.stdout + f"INFO 11-29 21:39:05 [envs.py:1] DEMOLLM_GRAPH_BATCH={SECRET}\n"


@dataclass(frozen=True)
class DemoBoots:
    caches: Path
    cold_log: str
    warm_log: str
    cold: EvidenceBundle
    warm: EvidenceBundle


def cache_map(caches: Path) -> dict[str, Path]:
    return {name: caches / name for name in CACHE_ENV}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoBoots:
    """Boot the demo engine cold then warm, collecting a bundle after each boot."""
    root = tmp_path_factory.mktemp("demo")
    engine = demo_release(root)
    caches = root / "caches"
    secrets = {"DEMOLLM_GRAPH_BATCH": SECRET}
    cold_log = boot_demo(engine, caches)
    cold = collect_evidence(cache_map(caches), cold_log, root / "cold", secret_values=secrets)
    warm_log = boot_demo(engine, caches)
    warm = collect_evidence(cache_map(caches), warm_log, root / "warm", secret_values=secrets)
    return DemoBoots(caches, cold_log, warm_log, cold, warm)


def read_summary(bundle: EvidenceBundle) -> dict[str, object]:
    data: dict[str, object] = json.loads((bundle.directory / EVIDENCE_JSON).read_text())
    return data


def test_cold_bundle_shows_the_compile_and_the_ninja_build(demo: DemoBoots) -> None:
    summary = read_summary(demo.cold)
    assert summary == demo.cold.summary
    assert summary["verdict"] == "compiled"
    log = demo.cold.summary["log"]
    assert any("Compiling a graph for dynamic shape takes" in line for line in log["lines"])
    assert any("Building JIT module demo_mix_31" in line for line in log["lines"])
    assert log["jit_modules_built"] == ["demo_mix_31"]
    rows = demo.cold.summary["ninja"][f"{OPS}/.ninja_log"]
    assert [row["output"] for row in rows] == ["demo_mix_31.o", "demo_mix_31.so"]
    assert all(row["duration_ms"] >= 0 for row in rows)
    copied = set(demo.cold.files)
    for name in ("build.ninja", ".ninja_log"):
        assert f"{OPS}/{name}" in copied
    assert "flashinfer/.cache/flashinfer/0.2.0/cpu/flashinfer_jit.log" in copied
    backbone = {Path(f).name for f in copied if f.startswith("vllm/")}
    assert backbone == {"computation_graph.py", "vllm_compile_cache.py", "cache_key_factors.json"}
    assert {Path(f).name for f in copied if f.startswith("triton/")} == {
        "demo_mix.json",
        "__grp__demo_mix.json",
    }
    assert not any(f.endswith((".so", ".o", ".c", ".llir")) for f in copied)
    for relative in copied:
        assert (demo.cold.directory / relative).is_file()
    ninja_copy = (demo.cold.directory / OPS / ".ninja_log").read_text()
    assert ninja_copy == (demo.caches / OPS / ".ninja_log").read_text()


def test_evidence_listing_has_digests_and_sizes(demo: DemoBoots) -> None:
    listing = {e["path"]: e for e in demo.cold.summary["caches"]["flashinfer"]["evidence"]}
    entry = listing[".cache/flashinfer/0.2.0/cpu/cached_ops/demo_mix_31/build.ninja"]
    source = demo.caches / OPS / "build.ninja"
    assert entry["size"] == source.stat().st_size and entry["copied"]
    assert entry["sha256"] is not None and len(entry["sha256"]) == 64
    # The file that held the secret is listed without a digest: one would let guesses be tested.
    [factors] = [
        e for e in demo.cold.summary["caches"]["vllm"]["evidence"] if e["path"].endswith(".json")
    ]
    assert factors["redacted"] and factors["sha256"] is None
    assert demo.cold.summary["caches"]["inductor"]["files_seen"] == 1


def test_warm_bundle_is_loaded(demo: DemoBoots) -> None:
    assert demo.warm.summary["verdict"] == "loaded"
    log = demo.warm.summary["log"]
    assert log["graph_compiles_s"] == [] and len(log["graph_cache_loads_s"]) == 1
    assert log["jit_modules_built"] == []
    # The cache still holds the cold boot's build log: evidence of how it was built, not of now.
    assert f"{OPS}/.ninja_log" in demo.warm.summary["ninja"]


def test_live_demo_logs_parse_like_the_committed_ones(demo: DemoBoots) -> None:
    for live, committed in ((demo.cold_log, "cold"), (demo.warm_log, "warm")):
        facts = parse_boot_log(live)
        kept = parse_boot_log((BOOT_LOGS / f"demo_0.2.0_{committed}.log").read_text())
        assert facts.verdict() == kept.verdict()
        assert len(facts.lines) == len(kept.lines)


def test_secret_is_nowhere_in_the_bundle(demo: DemoBoots) -> None:
    factors = next(demo.caches.joinpath("vllm").rglob("cache_key_factors.json"))
    assert SECRET in factors.read_text() and SECRET in demo.cold_log  # it was there to leak
    for bundle in (demo.cold, demo.warm):
        for path in bundle.directory.rglob("*"):
            assert SECRET not in str(path.relative_to(bundle.directory))
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
        assert SECRET not in json.dumps(bundle.summary)
        [copy] = bundle.directory.joinpath("vllm").rglob("cache_key_factors.json")
        assert '"DEMOLLM_GRAPH_BATCH": "<redacted:DEMOLLM_GRAPH_BATCH>"' in copy.read_text()


def test_bundle_is_not_collected_twice(demo: DemoBoots) -> None:
    with pytest.raises(FileExistsError):
        collect_evidence(cache_map(demo.caches), demo.cold_log, demo.cold.directory)
    with pytest.raises(ValueError, match="inside cache"):
        collect_evidence(cache_map(demo.caches), "", demo.caches / "vllm" / "bundle")


# --- caps, links, FIFOs, crashes ----------------------------------------------------------


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def test_caps_keep_the_smallest_and_record_the_rest(tmp_path: Path) -> None:
    ops = tmp_path / "fi" / "cached_ops"
    write(ops / "a" / "build.ninja", "a" * 100)
    write(ops / "b" / "build.ninja", "b" * 200)
    write(ops / "c" / "build.ninja", "c" * 300)
    write(ops / "d" / "build.ninja", b"\x00\x01binary" * 10)
    write(tmp_path / "fi" / "flashinfer_jit.log", "x" * 1000)
    rows = "".join(f"{i}\t{i + 5}\t0\tout{i}.o\tff\n" for i in range(60))
    write(ops / "e" / ".ninja_log", "# ninja log v5\n" + rows)
    write(ops / "a" / "a.so", b"\x7fELF" + b"\x00" * 5000)
    bundle = collect_evidence(
        {"flashinfer": tmp_path / "fi"}, "", tmp_path / "out", cap_bytes=350, per_file_cap=500
    )
    assert bundle.files == (
        "flashinfer/cached_ops/a/build.ninja",
        "flashinfer/cached_ops/b/build.ninja",
    )
    copied = sum((bundle.directory / f).stat().st_size for f in bundle.files)
    assert copied == bundle.summary["copied_bytes"] == 300 <= 350
    reasons = dict(bundle.skipped)
    assert reasons["flashinfer/cached_ops/c/build.ninja"].startswith("over the bundle cap")
    assert reasons["flashinfer/cached_ops/d/build.ninja"] == "binary"
    assert reasons["flashinfer/flashinfer_jit.log"].startswith("over the per-file cap")
    assert reasons["flashinfer/cached_ops/e/.ninja_log"].startswith("over the per-file cap")
    # Too big to copy, still parsed.
    assert len(bundle.summary["ninja"]["flashinfer/cached_ops/e/.ninja_log"]) == 60
    listed = {e["path"] for e in bundle.summary["caches"]["flashinfer"]["evidence"]}
    assert "cached_ops/a/a.so" not in listed and len(listed) == 6
    assert bundle.summary["caches"]["flashinfer"]["files_seen"] == 7
    leftovers = [p for p in bundle.directory.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_many_copies_are_written_whole_and_two_names_redacted_alike_keep_the_last(
    tmp_path: Path,
) -> None:
    """The copies are written on several threads: each one whole, every one before
    evidence.json; two paths that redact to one name give one copy, as one after the other."""
    cache = tmp_path / "triton"
    kernels = {
        f"k{i:03d}/kernel.json": f'{{"name": "k{i}", "pad": "{"x" * i}"}}' for i in range(200)
    }
    for relative, text in kernels.items():
        write(cache / relative, text)
    write(cache / "s" / "tok-one-1234.json", '{"a": 1}')
    write(cache / "s" / "tok-two-1234.json", '{"b": 2}')  # same size, sorts after
    secrets = ["tok-one-1234", "tok-two-1234"]
    bundle = collect_evidence({"triton": cache}, "", tmp_path / "out", secret_values=secrets)
    for relative, text in kernels.items():
        assert (bundle.directory / "triton" / relative).read_text() == text
    assert (bundle.directory / "triton" / "s" / "<redacted>.json").read_text() == '{"b": 2}'
    assert len(list((bundle.directory / "triton").rglob("*.json"))) == 201


def test_symlinks_and_fifos_are_never_followed_or_opened(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "build.ninja", "OUTSIDE-MARKER\n")
    cache = tmp_path / "triton"
    write(cache / "KEY" / "kernel.json", '{"name": "k"}')
    (cache / "KEY" / ".ninja_log").symlink_to("/etc/passwd")
    (cache / "etc-link").symlink_to("/etc")
    (cache / "outside-link").symlink_to(outside.parent)
    (cache / "KEY" / "build.ninja").symlink_to(outside)
    os.mkfifo(cache / "KEY" / "flashinfer_jit.log")
    os.mkfifo(cache / "a-fifo.json")
    linked_root = tmp_path / "linked-root"
    linked_root.symlink_to(cache)
    result: list[EvidenceBundle] = []
    caches = {"triton": cache, "vllm": linked_root}
    worker = threading.Thread(
        target=lambda: result.append(collect_evidence(caches, "", tmp_path / "out")),
        daemon=True,  # a FIFO opened for reading would block it forever
    )
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "collect_evidence blocked, on a FIFO?"
    [bundle] = result
    assert bundle.files == ("triton/KEY/kernel.json",)
    everything = b"".join(p.read_bytes() for p in bundle.directory.rglob("*") if p.is_file())
    assert b"root:x:0:0" not in everything and b"OUTSIDE-MARKER" not in everything
    assert not any("etc-link/" in path or "outside-link/" in path for path, _ in bundle.skipped)
    reasons = dict(bundle.skipped)
    assert reasons["triton/KEY/.ninja_log"] == "symlink"
    assert reasons["triton/KEY/build.ninja"] == "symlink"
    assert reasons["triton/etc-link"] == "symlink"
    assert reasons["triton/KEY/flashinfer_jit.log"] == "fifo"
    assert reasons["triton/a-fifo.json"] == "fifo"
    assert reasons["vllm"] == "cache root is not a directory (symlink)"
    assert bundle.summary["caches"]["vllm"]["evidence"] == []


def test_missing_cache_root_is_recorded(tmp_path: Path) -> None:
    bundle = collect_evidence({"vllm": tmp_path / "nope"}, "", tmp_path / "out")
    assert dict(bundle.skipped)["vllm"].startswith("cache root unreadable")


def test_a_crash_leaves_no_evidence_json(tmp_path: Path) -> None:
    write(tmp_path / "vllm" / "x" / "computation_graph.py", "graph = 1\n")
    out = tmp_path / "out"
    write(out / "vllm", "a file where the cache dir should go")
    with pytest.raises(OSError):
        collect_evidence({"vllm": tmp_path / "vllm"}, "", out)
    assert not (out / EVIDENCE_JSON).exists()
    assert [p.name for p in out.iterdir()] == ["vllm"]


def test_bad_cache_names_are_refused(tmp_path: Path) -> None:
    for name in ("", "..", "a/b"):
        with pytest.raises(ValueError, match="cache name"):
            collect_evidence({name: tmp_path}, "", tmp_path / "out")


def test_log_facts_round_trip_as_dict() -> None:
    facts = parse_boot_log((BOOT_LOGS / "newer_vllm_warm.log").read_text())
    data = facts.to_dict()
    assert data.pop("verdict") == "loaded"
    assert LogFacts(**data) == facts
