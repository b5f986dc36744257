"""A cluster night's time limits, and how it stops when no node is left, on a Ray cluster of two
"GPU hosts" (tests.cluster_support).

A hung host is a node whose run's Ray worker is SIGSTOPped: its raylet still heartbeats, so Ray
counts the node alive and would wait for ever. The driver gives each run its cell's timeout_s
plus LIFECYCLE_RAY_TASK_MARGIN, then cancels the task and loses the attempt.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_support import HEAD, Cluster, Node, driver_env
from tests.night_support import CHECK_FORCED, journal, wait_for, write_plan

pytestmark = [pytest.mark.docker, pytest.mark.s3]
TIMEOUT_S, MARGIN_S = 30, 20
LIMIT_S = TIMEOUT_S + MARGIN_S  # how long the driver waits for a run's task
# A run takes some 10 s here: the night ends well within this once its hung run is given up.
ENDS_WITHIN_S = LIMIT_S + 120


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, demo_images: None, registry: str
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster-limits")
    cluster = Cluster(root)
    try:
        cluster.add_nodes(
            Node("h200", "H200", "90a", root / "h200"), Node("a100", "A100", "80", root / "a100")
        )
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def project(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, registry: str) -> Path:
    return cluster.pushed_demo(tmp_path_factory.mktemp("limits-project") / "project", registry)


def _night(cluster: Cluster, project: Path, name: str, serve_s: int) -> subprocess.Popen[str]:
    """A night of two cold runs of demo/0.2, each run on either node, started."""
    slow = {"args": ["--serve-seconds", str(serve_s)], "repeats": 2, "checks": [CHECK_FORCED],
            "timeout_s": TIMEOUT_S}  # fmt: skip
    end = {"archive": True, "teardown": False}
    plan = write_plan(
        project, name, pins=["demo/0.2"], cache_states=["cold"], profiles={"slow": slow}, end=end
    )
    env = {**driver_env(project.parent / "driver"), "LIFECYCLE_RAY_TASK_MARGIN": str(MARGIN_S)}
    return cluster.popen(
        sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), "night",
        str(plan), "--engine", "ray", "--address", HEAD, "--json", env=env,
    )  # fmt: skip


@contextlib.contextmanager
def _hung(cluster: Cluster, process: subprocess.Popen[str]) -> Iterator[list[int]]:
    """The Ray workers the block SIGSTOPs (it adds their pids), SIGKILLed after it, and the
    night with them if it is still running: the next test finds its nodes free."""
    stopped: list[int] = []
    try:
        yield stopped
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            cluster.kill(process)


def _runs_on(
    cluster: Cluster, night: subprocess.Popen[str], which: Callable[[Iterable[bool]], bool]
) -> Callable[[], bool]:
    """Whether a run's worker is up on `which` (any, all) of the nodes; a night that ended
    before is a failure with its own words, not a wait for runs that will never come."""

    def running() -> bool:
        if night.poll() is not None:
            out, err = night.communicate()
            raise AssertionError(f"the night ended (exit {night.returncode}): {out}\n{err}")
        return which(bool(cluster.workers_of(node, "run")) for node in cluster.nodes)

    return running


def _ended(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str, float]:
    """Exit code, the --json report, stderr and how long the night took, once it ended."""
    began = time.monotonic()
    try:
        out, err = process.communicate(timeout=ENDS_WITHIN_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the night still runs {ENDS_WITHIN_S} s after a node hung") from None
    assert out, err
    return process.returncode, json.loads(out), err, time.monotonic() - began


def _lost(project: Path) -> list[dict[str, Any]]:
    """The lost attempts of the driver's last night, as journalled."""
    rows = journal(
        project.parent / "driver",
        "SELECT detail FROM night_events WHERE event = 'lost'"
        " AND night_id = (SELECT max(id) FROM nights)",
    )
    return [json.loads(detail) for (detail,) in rows]


def test_a_hung_node_loses_its_run_at_the_limit_and_the_night_ends_elsewhere(
    cluster: Cluster, project: Path
) -> None:
    process = _night(cluster, project, "hung", serve_s=3)
    with _hung(cluster, process) as stopped:
        wait_for("a run on a node", _runs_on(cluster, process, any))
        hung = next(n for n in cluster.nodes if cluster.workers_of(n, "run"))
        stopped += cluster.workers_of(hung, "run")
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        code, report, err, took = _ended(process)

    assert code == 1, err  # finished: demo/0.2 fails its forced check, as on one host
    assert report["state"] == "finished" and report["stopped"] is None
    (lost,) = _lost(project)
    assert lost["error"].startswith(f"timeout: no answer within {LIMIT_S} s"), lost
    assert report["lost"] == [lost] and f"lost on {lost['node']}" in err
    runs = [run for cell in report["cells"] for run in cell["runs"]]
    assert sorted(r["run"] for r in runs) == [1, 2]  # each counted once, none on the hung node
    nodes = {r["node"] for r in runs}
    assert len(nodes) == 1 and lost["node"] not in nodes
    hung_boots = {row[0] for row in journal(hung.home, "SELECT id FROM boots")}
    assert not hung_boots & {r["boot_id"] for r in runs}
    assert took < LIMIT_S + 60, f"the night took {took:.0f} s after its run hung"
    assert (project / "prod.state").read_text().strip() == "up"


def test_a_night_with_no_node_left_stops_with_exit_3_and_its_report(
    cluster: Cluster, project: Path
) -> None:
    process = _night(cluster, project, "no-node-left", serve_s=15)
    with _hung(cluster, process) as stopped:
        wait_for("a run on each node", _runs_on(cluster, process, all))
        for node in cluster.nodes:
            stopped += cluster.workers_of(node, "run")
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        code, report, err, took = _ended(process)

    assert code == 3, err  # the cluster failed the night, not its plan
    assert report["state"] == "running"  # unfinished: `lifecycle night PLAN` resumes it
    assert "has no room for any run of this night" in report["stopped"]
    assert "the night stopped before its end: " in err
    assert len(report["lost"]) == 2 and all("timeout" in a["error"] for a in report["lost"])
    assert report["lost"] == _lost(project)
    assert Path(report["report"]["json_file"]).exists()
    assert took < LIMIT_S + 60
    assert (project / "prod.state").read_text().strip() == "up"
