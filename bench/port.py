"""Benchmark `lifecycle port` against a plain `git rebase --onto` of the same commits.

    python3 bench/port.py                    # 50 patches, 400 upstream files, median of 5
    python3 bench/port.py --repeat 9 --json  # the figures in bench/README.md
    python3 bench/port.py --patches 10 --repeat 1 --json     # CI-sized

One run generates, under a new temp dir (deleted afterwards unless `--keep`):
- an upstream repository with the package under `pkg/` (`--files` modules of 80 lines) tagged
  v1.0.0, then a release v2.0.0 that inserts two lines at the top of every third module (so
  hunks move) and rewrites a line next to some patched lines (so those need the 3-way merge);
- a project repository holding manifests/1.0 with a `--patches` series, one patch per module,
  each changing one line, made with `git diff` the way people write patches (`--mails`: with
  `git format-patch`, each with its own author, message and trailer, which a moved patch
  keeps).

Then it times, in the same run, interleaved, median of `--repeat`, wall and CPU seconds (this
process and its children, user + system: less at the mercy of a shared machine than wall):
- `rebase`: `git rebase --onto v2.0.0 v1.0.0` of the series as commits (made by the same
  `git am` call the port makes, before the clock starts) in a fresh clone;
- `cold`: `lifecycle port 1.0 2.0` as a function call (imports done; the mirror exists, so the
  fetch is a no-op fetch from a local path) with the cached old-series commits removed first:
  everything included, series applied on v1.0.0 with git am, replay, classification, export,
  range-diff, manifest, branch commit, scratch clean-up;
- `warm`: the same with the old series' commits found in the mirror (a port after a dry run);
- `dry`: `--dry-run`, warm;
- `lifecycle port` as a command once (Python start-up and imports included), for reference;
- and, untimed, how many processes (all git) a cold, a warm and a dry-run port start: a
  figure of the work that the load of a shared machine does not move.
Every port must report every patch CLEAN, CLEAN_3WAY or RENAMED, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout, not whatever copy of lifecycle is installed

from lifecycle.home import Home  # noqa: E402
from lifecycle.port.git import Git  # noqa: E402
from lifecycle.port.plan import PortFlags, PortRequest  # noqa: E402
from lifecycle.port.replay import SeriesPatch, apply_series  # noqa: E402
from lifecycle.port.session import SERIES_REFS, start  # noqa: E402

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@lifecycle.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@lifecycle.invalid",
}


def git(cwd: Path, *args: str) -> str:
    """git without user config; stdout."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def _stdout(cwd: Path, *args: str) -> bytes:
    """git's stdout as bytes (a patch is bytes)."""
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True).stdout


def module(index: int) -> str:
    """Module `index` at v1.0.0: 80 distinct lines."""
    return "".join(f"VALUE_{index}_{line} = {line}\n" for line in range(1, 81))


def generate(root: Path, files: int, patches: int, *, mails: bool = False) -> tuple[Path, Path]:
    """The upstream (v1.0.0, v2.0.0) and a project with manifests/1.0; their paths."""
    upstream = root / "upstream"
    (upstream / "pkg").mkdir(parents=True)
    git(upstream, "init", "-q", "-b", "main")
    for i in range(files):
        (upstream / "pkg" / f"mod_{i:04d}.py").write_text(module(i))
    (upstream / "requirements.txt").write_text("fakeinfer==1.0.0\n")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "Release 1.0.0")
    git(upstream, "tag", "v1.0.0")
    series: list[bytes] = []
    git(upstream, "checkout", "-q", "-b", "series")
    for k in range(patches):
        path = upstream / "pkg" / f"mod_{k * files // patches:04d}.py"
        lines = path.read_text().splitlines(keepends=True)
        lines[39] = f"VALUE_PATCHED_{k} = {k}  # ours\n"
        path.write_text("".join(lines))
        git(upstream, "add", "-A")
        plain = _stdout(upstream, "diff", "--cached", "--abbrev=12", "--relative=pkg/")
        message = f"mod {k}: ours\n\nWhy we carry patch {k}.\n\nDownstream-Ticket: BENCH-{k}\n"
        git(upstream, "commit", "-q", f"--author=Dev {k} <dev{k}@bench.invalid>", "-m", message)
        mail = _stdout(upstream, "format-patch", "--stdout", "--relative=pkg/", "-1", "HEAD")
        series.append(mail if mails else plain)
    git(upstream, "checkout", "-q", "main")
    git(upstream, "branch", "-q", "-D", "series")
    for i in range(files):
        path = upstream / "pkg" / f"mod_{i:04d}.py"
        text = path.read_text()
        if i % 3 == 0:
            text = f"# header {i}\n# more\n" + text
        if i % 5 == 0:  # next to a patched line: the hunk's context changes
            text = text.replace(f"VALUE_{i}_37 = 37\n", f"VALUE_{i}_37 = 3700\n")
        path.write_text(text)
    (upstream / "requirements.txt").write_text("fakeinfer==2.0.0\n")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "Release 2.0.0")
    git(upstream, "tag", "v2.0.0")

    project = root / "project"
    directory = project / "manifests" / "1.0"
    (directory / "patches").mkdir(parents=True)
    entries = ""
    for k, patch in enumerate(series):
        (directory / "patches" / f"patch-{k:03d}.patch").write_bytes(patch)
        entries += f"  - file: patches/patch-{k:03d}.patch\n    reason: benchmark patch {k}\n"
    (directory / "manifest.yaml").write_text(
        "schema_version: 1\nname: bench\n"
        'engine: {vllm: "1.0.0", flashinfer: "1.0.0", base_image: "bench/engine:v1.0.0", '
        "package_dir: /usr/lib/python3/dist-packages/pkg, flashinfer_dist: fakeinfer}\n"
        f"upstream: {{repository: {upstream}}}\npatches:\n{entries}"
        "tuned:\n  gpu_memory_utilization: {value: 0.9, status: validated, "
        "measured_on: bench 1.0.0, method: ladder}\n"
    )
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "manifests")
    return upstream, project


def series_commits(root: Path, upstream: Path, project: Path) -> Path:
    """A clone with branch `series`: the patch files as commits on v1.0.0, made by the same
    `git am` call the port makes (so the rebase moves exactly the port's commits)."""
    clone = root / "series"
    git(root, "clone", "-q", str(upstream), str(clone))
    patches = [
        SeriesPatch(k, f"patches/{path.name}", path)
        for k, path in enumerate(sorted((project / "manifests/1.0/patches").glob("*.patch")))
    ]
    v1 = git(clone, "rev-parse", "v1.0.0^{commit}").strip()
    apply_series(Git.scratch(clone), v1, "pkg", patches)
    git(clone, "checkout", "-q", "-b", "series")
    return clone


@dataclass(frozen=True)
class Timing:
    """Wall seconds, and CPU seconds (this process and its children, user + system)."""

    wall: float
    cpu: float


def _cpu() -> float:
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _timed(action: Callable[[], object]) -> Timing:
    cpu, wall = _cpu(), time.perf_counter()
    action()
    return Timing(time.perf_counter() - wall, _cpu() - cpu)


def time_rebase(root: Path, series: Path, run: int) -> Timing:
    """One `git rebase --onto v2.0.0 v1.0.0` of the series, in a fresh clone (untimed)."""
    clone = root / f"rebase-{run}"
    git(root, "clone", "-q", "--shared", "--branch", "series", str(series), str(clone))
    timing = _timed(lambda: git(clone, "rebase", "-q", "--onto", "v2.0.0", "v1.0.0", "series"))
    shutil.rmtree(clone)
    return timing


def count_processes(action: Callable[[], object]) -> int:
    """How many processes `action` starts (every one goes through subprocess.run): a figure
    of the work a port does that the load of a shared machine does not move."""
    real = subprocess.run
    started = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        started.append(1)
        return real(*args, **kwargs)

    subprocess.run = counting
    try:
        action()
    finally:
        subprocess.run = real
    return len(started)


def forget_series(home: Path) -> None:
    """Delete the old-series commits cached in the mirror: the next port is cold."""
    for mirror in (home / "mirrors").glob("*.git"):
        refs = git(mirror, "for-each-ref", "--format=%(refname)", SERIES_REFS).split()
        for ref in refs:
            git(mirror, "update-ref", "-d", ref)


def time_port(project: Path, home: Path, name: str, *, dry_run: bool, cold: bool) -> Timing:
    """One port, in process; `cold` forgets the cached old-series commits first."""
    if cold:
        forget_series(home)
    request = PortRequest(
        project / "manifests", "1.0", "2.0", Home(home), PortFlags(dry_run, branch=f"port/{name}")
    )
    reports = []
    timing = _timed(lambda: reports.append(start(request)))
    report = reports[0]
    bad = [r for r in report.results if r.outcome.value not in ("CLEAN", "CLEAN_3WAY", "RENAMED")]
    if report.exit_code != 0 or bad:
        raise SystemExit(f"port did not come out clean: {bad or report.status}")
    return timing


def main() -> int:
    """Parse the options, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--patches", type=int, default=50)
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temp dir")
    parser.add_argument("--keep", action="store_true", help="keep the generated repositories")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--mails", action="store_true", help="write the series as mails")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="lifecycle-bench-port-", dir=args.dir))
    try:
        results = run(root, args)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key}: {value}")
    return 0


def run(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Generate, warm up, time; the figures."""
    upstream, project = generate(root, args.files, args.patches, mails=args.mails)
    series = series_commits(root, upstream, project)
    home = root / "home"
    start(
        PortRequest(project / "manifests", "1.0", "2.0", Home(home), PortFlags(dry_run=True))
    )  # the mirror
    runs: dict[str, list[Timing]] = {k: [] for k in ("rebase", "cold", "warm", "dry")}
    for i in range(args.repeat):  # interleaved, so drift on a shared machine hits all alike
        runs["rebase"].append(time_rebase(root, series, i))
        runs["cold"].append(time_port(project, home, f"cold-{i}", dry_run=False, cold=True))
        runs["warm"].append(time_port(project, home, f"warm-{i}", dry_run=False, cold=False))
        runs["dry"].append(time_port(project, home, f"dry-{i}", dry_run=True, cold=False))
    env = {**os.environ, "LIFECYCLE_HOME": str(home), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests")]
    cli = _timed(
        lambda: subprocess.run(
            [*command, "port", "1.0", "2.0", "--branch", "port/cli"],
            env=env,
            capture_output=True,
            check=True,
        )
    )
    forget_series(home)
    processes = {}
    for kind, dry in (("cold", False), ("warm", False), ("dry", True)):
        request = PortRequest(
            project / "manifests", "1.0", "2.0", Home(home), PortFlags(dry, branch=f"port/n-{kind}")
        )
        processes[kind] = count_processes(partial(start, request))
    outcomes = start(
        PortRequest(project / "manifests", "1.0", "2.0", Home(home), PortFlags(dry_run=True))
    )
    counts: dict[str, int] = {}
    for result in outcomes.results:
        counts[result.outcome.value] = counts.get(result.outcome.value, 0) + 1
    wall = {k: statistics.median(t.wall for t in v) for k, v in runs.items()}
    cpu = {k: statistics.median(t.cpu for t in v) for k, v in runs.items()}
    return {
        "patches": args.patches,
        "series": "mails" if args.mails else "plain diffs",
        "upstream_files": args.files,
        "repeat": args.repeat,
        "outcomes": counts,
        "wall_s": {k: round(v, 3) for k, v in wall.items()},
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "wall_over_rebase": {
            k: round(wall[k] / wall["rebase"], 2) for k in ("cold", "warm", "dry")
        },
        "cpu_over_rebase": {k: round(cpu[k] / cpu["rebase"], 2) for k in ("cold", "warm", "dry")},
        # Each port against the rebase of the same iteration, then the median: robust to drift.
        "paired_wall_ratio_median": {
            k: round(
                statistics.median(
                    t.wall / r.wall for t, r in zip(runs[k], runs["rebase"], strict=True)
                ),
                2,
            )
            for k in ("cold", "warm", "dry")
        },
        "processes_per_port": processes,
        "cli_port_wall_s": round(cli.wall, 3),
        "runs_wall_s": {k: [round(t.wall, 3) for t in v] for k, v in runs.items()},
        "git": git(root, "--version").strip(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


if __name__ == "__main__":
    raise SystemExit(main())
