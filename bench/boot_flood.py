"""A boot whose engine floods its output: lifecycle's peak memory, the log it keeps, the wall.

An engine stuck printing one warning per request writes gigabytes in minutes, and a night
boots dozens of engines in one process. The demo engine (demo/0.2) is booted once by a profile
that serves as usual, then prints `--mb` MiB of one warning line holding the boot's secret
(HF_TOKEN, passed by name), then exits 0. The boot runs as a process of its own (`python -m
lifecycle boot`), its peak RSS read from wait4 by the small process that started it (not by
this one: see `_WAIT_FOR_IT`); the kept log is measured and searched for the secret's value.
A scratch LIFECYCLE_HOME and project, removed afterwards; the container is removed by
lifecycle (a secret was passed).

    python3 bench/boot_flood.py --mb 300 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SECRET = "flood-secret-0123456789abcdef"  # what the engine prints on every flood line
WARNING = "WARNING [scheduler.py:1491] request preempted; KV cache full (token=$HF_TOKEN)"


def flood_profile(mib: int) -> str:
    """The profile `flood`: the demo engine served, then `mib` MiB of one warning, exit 0."""
    script = f'python3 -m demollm.serve "$@" && yes "{WARNING}" | head -c {mib * 1024 * 1024}'
    return (
        f"  flood:\n    command: [sh, -c, '{script}; echo; echo flood done', sh]\n"
        "    secrets: [HF_TOKEN]\n    network: none\n"
    )


def project(root: Path, mib: int) -> Path:
    """The demo manifests with the flood profile added to demo/0.2's."""
    for version in ("0.1", "0.2"):
        shutil.copytree(REPO / f"manifests/demo/{version}", root / f"manifests/demo/{version}")
    (root / "hooks").mkdir()
    child = root / "manifests/demo/0.2/manifest.yaml"
    child.write_text(child.read_text() + "profiles:\n" + flood_profile(mib))
    return root


# Linux keeps a process's high-water RSS across fork and exec: a child of this process reads
# this process's peak as its own (a pytest worker's 240 MiB, taken for lifecycle's). So
# lifecycle is started by a small Python of its own, which waits for it and writes down its
# exit code and peak (KiB); that one's own peak is ~13 MiB.
_WAIT_FOR_IT = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def lifecycle(root: Path, home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """`python -m lifecycle ARGS` in a process of its own; its result and peak RSS (KiB)."""
    env = dict(os.environ, LIFECYCLE_HOME=str(home), HF_TOKEN=SECRET)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    argv = ["-m", "lifecycle", "--manifests", str(root / "manifests"), *args]
    with tempfile.NamedTemporaryFile("r", prefix="flood-usage-") as usage:
        proc = subprocess.run(
            [sys.executable, "-c", _WAIT_FOR_IT, usage.name, *argv],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # every line of the flood, shown: not what is measured
            text=True,
            check=True,
        )
        code, peak_kib = map(int, usage.read().split())
    return subprocess.CompletedProcess(argv, code, proc.stdout, None), peak_kib


def measure(mib: int) -> dict[str, Any]:
    """One flooding boot, measured."""
    with tempfile.TemporaryDirectory(prefix="flood-", dir="/var/tmp") as scratch:
        root, home = project(Path(scratch) / "project", mib), Path(scratch) / "home"
        built, _ = lifecycle(root, home, "build", "demo/0.2")
        assert built.returncode == 0, built.stdout
        started = time.monotonic()
        booted, peak_kib = lifecycle(root, home, "boot", "demo/0.2", "--profile", "flood", "--json")
        wall = time.monotonic() - started
        assert booted.returncode == 0, booted.stdout[-2000:]
        report = json.loads(booted.stdout)
        log = Path(report["log_path"])
        kept = log.read_bytes()
        return {
            "flood_mib": mib,
            "outcome": report["outcome"],
            "peak_rss_mib": round(peak_kib / 1024, 1),
            "wall_s": round(wall, 1),
            "kept_log_bytes": len(kept),
            "secret_in_kept_log": SECRET.encode() in kept,
            "last_line_kept": kept.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode(errors="replace"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="MiB the engine prints")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.mb)
    print(json.dumps(result, indent=1) if args.json else result)


if __name__ == "__main__":
    main()
