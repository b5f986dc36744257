"""What watching a cache's files costs a boot: lifecycle.boot.observe on a JIT-cache-like tree.

    python3 bench/observe.py --watch        # 20,000 files / 2 GB (bench/fingerprint.py's tree)
    python3 bench/observe.py                # the same engine, nothing watching
    python3 bench/observe.py --watch --files 500 --total-mb 50        # CI-sized

The "engine" is a child process that opens every file of the tree and reads its first 4 KiB, as
a warm boot loads what it finds (the worst case for the watch: one open event per file), then
writes 200 new files into new dirs, as a miss would. With `--watch` every dir is watched the
way a boot watches its caches, from before the child starts until it exited. Paired whole runs
of both forms give the watch's cost; the JSON line says where it went: adding the watches,
the child's wall, reading the last events and closing. The tree is made once under /var/tmp.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout, not whatever copy of lifecycle is installed
sys.path.insert(1, str(REPO / "bench"))

import fingerprint as fingerprint_bench  # noqa: E402  (bench/fingerprint.py: the tree)

from lifecycle.boot.observe import AccessWatch  # noqa: E402

ENGINE = """
import os, sys
root = sys.argv[1]
for here, _, files in os.walk(root):
    for name in files:
        with open(os.path.join(here, name), "rb") as f:
            f.read(4096)
for i in range(200):
    d = os.path.join(root, "miss", str(i))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "k.so"), "wb") as f:
        f.write(b"x" * 1024)
"""


def tree(files: int, total_mb: int) -> Path:
    """The bench tree, generated once per size (seed 7, as bench/fingerprint.py's)."""
    root = Path(f"/var/tmp/lifecycle-bench-observe-{files}-{total_mb}")
    if not (root / ".complete").exists():
        fingerprint_bench.generate(root / "tree", files, total_mb * 1024 * 1024, seed=7)
        (root / ".complete").touch()
    return root / "tree"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", action="store_true", help="watch the tree as a boot does")
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--total-mb", type=int, default=2048)
    args = parser.parse_args()
    root = tree(args.files, args.total_mb)
    subprocess.run(["rm", "-rf", str(root / "miss")], check=True)
    times: dict[str, float] = {}
    started = time.perf_counter()
    watch = AccessWatch({"cache": root}) if args.watch else None
    if watch is not None:
        watch.start()
    times["watch_start_s"] = time.perf_counter() - started
    mark = time.perf_counter()
    subprocess.run([sys.executable, "-c", ENGINE, str(root)], check=True)
    times["engine_s"] = time.perf_counter() - mark
    mark = time.perf_counter()
    seen = watch.stop()["cache"] if watch is not None else None
    times["watch_stop_s"] = time.perf_counter() - mark
    report = {
        "watch": args.watch,
        "dirs": sum(1 for _ in os.walk(root)),
        **{k: round(v, 4) for k, v in times.items()},
        "opened": len(seen.opened) if seen else None,
        "written": len(seen.written) if seen else None,
        "complete": seen.complete if seen else None,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
