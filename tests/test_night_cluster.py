"""`lifecycle night --engine ray` on a real Ray cluster: a head and four "GPU hosts" on this
machine (tests.cluster_support), each with its own LIFECYCLE_HOME, sharing dockerd, a bucket
and the registry the demo images are pulled from.

Nodes: `h200` (resource H200, arch 90a), `a100` (A100, arch 80), `broken` (A100, with no
Docker engine it can reach) and `no-keys` (H200, a wrong secret key for the bucket). Where a
run went is read from the nodes' own ledgers: a boot is recorded only in the home of the host
that made it. The tests run in order: the last one kills a node.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from tests.cluster_support import ARCHIVE, HEAD, Cluster, Node, driver_env
from tests.night_support import CHECK_FORCED, finish, journal, lifecycle, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.s3]
REPO = Path(__file__).resolve().parent.parent
PRODUCTION = {"down": "prod-down", "up": "prod-up", "status": "prod-status"}
FORCED = {"forced": {"checks": [CHECK_FORCED]}}


# Runs lifecycle's CLI as a host without Ray would: `import ray` fails.
WITHOUT_RAY = (
    "import sys; sys.modules['ray'] = None; sys.argv[0] = 'lifecycle';"
    " from lifecycle.cli import main; main()"
)


def test_without_ray_the_cluster_engine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "no-ray", pins=["demo/0.1"], profiles=FORCED)
    env = {**os.environ, "LIFECYCLE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO),
           "LIFECYCLE_ARCHIVE": ARCHIVE}  # fmt: skip
    for engine in (["--engine", "ray"], []):
        if not engine:  # `engine: ray` in the plan asks for it as well
            document = yaml.safe_load(plan.read_text())
            plan.write_text(yaml.safe_dump({**document, "engine": "ray"}))
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_RAY, "--manifests", str(REPO / "manifests"), "night",
             str(plan), *engine],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "the ray engine needs Ray on this host: pip install 'lifecycle[ray]'"
        ]
        assert done.stdout == ""
    assert not (tmp_path / "home").exists(), "nothing was made"


def test_help_and_the_local_engine_do_not_import_ray() -> None:
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom lifecycle.cli import cli\n"
        "for args in (['--help'], ['night', '--help'], ['tune', '--help']):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0\n"
        "import lifecycle.commands.night, lifecycle.night.run, lifecycle.night.node\n"
        "print('ray' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "False"


def test_the_end_names_each_boot_whose_node_is_lost_or_gone_as_not_done() -> None:
    """The end action as the driver takes it, no cluster needed: no task can reach a node lost
    during the night, nor one the journal names that is not in the cluster now (it left, or
    restarted under another Ray node id while a killed driver was down)."""
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.night.cluster import RayEngine, _Node

    engine = object.__new__(RayEngine)  # the nodes as a driver found them; no Ray reached
    lost = _Node("a" * 56, "gpu-1/aaaaaaaa", {"GPU": 1.0}, lost=True, out="died")
    engine.nodes, engine.margin_s = {lost.id: lost}, 1.0
    engine.store = cast(Any, SimpleNamespace(location=ArchiveLocation.parse(ARCHIVE)))
    boots: dict[str, str | None] = {
        "b-1": "gpu-1/aaaaaaaa", "b-2": "gpu-2/bbbbbbbb", "b-3": "gpu-2/bbbbbbbb", "b-4": None
    }  # fmt: skip
    for action in ("archive", "teardown"):
        done = getattr(engine, action)(boots)
        assert not done.ok, done
        assert "gpu-1/aaaaaaaa: lost during the night" in done.detail, done
        assert "not done for its boots b-1" in done.detail, done
        assert "gpu-2/bbbbbbbb: not in the cluster now" in done.detail, done
        assert "not done for its boots b-2, b-3" in done.detail, done
        assert "boots of no node: " in done.detail and done.detail.endswith("boots b-4"), done
    engine.nodes = {}
    assert engine.archive({}).detail == "no node of this night has boots"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, demo_images: None, registry: str
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    cluster = Cluster(root)
    try:
        cluster.add_nodes(
            Node("h200", "H200", "90a", root / "h200"),
            Node("a100", "A100", "80", root / "a100"),
            Node(
                "broken", "A100", "80", root / "broken", {"DOCKER_HOST": "unix:///nonexistent.sock"}
            ),
            Node("no-keys", "H200", "90a", root / "no-keys", {"AWS_SECRET_ACCESS_KEY": "wrong"}),
        )
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def project(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, registry: str) -> Path:
    """The demo project, both releases built and pushed (their image records in the bucket)."""
    return cluster.pushed_demo(tmp_path_factory.mktemp("cluster-project") / "project", registry)


def _plan(project: Path, name: str, **plan: Any) -> Path:
    document = {"schema_version": 1, "name": name, "production": PRODUCTION, **plan}
    path = project / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _night(
    cluster: Cluster, project: Path, plan: Path, *args: str, ok: tuple[int, ...] = (0, 1)
) -> tuple[dict[str, Any], str]:
    done = cluster.run(
        sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), "night",
        str(plan), "--engine", "ray", "--address", HEAD, "--json", *args,
        env=driver_env(project.parent / "driver"), ok=ok, timeout=600,
    )  # fmt: skip
    return json.loads(done.stdout), done.stderr


def _boots(home: Path) -> set[str]:
    """The boots recorded in a node's own ledger."""
    return {row[0] for row in journal(home, "SELECT id FROM boots")}


def _runs(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [run for cell in report["cells"] for run in cell["runs"]]


def _registry_images(home: Path, how: str) -> set[str]:
    return {
        row[0]
        for row in journal(home, "SELECT image_id FROM registry_images WHERE how = ?", (how,))
    }


def test_runs_go_to_the_gpu_their_pin_needs_warm_where_the_cache_is_and_end_on_each_node(
    cluster: Cluster, project: Path, docker_client: Any
) -> None:
    # The images leave dockerd: each node pulls its pin's by digest from the registry on the
    # host's loopback (the `boot --pull` path), as a GPU host that did not build it would.
    pushed = _registry_images(project.parent / "driver", "pushed")
    tags = {image_id: docker_client.images.get(image_id).tags for image_id in pushed}
    for image_id in pushed:
        docker_client.images.remove(image_id, force=True)
    try:
        _placed(cluster, project, pushed)
    finally:  # the images as the tests after this one know them: by their tags
        for image_id, names in tags.items():
            for name in names:
                docker_client.images.get(image_id).tag(name)


def _placed(cluster: Cluster, project: Path, pushed: set[str]) -> None:
    h200, a100, broken, no_keys = cluster.nodes
    plan = _plan(project, "placed", pins=["demo/0.1", "demo/0.2"], profiles=FORCED,
                 gpu={"demo/0.1": "H200", "demo/0.2": "A100"})  # fmt: skip
    report, err = _night(cluster, project, plan)

    assert report["state"] == "finished"
    runs = _runs(report)
    assert len(runs) == 4 and all(r["outcome"] in ("ok", "failed") for r in runs)
    on_h200, on_a100 = _boots(h200.home), _boots(a100.home)
    for run in runs:  # each pin on its own GPU type: its boot is in that node's ledger alone
        mine, other = (
            (on_h200, on_a100) if run["cell"].startswith("demo/0.1") else (on_a100, on_h200)
        )
        assert run["boot_id"] in mine and run["boot_id"] not in other, run
    assert _registry_images(h200.home, "pulled") | _registry_images(a100.home, "pulled") == pushed
    assert not _boots(broken.home), "a node with no Docker engine was given a run"
    assert not _boots(no_keys.home), "a node with no keys to the bucket was given a run"
    # Each is named once, in one line, and the night went on without them.
    for why in ("nonexistent.sock", "cannot reach the bucket"):
        said = [line for line in err.splitlines() if why in line]
        assert len(said) == 1 and "no run goes there" in said[0], err
    # Warm runs went where their pin's cold run left a good cache, and say so.
    for run in runs:
        state = run["cell"].split(":")[2]
        assert run["cache_from"] == ("cold" if state == "cold" else "local"), run
    nodes = {
        r["cell"].split(":")[0]: {
            x["node"] for x in runs if x["cell"].startswith(r["cell"].split(":")[0])
        }
        for r in runs
    }
    assert all(len(n) == 1 for n in nodes.values()) and nodes["demo/0.1"] != nodes["demo/0.2"]
    # The end actions ran on each node that ran cells; nothing torn down that is not archived.
    end = {e["action"]: e for e in report["end"]}
    for action in ("archive", "teardown"):
        assert end[action]["ok"], end
        assert all(node in end[action]["detail"] for node in {r["node"] for r in runs}), end
    for node in (h200, a100):
        assert not list((node.home / "caches").iterdir()), f"{node.name} kept caches"
    archived = cluster.python(
        "import boto3, json\n"
        "keys = [o['Key'] for p in boto3.client('s3').get_paginator('list_objects_v2')"
        ".paginate(Bucket='night', Prefix='lc/') for o in p.get('Contents', [])]\n"
        "print(json.dumps(keys))"
    )
    for run in runs:
        assert any(f"/{run['boot_id']}/" in key for key in archived), run["boot_id"]
    assert (project / "prod.state").read_text().strip() == "up"


def test_a_warm_cell_on_a_node_with_no_cache_restores_the_archived_one(
    cluster: Cluster, project: Path
) -> None:
    """After the night above tore every cache down (archived first), a warm-only night finds
    them in the bucket: the node restores, boots warm, and says `restored`."""
    h200 = cluster.nodes[0]
    assert not list((h200.home / "caches").iterdir())
    plan = _plan(project, "restored", pins=["demo/0.1"], cache_states=["warm"], profiles=FORCED,
                 gpu={"demo/0.1": "H200"}, end={"archive": True, "teardown": False})  # fmt: skip
    report, _ = _night(cluster, project, plan)

    (run,) = _runs(report)
    assert run["cache_from"] == "restored" and run["verdict"] == "pass", run
    assert set(run["cache_modes"].values()) == {"warm"}, run
    assert run["boot_id"] in _boots(h200.home)


def test_the_demo_night_on_the_cluster_reaches_the_verdicts_of_one_host(
    cluster: Cluster, project: Path, tmp_path: Path, s3_bucket: str
) -> None:
    """nights/demo.yaml (its repeats cut and no teardown, to keep CI short: the same cells,
    checks and ladders) on this host's Docker engine and on the cluster: every cell, pin and
    ladder the same."""
    plan = yaml.safe_load((REPO / "nights/demo.yaml").read_text())
    plan["profiles"]["batch"]["repeats"] = 1
    plan["profiles"]["batch"]["instrumented"]["repeats"] = 1
    plan["production"] = PRODUCTION
    plan["end"] = {"archive": True, "teardown": False}  # the teardown per node: tested above
    answers = {}
    for where in ("local", "ray"):
        copy = tmp_path / where / "project"
        shutil.copytree(project, copy, symlinks=True)
        file = _plan(
            copy,
            "demo-acceptance",
            **{k: v for k, v in plan.items() if k not in ("schema_version", "name", "production")},
        )
        if where == "ray":
            report, _ = _night(cluster, copy, file)
        else:
            env = {"LIFECYCLE_HOME": str(tmp_path / "local-home"),
                   "LIFECYCLE_ARCHIVE": f"s3://{s3_bucket}/local"}  # fmt: skip
            code, out, err = finish(lifecycle(copy, "night", str(file), "--json", env=env))
            assert code in (0, 1), err
            report = json.loads(out)
        cells = report["cells"]
        answers[where] = {
            "cells": {c["id"]: (c["verdict"], c["passed"], len(c["runs"])) for c in cells},
            "pins": {p["pin"]: p["verdict"] for p in report["pins"]},
            "ladders": sorted((d["pin"], d["action"], d["value"]) for d in report["decisions"]),
        }
        assert report["state"] == "finished"
    assert answers["ray"] == answers["local"]
    assert len(answers["local"]["cells"]) > 20 and answers["local"]["ladders"]


def _python_of(process: Any) -> int:
    """The pid of the Python that nsenter forked (the driver itself)."""
    wait_for("the driver", lambda: bool(_children(process.pid)), timeout=30)
    return _children(process.pid)[0]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _done_runs(home: Path, plan: str) -> list[tuple[str, int, str]]:
    """The done runs of the nights of one plan, from the driver's journal."""
    return journal(
        home,
        "SELECT r.cell, r.run, r.boot_id FROM night_runs r JOIN nights n ON n.id = r.night_id"
        " WHERE r.step = 'done' AND n.plan_name = ?",
        (plan,),
    )


SLOW = {"slow": {"args": ["--serve-seconds", "3"], "repeats": 4, "checks": [CHECK_FORCED]}}


def test_a_sigkilled_driver_resumes_at_the_unfinished_runs_on_the_cluster(
    cluster: Cluster, project: Path
) -> None:
    plan = _plan(project, "resumed", pins=["demo/0.1"], cache_states=["cold"], profiles=SLOW,
                 end={"archive": True, "teardown": False})  # fmt: skip
    driver = project.parent / "driver"
    process = cluster.popen(
        sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), "night",
        str(plan), "--engine", "ray", "--address", HEAD, env=driver_env(driver),
    )  # fmt: skip
    python = _python_of(process)
    wait_for("a finished run", lambda: bool(_done_runs(driver, "resumed")), timeout=120)
    os.kill(python, signal.SIGKILL)
    process.communicate(timeout=30)
    before = _done_runs(driver, "resumed")
    assert 1 <= len(before) < 4

    report, err = _night(cluster, project, plan)
    assert report["state"] == "finished" and "resuming night" in err, err
    after = _done_runs(driver, "resumed")
    runs = [(cell, run) for cell, run, _ in after if cell.startswith("demo/0.1:slow")]
    assert sorted(runs) == [("demo/0.1:slow:cold", n) for n in (1, 2, 3, 4)], after
    assert set(before) <= set(after)  # what finished before the kill was not run again
    assert (project / "prod.state").read_text().strip() == "up"


# How long a task is held at a point its node reaches: far longer than the test waits for it.
HELD_S = 600


def _driver_killed_at(
    cluster: Cluster,
    project: Path,
    plan: Path,
    point: str,
    *,
    timeout: float,
    reached: Callable[[], bool] | None = None,
) -> str:
    """The night's driver run with its home `project/../driver`, SIGKILLed at the crash point
    `point`; its stderr. With `reached`, `point` is one a run's task reaches on its node: the
    driver hands its tasks LIFECYCLE_TEST_DELAY, which holds them there, and is SIGKILLed once
    `reached()` sees a node got there (a crash point there would kill the task, not the
    driver)."""
    fault = (
        {"LIFECYCLE_TEST_CRASH_AT": point}
        if reached is None
        else {"LIFECYCLE_TEST_DELAY": f"{point}={HELD_S}"}
    )
    killed = cluster.popen(
        sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), "night",
        str(plan), "--engine", "ray", "--address", HEAD,
        env={**driver_env(project.parent / "driver"), **fault},
    )  # fmt: skip
    if reached is not None:
        python = _python_of(killed)

        def there() -> bool:
            if killed.poll() is not None:
                raise AssertionError(f"the driver ended first: {killed.communicate()[1]}")
            return reached()

        wait_for(f"a node at {point}", there, timeout=timeout)
        os.kill(python, signal.SIGKILL)
    _, err = killed.communicate(timeout=timeout)
    assert killed.returncode == -signal.SIGKILL, err
    return str(err)


def test_a_driver_killed_after_its_runs_ends_the_night_on_the_nodes_that_ran_them(
    cluster: Cluster, project: Path
) -> None:
    """The driver SIGKILLed once every run is done, before the end: the one that resumes ran no
    boot, yet archives and tears down on the node that ran each, as the journal names it."""
    h200 = cluster.nodes[0]
    plan = _plan(project, "ended", pins=["demo/0.1"], cache_states=["cold"], profiles=FORCED,
                 gpu={"demo/0.1": "H200"}, end={"archive": True, "teardown": True})  # fmt: skip
    driver = project.parent / "driver"
    _driver_killed_at(cluster, project, plan, "night-settled", timeout=600)
    ((_, _, boot_id),) = _done_runs(driver, "ended")
    assert not _ended(driver, "ended"), "killed before its end"
    left = _caches_of(h200.home, boot_id)  # archived by the run's task, still on its node
    assert left and left <= {"live", "archived"}, left

    report, err = _night(cluster, project, plan)
    assert report["state"] == "finished" and report["ran"] == 0, err
    (run,) = _runs(report)
    assert run["boot_id"] == boot_id and boot_id in _boots(h200.home)
    end = {e["action"]: e for e in report["end"]}
    for action in ("archive", "teardown"):
        assert end[action]["ok"], end
        assert end[action]["detail"].startswith(f"{run['node']}: "), end
        assert "no node of this night has boots" not in end[action]["detail"], end
    assert sorted(_ended(driver, "ended")) == ["end:archive", "end:teardown"]  # each once
    assert _caches_of(h200.home, boot_id) == {"torn-down"}, end  # archived, verified, removed
    archived = cluster.python(
        "import boto3, json\n"
        "keys = [o['Key'] for p in boto3.client('s3').get_paginator('list_objects_v2')"
        ".paginate(Bucket='night', Prefix='lc/') for o in p.get('Contents', [])]\n"
        "print(json.dumps(keys))"
    )
    assert any(f"/{boot_id}/" in key for key in archived), boot_id
    assert (project / "prod.state").read_text().strip() == "up"


def _ended(home: Path, plan: str) -> list[str]:
    """The end actions the nights of one plan journalled, from the driver's journal."""
    rows = journal(
        home,
        "SELECT e.event FROM night_events e JOIN nights n ON n.id = e.night_id"
        " WHERE n.plan_name = ? AND e.event LIKE 'end:%'",
        (plan,),
    )
    return [row[0] for row in rows]


def _caches_of(home: Path, boot_id: str) -> set[str]:
    """The states of the caches a boot used, in its node's own ledger; a cache whose state is
    torn-down has no dir left."""
    rows = journal(
        home,
        "SELECT c.state, c.host_path FROM boot_caches b JOIN caches c ON c.id = b.cache_id"
        " WHERE b.boot_id = ?",
        (boot_id,),
    )
    assert all(Path(where).is_dir() == (state != "torn-down") for state, where in rows), rows
    return {state for state, _ in rows}


# Two cells of one pin start at once, one on each healthy node: `fast` ends first, while `slow`
# still serves on the other node when the driver is killed.
RACED = {
    "fast": {"checks": [CHECK_FORCED]},
    "slow": {"args": ["--serve-seconds", "15"], "checks": [CHECK_FORCED]},
}


def test_a_driver_killed_while_a_node_boots_resumes_with_every_boot_ended_and_counted_once(
    cluster: Cluster, project: Path, docker_client: Any
) -> None:
    """The driver SIGKILLed as it journals the first run done, the other node mid-boot: Ray
    ends that task, whose engine dockerd runs on. The night run again finishes, and leaves no
    boot `running` on any node, no engine serving for an ended boot, no cache removed that was
    not archived, each run's results once, and the run done before the kill not run again."""
    plan = _plan(project, "raced", pins=["demo/0.1"], cache_states=["cold"], profiles=RACED,
                 end={"archive": True, "teardown": True})  # fmt: skip
    driver = project.parent / "driver"
    nodes = cluster.nodes[:2]  # h200 and a100: the others get no run
    before = {node.name: _boots(node.home) for node in nodes}
    err = _driver_killed_at(cluster, project, plan, "night-run-done", timeout=300)
    ((cell, _, fast_boot),) = _done_runs(driver, "raced")
    assert cell == "demo/0.1:fast:cold"
    orphans = {n.name: _boots(n.home) - before[n.name] - {fast_boot} for n in nodes}
    assert any(orphans.values()), f"the slow run had not booted when the driver died: {err}"

    report, err = _night(cluster, project, plan)

    assert report["state"] == "finished" and report["ran"] == 1, err
    runs = {r["cell"]: r for r in _runs(report)}
    assert runs["demo/0.1:fast:cold"]["boot_id"] == fast_boot  # done before the kill: kept
    assert sorted(_done_runs(driver, "raced"))[0][2] == fast_boot
    made = {n.name: _boots(n.home) - before[n.name] for n in nodes}
    states = {b: _outcome(n.home, b) for n in nodes for b in made[n.name]}
    assert "running" not in states.values(), (states, orphans, err)
    for orphan in {b for found in orphans.values() for b in found}:  # ended, and said so
        assert states[orphan] == "interrupted" and f"boot {orphan}: " in err, (orphan, err)
    serving = _serving(docker_client, set(states))
    assert not serving, f"engines serve for boots that ended: {serving}"
    for node in nodes:
        _archived_before_removed(cluster, node.home)
    # Each run's checks recorded once among the boots the night counts; an orphan's are its own.
    counted = {r["boot_id"] for r in runs.values()}
    results = [(b, n) for node in nodes for b, n in _results(node.home) if b in counted]
    assert sorted(results) == sorted((b, "forced-64") for b in counted), results
    end = {e["action"]: e for e in report["end"]}
    assert end["archive"]["ok"] and end["teardown"]["ok"], end
    assert (project / "prod.state").read_text().strip() == "up"


def _outcome(home: Path, boot_id: str) -> str:
    ((outcome,),) = journal(home, "SELECT outcome FROM boots WHERE id = ?", (boot_id,))
    return str(outcome)


def _results(home: Path) -> list[tuple[str, str]]:
    return [(b, n) for b, n in journal(home, "SELECT boot_id, name FROM results")]


def _serving(docker_client: Any, boot_ids: set[str]) -> dict[str, str]:
    """The engines dockerd runs now for those boots, by boot."""
    running = docker_client.containers.list(filters={"label": "lifecycle.boot.id"})
    by_boot = {c.labels["lifecycle.boot.id"]: c.name for c in running}
    return {boot: name for boot, name in by_boot.items() if boot in boot_ids}


def _archived_before_removed(cluster: Cluster, home: Path) -> None:
    """Every cache a node tore down has an archive verified, and each archive its ledger records
    is in the bucket."""
    rows = journal(
        home,
        "SELECT c.id, c.state, a.record_key, a.verified_at FROM caches c"
        " LEFT JOIN archives a ON a.cache_id = c.id",
    )
    for cache_id, state, _, verified in rows:
        assert state != "torn-down" or verified, f"{cache_id} removed, never archived"
    keys = sorted({key for _, _, key, _ in rows if key})  # the full key, prefix included
    missing = cluster.python(
        "import boto3, json\n"
        f"keys = {keys!r}\n"
        "s3 = boto3.client('s3')\n"
        "print(json.dumps([k for k in keys"
        " if not s3.list_objects_v2(Bucket='night', Prefix=k).get('KeyCount')]))"
    )
    assert not missing, f"archived in the ledger, not in the bucket: {missing}"


def test_a_driver_killed_after_a_node_recorded_a_run_counts_that_run_once_and_ends_its_boot(
    cluster: Cluster, project: Path, docker_client: Any
) -> None:
    """The driver SIGKILLed while a run's task holds at night-run-recorded: its boot ended and
    its result is in its node's ledger, its caches not archived yet, its summary never back;
    Ray ends the task. The night run again leaves one result per run of the night on every
    node (that boot's, counted; no second boot of the run), that boot archived and torn down
    as the plan says, nothing removed that was not archived, and the night's verdict."""
    h200, a100 = cluster.nodes[:2]
    plan = _plan(project, "orphaned", pins=["demo/0.1"], cache_states=["cold"], profiles=FORCED,
                 gpu={"demo/0.1": "H200"}, end={"archive": True, "teardown": True})  # fmt: skip
    driver = project.parent / "driver"
    before = {node.name: _boots(node.home) for node in (h200, a100)}

    def recorded() -> bool:
        return any(b not in before[h200.name] for b, _ in _results(h200.home))

    _driver_killed_at(cluster, project, plan, "night-run-recorded", timeout=300, reached=recorded)
    (orphan,) = _boots(h200.home) - before[h200.name]
    assert _outcome(h200.home, orphan) in ("ok", "failed")  # ended, its result recorded
    assert not _done_runs(driver, "orphaned"), "its summary never reached the journal"
    wait_for("Ray to end the held task", lambda: not cluster.workers_of(h200, "run"), timeout=60)
    assert _caches_of(h200.home, orphan) == {"live"}, "its task had not archived it yet"

    report, err = _night(cluster, project, plan)

    assert report["state"] == "finished", err
    for node in (h200, a100):  # one result per check of each run: the boot's it was recorded by
        recorded_runs = _night_results(node.home, report["id"])
        assert all(n == 1 for n in recorded_runs.values()), (node.name, recorded_runs, err)
    assert _night_results(h200.home, report["id"]) == {
        ("demo/0.1:forced:cold", 1, 1, "forced-64"): 1
    }
    (run,) = _runs(report)
    assert run["boot_id"] == orphan and report["ran"] == 0, (run, err)
    assert f"boot {orphan}" in err and "not run again" in err, err
    assert {n.name: _boots(n.home) - before[n.name] for n in (h200, a100)} == {
        h200.name: {orphan},
        a100.name: set(),
    }
    assert _caches_of(h200.home, orphan) == {"torn-down"}  # archived, verified, removed
    for node in (h200, a100):
        _archived_before_removed(cluster, node.home)
    assert not _serving(docker_client, {orphan})
    end = {e["action"]: e for e in report["end"]}
    assert end["archive"]["ok"] and end["teardown"]["ok"], end
    assert [p["verdict"] for p in report["pins"]] == ["pass"], report["pins"]
    assert (project / "prod.state").read_text().strip() == "up"


def _night_results(home: Path, night: str) -> dict[tuple[str, int, int, str], int]:
    """How many results a node's ledger holds for each (cell, run, attempt, check) of a night,
    as their documents name them."""
    found: dict[tuple[str, int, int, str], int] = {}
    for name, where in journal(home, "SELECT name, document_path FROM results"):
        document = json.loads(Path(where).read_text()) if where else {}
        if document.get("night") == night:
            key = (document["cell"], document["run"], document["attempt"], name)
            found[key] = found.get(key, 0) + 1
    return found


def test_a_node_killed_mid_run_loses_the_attempt_and_the_night_finishes_elsewhere(
    cluster: Cluster, project: Path
) -> None:
    h200, a100, *_ = cluster.nodes
    plan = _plan(project, "killed", pins=["demo/0.2"], cache_states=["cold"], profiles=SLOW,
                 end={"archive": True, "teardown": False})  # fmt: skip
    driver = project.parent / "driver"
    process = cluster.popen(
        sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), "night",
        str(plan), "--engine", "ray", "--address", HEAD, "--json", env=driver_env(driver),
    )  # fmt: skip
    # The pin needs no GPU type: the node that boots first dies, the other finishes the night.
    before = {node.name: _boots(node.home) for node in (h200, a100)}

    def booting() -> list[Node]:
        return [node for node in (h200, a100) if _boots(node.home) - before[node.name]]

    wait_for("a boot on a GPU node", lambda: bool(booting()), timeout=240)
    victim = booting()[0]
    survivor = a100 if victim is h200 else h200
    os.kill(cluster.raylet_of(victim), signal.SIGKILL)
    out, err = process.communicate(timeout=600)
    assert process.returncode in (0, 1) and out, err
    report = json.loads(out)

    assert report["state"] == "finished"
    runs = _runs(report)
    assert sorted(r["run"] for r in runs) == [1, 2, 3, 4]  # each run counted once
    (lost,) = [json.loads(d) for event, d in _events(driver) if event == "lost"]
    assert f"lost on {lost['node']}" in err, err
    assert report["lost"] == [lost]  # the report shows it, apart from the counted runs
    html = Path(report["report"]["html_file"]).read_text()
    assert "Lost attempts (not counted)" in html and lost["node"] in html
    on_survivor = {r["node"] for r in runs if r["boot_id"] in _boots(survivor.home)}
    assert lost["node"] not in on_survivor  # the node that died, which
    rerun = [r for r in runs if r["run"] == lost["run"]]
    assert rerun[0]["node"] in on_survivor  # ran the lost run again
    lost_boots = (_boots(victim.home) - before[victim.name]) - {r["boot_id"] for r in runs}
    assert lost_boots, "the lost attempt's boot is recorded on its node, and not counted"
    # What the lost node finished before it died stays archived, and counted once.
    archived = cluster.python(
        "import boto3, json\n"
        "keys = [o['Key'] for p in boto3.client('s3').get_paginator('list_objects_v2')"
        ".paginate(Bucket='night', Prefix='lc/boots/') for o in p.get('Contents', [])]\n"
        "print(json.dumps(keys))"
    )
    for run in runs:
        assert any(f"/{run['boot_id']}/" in key for key in archived), run
    end = {e["action"]: e for e in report["end"]}
    assert (
        lost["node"] in end["archive"]["detail"]
        and "lost during the night" in end["archive"]["detail"]
    )
    assert (project / "prod.state").read_text().strip() == "up"


def _events(home: Path) -> list[tuple[str, str]]:
    return [
        (event, detail) for event, detail in journal(home, "SELECT event, detail FROM night_events")
    ]
