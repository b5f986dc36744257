"""Benchmark lifecycle.fingerprint.scan against coreutils sha256sum on a JIT-cache-like tree.

    python3 bench/fingerprint.py                         # ~20,000 files, ~2 GB, under /var/tmp
    python3 bench/fingerprint.py --files 500 --total-mb 50 --repeat 1 --json   # CI-sized

One run generates the tree, reads all of it once (an untimed sha256sum pass that also gives the
reference hashes, so every measurement starts from a warm page cache), then times sha256sum, and
in interleaved rounds a full scan and an unchanged re-scan, each in a fresh child process. Every
scan's hashes are checked against sha256sum's. `--experiments` adds scan variants (threads,
batching, chunk size, mmap, hashlib.file_digest) and sha256sum spread over all cores.

Peak memory: a process started from Python inherits Python's high-water RSS in ru_maxrss across
exec, so RUSAGE_CHILDREN would report the interpreter, not sha256sum. The scan child therefore
reads its own VmHWM from /proc/self/status, and sha256sum runs under GNU time (`%M`: the largest
of bash, find, xargs and sha256sum).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import mmap
import os
import platform
import random
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout, not whatever copy of lifecycle is installed

from lifecycle import fingerprint  # noqa: E402

SHA256SUM = "find . -type f -print0 | xargs -0 sha256sum"
SHA256SUM_ALL_CORES = f"find . -type f -print0 | xargs -0 -P {os.cpu_count()} -n 500 sha256sum"
GNU_TIME = "/usr/bin/time"
# label -> child settings: module attributes to set, "workers", or "hasher" (see _HASHERS).
VARIANTS: dict[str, dict[str, Any]] = {
    "scan, 1 thread": {"workers": 1},
    "scan, 4 threads": {"workers": 4},
    "scan, no batching (1 file/task)": {"BATCH_FILES": 1},
    "scan, 256 KiB reads": {"CHUNK": 256 << 10},
    "scan, 4 MiB reads": {"CHUNK": 4 << 20},
    "scan, hashlib.file_digest": {"hasher": "file_digest"},
    "scan, mmap (rejected: SIGBUS)": {"hasher": "mmap"},
}


def generate(root: Path, files: int, total: int, seed: int) -> int:
    """Write a tree shaped like vLLM/Triton/FlashInfer caches; returns the bytes written."""
    rng = random.Random(seed)
    # Size mix of a JIT cache: ~1.5 % large artefacts (.so, .cubin: MBs) hold most of the bytes;
    # the rest are sources, PTX, JSON metadata and objects of a few KB (log-uniform 0.5-64 KiB).
    large = max(1, round(files * 0.015))
    small_sizes = [
        int(math.exp(rng.uniform(math.log(512), math.log(64 << 10)))) for _ in range(files - large)
    ]
    budget = max(large, total - sum(small_sizes))
    weights = [rng.uniform(1, 8) for _ in range(large)]
    large_sizes = [int(budget * w / sum(weights)) for w in weights]
    written = 0
    for index, size in enumerate(large_sizes + small_sizes):
        path = root / _layout(index, index < large, rng)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            left = size
            while left:  # urandom: nothing compresses or dedups trivially
                piece = os.urandom(min(left, 8 << 20))
                out.write(piece)
                left -= len(piece)
        written += size
    return written


def _layout(index: int, large: bool, rng: random.Random) -> str:
    key = f"{rng.getrandbits(40):010x}"
    if large:
        cache = ("flashinfer/0.7.0/90a/cached_ops", "triton")[index % 2]
        return f"{cache}/m{index % 97:02d}/{key}{('.so', '.cubin')[index % 2]}"
    cache, suffixes = rng.choice(
        (
            ("triton", (".ptx", ".ttir", ".ttgir", ".llir", ".json")),
            ("torch_compile_cache/3f2a9c10de/rank_0_0/backbone", (".py", ".json")),
            ("inductor/fxgraph", (".py", ".o", ".json")),
        )
    )
    return f"{cache}/d{index // 20 % 500:03d}/{key}{rng.choice(suffixes)}"


def _hash_file_digest(path: str, walked: fingerprint.Entry) -> str:
    with Path(path).open("rb", buffering=0) as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hash_mmap(path: str, walked: fingerprint.Entry) -> str:
    # Saves the copy into a buffer, but a file truncated while mapped kills the process with
    # SIGBUS: a cache writer racing the scan must give an error, so scan() does not use this.
    with Path(path).open("rb") as f:
        if walked.size < 1 << 16:
            return hashlib.sha256(f.read()).hexdigest()
        flags = mmap.MAP_SHARED | mmap.MAP_POPULATE
        with mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ) as mapped:
            return hashlib.sha256(mapped).hexdigest()


_HASHERS = {"file_digest": _hash_file_digest, "mmap": _hash_mmap}


def _proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def child(mode: str, root: Path, out: str, prev_file: str, settings: dict[str, Any]) -> None:
    """The measured side, in a fresh interpreter; prints one JSON object."""
    if mode in ("sha256sum", "sha256sum-all-cores"):
        command = SHA256SUM if mode == "sha256sum" else SHA256SUM_ALL_CORES
        start = time.perf_counter()
        done = subprocess.run(
            [GNU_TIME, "-f", "%M", "bash", "-c", f"{command} >/dev/null"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - start
        print(json.dumps({"wall_s": wall, "peak_rss_kib": int(done.stderr.split()[-1])}))
        return
    workers = settings.pop("workers", None)
    if "hasher" in settings:
        settings["_hash_file"] = _HASHERS[settings.pop("hasher")]
    for name, value in settings.items():
        setattr(fingerprint, name, value)
    previous = fingerprint.Fingerprint.from_json(Path(prev_file).read_text()) if prev_file else None
    baseline = _proc_status_kib("VmRSS")
    start = time.perf_counter()
    result = fingerprint.scan(root, previous, workers=workers)
    wall = time.perf_counter() - start
    peak = _proc_status_kib("VmHWM")
    Path(out).write_text(result.to_json())
    print(json.dumps({"wall_s": wall, "peak_rss_kib": peak, "rss_before_kib": baseline}))


def measure(
    mode: str,
    root: Path,
    repeat: int,
    out: Path | None = None,
    prev: Path | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Median wall time of `repeat` child runs, and the largest peak RSS among them."""
    return summarize([once(mode, root, out, prev, settings) for _ in range(repeat)])


def once(
    mode: str,
    root: Path,
    out: Path | None = None,
    prev: Path | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One child run: its wall time and memory."""
    args = [mode, str(root), str(out or ""), str(prev or ""), json.dumps(settings or {})]
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = dict(runs[0])
    summary["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    summary["walls_s"] = [round(r["wall_s"], 4) for r in runs]
    summary["peak_rss_kib"] = max(r["peak_rss_kib"] for r in runs)
    return summary


def reference_hashes(root: Path) -> dict[str, str]:
    """The untimed warm-up: sha256sum reads every file once and gives the expected hashes."""
    out = subprocess.run(
        ["bash", "-c", SHA256SUM], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    return {line[66:].removeprefix("./"): line[:64] for line in out.splitlines()}


def check(result_file: Path, expected: dict[str, str]) -> str:
    """Every scanned hash equals sha256sum's; returns the tree digest."""
    scanned = fingerprint.Fingerprint.from_json(result_file.read_text())
    got = {e.path: e.sha256 for e in scanned.entries if e.kind == "file"}
    if got != expected:
        raise SystemExit(f"scan and sha256sum disagree on {len(got.items() ^ expected.items())}")
    return scanned.tree_digest


def run(tree: Path, work: Path, repeat: int, experiments: bool) -> dict[str, Any]:
    """Warm the page cache, then time sha256sum, a full scan and an unchanged re-scan."""
    expected = reference_hashes(tree)
    full_json, rescan_json, variant_json = work / "full.json", work / "rescan.json", work / "v.json"
    sha = measure("sha256sum", tree, repeat)
    # Interleaved rounds, so a slow or fast spell of this shared machine falls on both.
    rounds: dict[str, list[dict[str, Any]]] = {"scan": [], "rescan": []}
    for _ in range(repeat):
        rounds["scan"].append(once("scan", tree, full_json))
        digest = check(full_json, expected)
        rounds["rescan"].append(once("scan", tree, rescan_json, full_json))
        if check(rescan_json, expected) != digest:
            raise SystemExit("the re-scan gave another tree digest")
    full, rescan = summarize(rounds["scan"]), summarize(rounds["rescan"])
    # Each round's re-scan against its own full scan: the spread the median hides.
    pairs = zip(rounds["scan"], rounds["rescan"], strict=True)
    per_round = [rescanned["wall_s"] / scanned["wall_s"] for scanned, rescanned in pairs]
    variants = {}
    if experiments:
        variants["sha256sum, xargs -P nproc"] = measure("sha256sum-all-cores", tree, repeat)
        for label, settings in VARIANTS.items():
            variants[label] = measure("scan", tree, repeat, variant_json, settings=settings)
            check(variant_json, expected)
    sizes = [(tree / path).stat().st_size for path in expected]
    return {
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "sha256sum": _first_line(["sha256sum", "--version"]),
            # hashlib is OpenSSL; with the CPU's SHA extensions it is several times coreutils.
            "openssl": ssl.OPENSSL_VERSION,
            **_cpu(),
        },
        "tree": {"files": len(expected), "bytes": sum(sizes), "largest": max(sizes)},
        "sha256sum_command": f"cd TREE && {SHA256SUM} >/dev/null",
        "repeat": repeat,
        "sha256sum": sha,
        "scan": full,
        "rescan": rescan,
        "speedup_vs_sha256sum": sha["wall_s"] / full["wall_s"],
        "rescan_fraction": rescan["wall_s"] / full["wall_s"],
        "rescan_fraction_per_round": [round(f, 4) for f in per_round],
        "tree_digest": digest,
        "variants": variants,
    }


def _cpu() -> dict[str, Any]:
    info = Path("/proc/cpuinfo").read_text()
    models = [line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line]
    return {"cpu": models[0] if models else platform.processor(), "sha_ni": " sha_ni" in info}


def _first_line(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[0]


def print_table(results: dict[str, Any]) -> None:
    """A small fixed-width table of median wall times and peak RSS."""
    tree, machine = results["tree"], results["machine"]
    print(
        f"tree: {tree['files']} files, {tree['bytes'] / 2**20:.0f} MiB; nproc {machine['nproc']},"
        f" Python {machine['python']}; median of {results['repeat']}, warm page cache"
    )
    print(f"{'':36} {'wall s':>8} {'peak RSS MiB':>13}")
    rows = [
        ("sha256sum (find | xargs -0)", results["sha256sum"]),
        ("scan (full)", results["scan"]),
        ("scan (unchanged, with previous)", results["rescan"]),
        *results["variants"].items(),
    ]
    for label, row in rows:
        print(f"{label:36} {row['wall_s']:8.3f} {row['peak_rss_kib'] / 1024:13.1f}")
    print(
        f"sha256sum / scan: {results['speedup_vs_sha256sum']:.2f}x;"
        f" re-scan / scan: {results['rescan_fraction']:.1%} (rounds:"
        f" {', '.join(f'{f:.1%}' for f in results['rescan_fraction_per_round'])})"
    )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        mode, root, out, prev, settings = sys.argv[2:7]
        child(mode, Path(root), out, prev, json.loads(settings))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="parent of the tree (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the tree; reused when present")
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--total-mb", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--experiments", action="store_true", help="also time the variants")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    opts = parser.parse_args()
    if not Path(GNU_TIME).exists():
        raise SystemExit(f"{GNU_TIME} (GNU time) is needed to measure sha256sum's peak RSS")
    base = opts.dir or Path(tempfile.mkdtemp(prefix="fingerprint-bench-", dir="/var/tmp"))
    tree = base / "cache"
    work = Path(tempfile.mkdtemp(prefix="fingerprint-bench-out-"))
    try:
        if not tree.exists():
            started = time.perf_counter()
            written = generate(tree, opts.files, opts.total_mb << 20, opts.seed)
            took = time.perf_counter() - started
            print(f"generated {written / 2**20:.0f} MiB in {took:.1f} s", file=sys.stderr)
        results = run(tree, work, opts.repeat, opts.experiments)
    finally:
        shutil.rmtree(work)
        if not opts.keep:
            shutil.rmtree(tree, ignore_errors=True)
            if opts.dir is None:
                base.rmdir()
    if opts.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)


if __name__ == "__main__":
    main()
