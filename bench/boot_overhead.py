"""Time a boot's own work after the engine exits, without Docker: lifecycle.boot.run._finish.
With `--whole`, time whole boots against `docker run --rm` of the same engine (bench/boot_whole.py).

    python3 bench/boot_overhead.py                        # the 2 GiB / 20,000-file tree
    python3 bench/boot_overhead.py --files 500 --total-mb 50 --repeat 1 --json   # CI-sized
    python3 bench/boot_overhead.py --whole demo --rounds 15     # needs dockerd; ~1 min
    python3 bench/boot_overhead.py --whole all --rounds 5       # and the stand-in, if built

The tree is bench/fingerprint.py's (same generator, same seed), and each of its top-level dirs
(flashinfer, inductor, torch_compile_cache, triton) is one cache of the boot, as a real boot
mounts four. Its files are random bytes, but the files the evidence bundle reads (here the
1,340 `.json` files of the triton cache) are rewritten as the kernel metadata Triton writes
(~0.9 KB of JSON each): evidence is redacted and copied only when it is text, so random bytes
would time nothing of that (`--evidence binary` leaves them as generated). The ledger is a
fresh one under a temp dir.

In `--repeat` interleaved rounds, each in a fresh child process with a warm page cache:
  cold  a boot that created every cache: full scans, every file searched for the secret;
  warm  a boot whose caches did not change: each cache re-scanned against its previous scan.
Both collect the evidence bundle and record the boot (`finish_boot`), with one secret set, as
`_finish` does at the end of every boot; the breakdown names where the time went.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout, not whatever copy of lifecycle is installed
sys.path.insert(1, str(REPO / "bench"))

import boot_whole  # noqa: E402  (bench/boot_whole.py: --whole)
import fingerprint as fingerprint_bench  # noqa: E402  (bench/fingerprint.py: the tree)

from lifecycle.boot import run  # noqa: E402
from lifecycle.boot.caches import CachePlan, last_scan  # noqa: E402
from lifecycle.boot.spec import CacheMount  # noqa: E402
from lifecycle.evidence import bundle as evidence  # noqa: E402
from lifecycle.evidence.bundle import is_evidence_file  # noqa: E402
from lifecycle.ledger import Ledger  # noqa: E402
from lifecycle.ledger.boots import (  # noqa: E402
    BootRecord,
    CacheRecord,
    CacheUse,
    cache_by_id,
    start_boot,
)
from lifecycle.ledger.core import insert  # noqa: E402

SECRET = {"HF_TOKEN": "hf_" + "Zq7" * 12}  # one secret set, as a profile that passes HF_TOKEN
BOOT_LOGS = REPO / "tests" / "data" / "boot_logs"
LOG_LINES = 1000  # a vLLM boot log is a few hundred to a few thousand lines
# Where the time goes: functions wrapped in the child, by module and name. The evidence's own
# parts (its walk with the reads, its redaction, its writes) are inside "evidence".
PARTS: dict[tuple[Any, str], str] = {
    (run, "scan"): "scan",
    (run, "secrets_in_cache"): "secret search",
    (run, "collect_evidence"): "evidence",
    (run, "finish_boot"): "ledger",
    (evidence, "_walk"): "evidence: walk and read",
    (evidence, "redact"): "evidence: redact",
    (evidence, "_write_all"): "evidence: write",
}
TOTALS = ["load previous scan", "scan", "secret search", "evidence", "ledger"]


def textify(tree: Path) -> int:
    """Rewrite every evidence file as the kernel metadata Triton writes; returns how many."""
    count = 0
    for cache in sorted(p for p in tree.iterdir() if p.is_dir()):
        for path in sorted(cache.rglob("*")):
            relative = path.relative_to(cache).as_posix()
            if path.is_file() and is_evidence_file(cache.name, relative):
                path.write_text(_metadata(random.Random(relative)))
                count += 1
    return count


def _metadata(rng: random.Random) -> str:
    """One Triton kernel's `<name>.json` (Triton 3.3's keys; ~0.9 KB)."""
    kernel = f"triton_{rng.choice(('poi', 'red', 'per', 'tem'))}_fused_{rng.getrandbits(12)}"
    libdevice = "/usr/local/lib/python3.12/dist-packages/triton/backends/nvidia/lib/libdevice.10.bc"
    return json.dumps(
        {
            "hash": f"{rng.getrandbits(256):064x}",
            "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
            "num_warps": rng.choice((1, 2, 4, 8)),
            "num_ctas": 1,
            "num_stages": rng.choice((1, 2, 3, 4)),
            "maxnreg": None,
            "cluster_dims": [1, 1, 1],
            "ptx_version": None,
            "enable_fp_fusion": True,
            "launch_cooperative_grid": False,
            "supported_fp8_dtypes": ["fp8e4b15", "fp8e4nv", "fp8e5"],
            "deprecated_fp8_dtypes": ["fp8e4b15"],
            "default_dot_input_precision": "tf32",
            "allowed_dot_input_precisions": ["tf32", "tf32x3", "ieee"],
            "max_num_imprecise_acc_default": 0,
            "extern_libs": [["libdevice", libdevice]],
            "debug": False,
            "backend_name": "cuda",
            "sanitize_overflow": True,
            "arch": "sm90",
            "triton_version": "3.3.1",
            "shared": rng.choice((0, 1024, 16384, 65536)),
            "tmem_size": 0,
            "global_scratch_size": 0,
            "global_scratch_align": 1,
            "name": kernel,
        }
    )


def setup(tree: Path, home: Path) -> list[str]:
    """A ledger that knows one cache per top-level dir of the tree; returns their ids."""
    ledger = Ledger.open(home)
    now = _stamp()
    caches = [
        CacheRecord(
            id=f"{d.name}-bench",
            cache_key=f"bench-{d.name}",
            cache_name=d.name,
            manifest_name="bench",
            manifest_digest="0" * 64,
            image_id="sha256:" + "0" * 64,
            arch="bench",
            host_path=str(d),
            container_path=f"/caches/{d.name}",
            state="live",
            in_use_by=None,
            created_at=now,
        )
        for d in sorted(p for p in tree.iterdir() if p.is_dir())
    ]
    with ledger.transaction() as conn:
        for cache in caches:
            insert(conn, "caches", cache)
    ledger.close()
    return [c.id for c in caches]


def child(mode: str, home: Path, cache_ids: list[str], log_text: str) -> dict[str, Any]:
    """One boot's end in this fresh process: `_finish` timed, and its parts."""
    ledger = Ledger.open(home)
    boot_id = f"b-bench-{mode}-{os.getpid()}"
    records = [cache_by_id(ledger, cache_id) for cache_id in cache_ids]
    assert all(records), "setup() recorded every cache"
    caches = [r for r in records if r is not None]
    uses = [CacheUse(boot_id=boot_id, cache_id=c.id, mode=mode) for c in caches]
    record = _boot(boot_id)
    start_boot(ledger, record, [], uses)
    mounts = [
        CacheMount(c.id, c.cache_name, c.host_path, c.container_path, "CACHE", mode) for c in caches
    ]
    plan = CachePlan(mounts, [], uses, {c.cache_name: c for c in caches}, [])
    loading = time.perf_counter()
    # A warm boot re-scans each cache before the mount, against its last scan (planning's
    # work, outside `_finish`): `_finish` then compares with that tree.
    previous = {c.cache_name: last_scan(c) for c in caches} if mode == "warm" else {}
    plan.before.update({name: found for name, found in previous.items() if found is not None})
    loaded = time.perf_counter() - loading
    progress = run._Progress(log=log_text.splitlines(), container_id="bench", exit_code=0)
    evidence_dir = home / "evidence" / "boots" / boot_id
    spent = dict.fromkeys(PARTS.values(), 0.0)
    for (module, name), part in PARTS.items():
        if hasattr(module, name):  # an older lifecycle may lack one (bench it from that checkout)
            setattr(module, name, boot_whole.timed_calls(getattr(module, name), spent, part))
    start = time.perf_counter()
    final = run._finish(ledger, record, plan, progress, evidence_dir, dict(SECRET))
    wall = time.perf_counter() - start + loaded
    spent["load previous scan"] = loaded
    if final.outcome != "ok":
        raise SystemExit(f"{mode} boot ended {final.outcome}: {final.error}")
    bundle = json.loads((evidence_dir / "bundle" / "evidence.json").read_text())
    parts = dict(spent)
    parts["other"] = wall - sum(spent[part] for part in TOTALS)  # the log and scans kept, diffs
    return {
        "wall_s": wall,
        "parts_s": parts,
        "evidence_files_copied": sum(
            entry["copied"] for cache in bundle["caches"].values() for entry in cache["evidence"]
        ),
        "evidence_files_seen": sum(len(c["evidence"]) for c in bundle["caches"].values()),
    }


def _boot(boot_id: str) -> BootRecord:
    return BootRecord(
        id=boot_id,
        started_at=_stamp(),
        ended_at=None,
        exit_code=None,
        outcome="running",
        error=None,
        host="bench",
        profile="default",
        manifest_name="bench",
        manifest_digest="0" * 64,
        image_id="sha256:" + "0" * 64,
        image_tag="bench:latest",
        container_id=None,
        hooks="[]",
        instrumented=False,
        secret_names=json.dumps(list(SECRET)),
        log_path=None,
        evidence_path=None,
    )


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def boot_log() -> str:
    """LOG_LINES lines of the sample boot logs, the secret printed once (the engine echoed it)."""
    lines = [
        line for log in sorted(BOOT_LOGS.glob("*.log")) for line in log.read_text().splitlines()
    ]
    lines = (lines * (LOG_LINES // len(lines) + 1))[:LOG_LINES]
    lines[LOG_LINES // 2] = f"INFO token in use: {SECRET['HF_TOKEN']}"
    return "\n".join(lines) + "\n"


def once(mode: str, home: Path, cache_ids: list[str], log_file: Path) -> dict[str, Any]:
    """One child run."""
    args = [mode, str(home), ",".join(cache_ids), str(log_file)]
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median wall time and median of each part, with every round's wall time."""
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "walls_s": [round(r["wall_s"], 4) for r in runs],
        "parts_s": {
            part: round(statistics.median(r["parts_s"][part] for r in runs), 4)
            for part in runs[0]["parts_s"]
        },
        "evidence_files_seen": runs[0]["evidence_files_seen"],
        "evidence_files_copied": runs[0]["evidence_files_copied"],
    }


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        mode, home, cache_ids, log_file = sys.argv[2:6]
        result = child(mode, Path(home), cache_ids.split(","), Path(log_file).read_text())
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="parent of the tree (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the tree; reused when present")
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--total-mb", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=5, help="rounds (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--evidence",
        choices=("text", "binary"),
        default="text",
        help="evidence files as Triton metadata (default) or random bytes as generated",
    )
    parser.add_argument(
        "--whole",
        choices=("demo", "standin", "all"),
        help="time whole boots against `docker run --rm` of the same engine instead",
    )
    parser.add_argument("--rounds", type=int, default=10, help="--whole: pairs (median)")
    parser.add_argument(
        "--pycache",
        type=Path,
        help="--whole: lifecycle's bytecode cached in this dir, as an installed lifecycle has"
        " it (default: as the environment says; PYTHONDONTWRITEBYTECODE=1 compiles every run)",
    )
    opts = parser.parse_args()
    if opts.whole:
        whole(opts.whole, opts.rounds, opts.pycache, opts.json)
        return
    base = opts.dir or Path(tempfile.mkdtemp(prefix="boot-overhead-", dir="/var/tmp"))
    tree = base / f"boot-cache-{opts.evidence}"
    work = Path(tempfile.mkdtemp(prefix="boot-overhead-home-"))
    try:
        if not tree.exists():
            written = fingerprint_bench.generate(tree, opts.files, opts.total_mb << 20, opts.seed)
            texts = textify(tree) if opts.evidence == "text" else 0
            print(f"generated {written / 2**20:.0f} MiB, {texts} rewritten", file=sys.stderr)
        fingerprint_bench.reference_hashes(tree)  # reads it all once: a warm page cache
        log_file = work / "boot.log"
        log_file.write_text(boot_log())
        cache_ids = setup(tree, work / "home")
        rounds: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
        for _ in range(opts.repeat):  # cold first: the warm boot re-scans against its scans
            for mode in rounds:
                rounds[mode].append(once(mode, work / "home", cache_ids, log_file))
        sizes = [p.stat().st_size for p in tree.rglob("*") if p.is_file()]
    finally:
        shutil.rmtree(work)
        if not opts.keep:
            shutil.rmtree(tree, ignore_errors=True)
            if opts.dir is None:
                base.rmdir()
    results = {
        "tree": {"files": len(sizes), "bytes": sum(sizes), "caches": len(cache_ids)},
        "repeat": opts.repeat,
        "log_lines": LOG_LINES,
        "evidence": opts.evidence,
        **{mode: summarize(runs) for mode, runs in rounds.items()},
    }
    if opts.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"tree: {len(sizes)} files, {sum(sizes) / 2**20:.0f} MiB in {len(cache_ids)} caches;"
        f" median of {opts.repeat}, warm page cache"
    )
    for mode in rounds:
        row = results[mode]
        parts = ", ".join(f"{part} {s * 1000:.0f}" for part, s in row["parts_s"].items())
        print(f"{mode}: {row['wall_s']:.3f} s ({parts} ms); rounds {row['walls_s']}")


def whole(engines: str, rounds: int, pycache: Path | None, as_json: bool) -> None:
    """`--whole`: each engine's rounds against `docker run --rm`, and one boot's phases."""
    names = list(boot_whole.ENGINES) if engines == "all" else [engines]
    results = {name: boot_whole.compare(name, rounds, pycache) for name in names}
    setting = {
        "python": sys.executable,
        "bytecode": f"cached in {pycache}"
        if pycache
        else "not written (PYTHONDONTWRITEBYTECODE)"
        if os.environ.get("PYTHONDONTWRITEBYTECODE")
        else "cached beside the sources",
    }
    if as_json:
        print(json.dumps({**setting, **results}, indent=2))
        return
    print(f"python {setting['python']}, bytecode {setting['bytecode']}")
    for name, result in results.items():
        print(boot_whole.show(name, result))


if __name__ == "__main__":
    main()
