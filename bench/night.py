"""A night whose engine mostly waits, on this host's Docker engine and on a Ray cluster of one and
of two nodes: the wall of each whole `lifecycle night` process and the driver's peak memory.

The cluster runs in a network namespace this script makes (tests.cluster_support: a head, two
"GPU" nodes, an S3 server inside; dockerd and the registry outside, on this host). Node A offers
the resources `solo` and `duo`, node B only `duo`: the same plan with `gpu: solo` runs on one
node, with `gpu: duo` on two. The local night archives to the S3 server `.ci/with-services`
started (AWS_* in the environment). Each round runs the three nights in turn (local, Ray on 1
node, Ray on 2), each a new night of the same plan; the ratios are taken round by round.

    .ci/with-services python3 bench/night.py --rounds 2 --json   # ~16 min
    python3 bench/night.py --hold DIR   # set up, write DIR/{local,ray1,ray2}.sh, wait (Ctrl-C)

Two figures per run. Ray's scheduling: each run's wall on the driver (task sent to result
back) less the task's own wall on its node, as the report gives it (`scheduling_s`). And what
a run costs on Ray over one host: (Ray-on-one-node wall - local wall) / runs, the same boots
one after another, so what differs is Ray (connect, survey, a task per run) and the node's
own work a local run does not do (a home, a Docker and an S3 client per task, each run's
caches archived with their files before the task returns).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster_support import HEAD, Cluster, Node  # noqa: E402
from tests.night_support import CHECK_FORCED, make_project  # noqa: E402

WAIT_S = 20.0  # what each run's engine waits, as a GPU-bound boot waits for the host CPU
RUNS = 4  # of each cache state: 8 runs a night


def plan(gpu: str | None) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": f"bench-{gpu or 'local'}",
        "pins": ["demo/0.1"],
        "profiles": {
            "wait": {
                "args": ["--serve-seconds", f"{WAIT_S:g}"],
                "repeats": RUNS,
                "checks": [CHECK_FORCED],
            }
        },
        "end": {"archive": True, "teardown": True},
        **({"gpu": {"demo/0.1": gpu}} if gpu else {}),
    }


def set_up(root: Path) -> tuple[Cluster, dict[str, list[str]], dict[str, dict[str, str]]]:
    """The cluster, the project built and pushed; the three night commands and environments."""
    registry = os.environ["LIFECYCLE_TEST_REGISTRY"]
    local_s3 = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    cluster = Cluster(root)
    cluster.add_nodes(
        Node("a", "solo", "90a", root / "a", also={"duo": 1}), Node("b", "duo", "90a", root / "b")
    )
    driver = {"LIFECYCLE_HOME": str(root / "driver"), "LIFECYCLE_ARCHIVE": "s3://night/bench"}

    def build(project: Path, *args: str) -> Any:
        done = cluster.run(
            sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), *args,
            "--push", registry, env=driver, timeout=600,
        )  # fmt: skip
        return type("Built", (), {"exit_code": done.returncode, "output": done.stderr})

    project = make_project(root / "project", build)
    commands, envs = {}, {}
    for name, gpu in (("local", None), ("ray1", "solo"), ("ray2", "duo")):
        file = project / f"{name}.yaml"
        file.write_text(json.dumps(plan(gpu)))
        night = [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"),
                 "night", str(file), "--new"]  # fmt: skip
        if name == "local":
            bucket = f"lifecycle-bench-{os.getpid()}"
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"import boto3; boto3.client('s3').create_bucket(Bucket='{bucket}')",
                ],
                check=True,
            )
            envs[name] = {**os.environ, **local_s3, "PYTHONPATH": str(REPO),
                          "LIFECYCLE_HOME": str(root / "local"),
                          "LIFECYCLE_ARCHIVE": f"s3://{bucket}/bench"}  # fmt: skip
            commands[name] = night
        else:
            envs[name] = {**cluster.env, **driver}
            commands[name] = cluster.argv(*night, "--engine", "ray", "--address", HEAD)
    return cluster, commands, envs


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, list[float]]:
    """(wall s, the driver's peak RSS in MiB, each run's scheduling_s) of one whole night."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.monotonic()
        process = subprocess.Popen([*command, "--json"], env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):
            err.seek(0)
            raise SystemExit(f"{' '.join(command[-6:])} exited {code}:\n{err.read()[-3000:]}")
        out.seek(0)
        report = json.load(out)
    runs = [run for cell in report["cells"] for run in cell["runs"]]
    scheduling = [r["scheduling_s"] for r in runs if r.get("scheduling_s") is not None]
    return wall, usage.ru_maxrss / 1024, scheduling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--hold", type=Path, help="set up, write the commands here, and wait")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lifecycle-bench-night."))
    cluster, commands, envs = set_up(root)
    try:
        if args.hold is not None:
            args.hold.mkdir(parents=True, exist_ok=True)
            for name, command in commands.items():
                env = " ".join(
                    f"{k}={v}"
                    for k, v in envs[name].items()
                    if k.startswith(("AWS_", "LIFECYCLE_", "PYTHONPATH", "RAY_"))
                )
                (args.hold / f"{name}.sh").write_text(f"exec env {env} {' '.join(command)}\n")
            print(f"commands in {args.hold}; Ctrl-C ends the cluster", flush=True)
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
            return
        rounds: list[dict[str, tuple[float, float, list[float]]]] = []
        for _ in range(args.rounds):
            rounds.append({name: timed(commands[name], envs[name]) for name in commands})
        report = summary(rounds)
        print(json.dumps(report, indent=1) if args.json else table(report))
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def summary(rounds: list[dict[str, tuple[float, float, list[float]]]]) -> dict[str, Any]:
    runs = 2 * RUNS
    median = {n: statistics.median(r[n][0] for r in rounds) for n in rounds[0]}
    return {
        "runs_per_night": runs,
        "wait_s_per_run": WAIT_S,
        "rounds": len(rounds),
        "wall_s_median": median,
        "peak_rss_mib_median": {n: statistics.median(r[n][1] for r in rounds) for n in rounds[0]},
        "ray1_over_local": statistics.median(r["ray1"][0] / r["local"][0] for r in rounds),
        "ray2_over_local": statistics.median(r["ray2"][0] / r["local"][0] for r in rounds),
        "ray_overhead_s_per_run": statistics.median(
            (r["ray1"][0] - r["local"][0]) / runs for r in rounds
        ),
        "scheduling_s_per_run_median": statistics.median(
            s for r in rounds for name in ("ray1", "ray2") for s in r[name][2]
        ),
    }


def table(report: dict[str, Any]) -> str:
    wall, rss = report["wall_s_median"], report["peak_rss_mib_median"]
    lines = ["| night | wall s (median) | driver peak RSS MiB |", "|---|---:|---:|"]
    lines += [f"| {name} | {wall[name]:.2f} | {rss[name]:.0f} |" for name in wall]
    lines += [
        "",
        f"ray on 1 node / local: {report['ray1_over_local']:.2f}x;"
        f" ray on 2 nodes / local: {report['ray2_over_local']:.2f}x;"
        f" per run, Ray on 1 node less local: {report['ray_overhead_s_per_run']:.2f} s;"
        f" Ray's scheduling (run wall less task wall, median):"
        f" {report['scheduling_s_per_run_median']:.3f} s",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
