"""`lifecycle night` against the real Docker engine, S3 server and demo engine, killed for real.

Each test runs the CLI as a process of its own, so a SIGKILL is a SIGKILL: no finally, no
exit trap. What must survive is the journal: production down is said by every verb and
brought back first by whatever runs next, a finished run is never run again, a killed one is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.night_support import (
    CHECK_FORCED,
    finish,
    journal,
    lifecycle,
    make_project,
    sigkill,
    wait_for,
    write_plan,
)
from tests.services import run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]

SLOW = {  # up for a few seconds: long enough to be killed in the middle of
    "args": ["--serve-seconds", "4"],
    "checks": [
        {
            "name": "serves",
            "path": {"log": ["Application startup complete"]},
            "pass_when": {"log": ["Application startup complete"]},
        }
    ],
}
SMALL = {
    "pins": ["demo/0.2"],
    "profiles": {"forced": {"checks": [CHECK_FORCED]}, "slow": SLOW},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, demo_images: None) -> Path:
    """The demo releases built once (images are found by manifest digest, from any home)."""
    root = tmp_path_factory.mktemp("night-base") / "project"
    home = tmp_path_factory.mktemp("build-home")
    previous = os.environ.get("LIFECYCLE_HOME")
    os.environ["LIFECYCLE_HOME"] = str(home)
    try:
        return make_project(root, run_lifecycle)
    finally:
        if previous is None:
            del os.environ["LIFECYCLE_HOME"]
        else:
            os.environ["LIFECYCLE_HOME"] = previous


@pytest.fixture
def project(built: Path, tmp_path: Path, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the built project for one test, archiving to a fresh bucket."""
    root = tmp_path / "project"
    shutil.copytree(built, root, symlinks=True)
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/nights")
    return root


def home() -> Path:
    return Path(os.environ["LIFECYCLE_HOME"])


def runs(cell: str, step: str) -> list[tuple[Any, ...]]:
    return journal(
        home(),
        "SELECT run, attempt, boot_id FROM night_runs WHERE cell = ? AND step = ?",
        (cell, step),
    )


def state(project: Path) -> str:
    return (project / "prod.state").read_text().strip()


def containers_of(docker_client: Any, boot_ids: list[str]) -> list[Any]:
    found = []
    for boot_id in boot_ids:
        found += docker_client.containers.list(filters={"label": f"lifecycle.boot.id={boot_id}"})
    return found


def test_sigkill_mid_cell_resumes_at_the_killed_run_and_never_reruns_a_finished_one(
    project: Path, docker_client: Any, s3_client: Any, s3_bucket: str
) -> None:
    plan = write_plan(project, "small", **SMALL)
    night = lifecycle(project, "night", str(plan))
    wait_for("the slow cell's boot", lambda: bool(runs("demo/0.2:slow:cold", "started")))
    wait_for("its container", lambda: bool(containers_of(docker_client, _running_boots())), 60)
    sigkill(night)

    # Killed between production.down and production.up: only the journal knows.
    assert state(project) == "down"
    code, _, err = finish(lifecycle(project, "boots"))
    assert (
        code == 0 and "PRODUCTION is down: production.down ran and production.up never did" in err
    )
    forced_before = runs("demo/0.2:forced:cold", "done")
    assert len(forced_before) == 1 and runs("demo/0.2:slow:cold", "done") == []
    # The killed boot's engine runs on by itself; let it end before its caches are judged.
    wait_for(
        "the orphaned engine to exit",
        lambda: not containers_of(docker_client, _running_boots()),
        60,
    )

    code, out, err = finish(lifecycle(project, "night", str(plan), "--json"))
    assert code == 1, err  # finished, and the answer is no: 0.2's forced step does not fit
    report = json.loads(out)
    assert "lifecycle: resuming night" in err and report["state"] == "finished"
    assert state(project) == "up"
    assert [r["up"] for r in report["recovered"]] == [True]  # brought back before anything else
    assert runs("demo/0.2:forced:cold", "done") == forced_before  # not run again
    assert (
        len(runs("demo/0.2:slow:cold", "started")) == 2
        and len(runs("demo/0.2:slow:cold", "done")) == 1
    )
    intervals = report["production"]["intervals"]
    assert len(intervals) == 2 and all(i["up_at"] for i in intervals)
    assert report["production"]["downtime_s"] == pytest.approx(sum(i["seconds"] for i in intervals))
    assert [p["verdict"] for p in report["pins"]] == ["fail"]
    assert all(len(c["runs"]) == 1 for c in report["cells"])
    assert {e["action"]: e["ok"] for e in report["end"]} == {"archive": True, "teardown": True}
    assert report["report"]["archived_html"].endswith("report.html")

    # Again: nothing left to run, production untouched.
    log_before = (project / "prod.log").read_text()
    code, out, err = finish(lifecycle(project, "night", str(plan), "--json"))
    again = json.loads(out)
    assert again["ran"] == 0 and "finished; nothing to run" in err
    assert (project / "prod.log").read_text() == log_before
    # Its report written again is a new pair of objects: the first one is still there as it was.
    first, second = report["report"]["archived_html"], again["report"]["archived_html"]
    assert first != second and second.endswith("report.html")
    listed = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix=f"nights/nights/{report['id']}/")
    keys = {f"s3://{s3_bucket}/{item['Key']}" for item in listed["Contents"]}
    assert {first, second} <= keys and len(keys) == 4

    # Unless asked: the forced cells run again, as a second attempt; the rest stay.
    code, out, err = finish(
        lifecycle(project, "night", str(plan), "--rerun", "demo/0.2:forced:*", "--json")
    )
    rerun = json.loads(out)
    assert rerun["ran"] >= 2 and rerun["state"] == "finished", err  # warm-ups come on top
    assert sorted(a for _, a, _ in runs("demo/0.2:forced:warm", "done")) == [1, 2]
    assert len(runs("demo/0.2:slow:warm", "done")) == 1
    assert state(project) == "up"


def test_a_night_killed_once_a_run_is_recorded_counts_that_run_once_when_resumed(
    project: Path,
) -> None:
    """SIGKILLed with the run's result recorded and its summary not journalled: the night run
    again counts that boot's result, boots the run no second time, and ends its caches."""
    plan = write_plan(project, "recorded", pins=["demo/0.2"], cache_states=["cold"],
                      profiles={"forced": {"checks": [CHECK_FORCED]}})  # fmt: skip
    crash = {"LIFECYCLE_TEST_CRASH_AT": "night-run-recorded"}
    code, _, err = finish(lifecycle(project, "night", str(plan), env=crash))
    assert code == -signal.SIGKILL, err
    ((boot_id,),) = journal(home(), "SELECT id FROM boots")
    assert runs("demo/0.2:forced:cold", "done") == []

    code, out, err = finish(lifecycle(project, "night", str(plan), "--json"))
    assert code == 1, err  # finished: 0.2's forced step does not fit, as unkilled
    report = json.loads(out)
    assert report["state"] == "finished" and report["ran"] == 0, err
    assert f"boot {boot_id} recorded its results (fail)" in err
    assert runs("demo/0.2:forced:cold", "done") == [(1, 1, boot_id)]
    assert journal(home(), "SELECT boot_id, name FROM results") == [(boot_id, "forced-64")]
    assert [p["verdict"] for p in report["pins"]] == ["fail"]
    assert {e["action"]: e["ok"] for e in report["end"]} == {"archive": True, "teardown": True}
    caches = journal(
        home(),
        "SELECT c.state FROM boot_caches u JOIN caches c ON c.id = u.cache_id WHERE u.boot_id = ?",
        (boot_id,),
    )
    assert caches and {row[0] for row in caches} == {"torn-down"}
    assert state(project) == "up"


def test_a_cell_whose_container_dockerd_refuses_to_start_is_a_failed_run_not_a_crashed_night(
    project: Path, docker_client: Any
) -> None:
    manifest = project / "manifests/demo/0.2/manifest.yaml"
    # dockerd creates a container on a network it does not have, and refuses only its start.
    manifest.write_text(
        manifest.read_text() + "profiles:\n  nowhere:\n    command: [python3, -m, demollm.serve]\n"
        "    network: nosuch\n"
    )
    code, _, err = finish(lifecycle(project, "build", "demo/0.2"))  # its own digest
    assert code == 0, err
    nowhere = {"boot_profile": "nowhere", "checks": SLOW["checks"]}
    plan = write_plan(project, "nowhere", pins=["demo/0.2"], cache_states=["cold"],
                      profiles={"nowhere": nowhere})  # fmt: skip
    code, out, err = finish(lifecycle(project, "night", str(plan), "--json"))
    assert code == 1, err  # finished, and the answer is no: its one run failed
    assert "a bug" not in err and "Traceback" not in err, err
    report = json.loads(out or "null")
    assert report, err
    assert report["state"] == "finished" and state(project) == "up"
    [cell] = report["cells"]
    [run] = cell["runs"]
    assert run["outcome"] == "failed" and run["boot_id"] is not None, run
    assert "dockerd refused to start the container" in run["error"] and "nosuch" in run["error"]
    assert run["verdict"] != "pass"
    assert runs("demo/0.2:nowhere:cold", "done") == [(1, 1, run["boot_id"])]
    assert docker_client.containers.list(
        all=True, filters={"label": f"lifecycle.boot.id={run['boot_id']}"}
    ) == []  # fmt: skip


def _running_boots() -> list[str]:
    started = journal(home(), "SELECT boot_id FROM night_runs WHERE step = 'done'")
    boots = journal(home(), "SELECT id FROM boots WHERE outcome = 'running'")
    return [row[0] for row in boots if (row[0],) not in started]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_ctrl_c_mid_cell_brings_production_up_before_the_night_exits(
    project: Path, docker_client: Any, signum: int
) -> None:
    plan = write_plan(project, "small", **SMALL)
    night = lifecycle(project, "night", str(plan))
    wait_for("the slow cell's boot", lambda: bool(runs("demo/0.2:slow:cold", "started")))
    wait_for("its container", lambda: bool(containers_of(docker_client, _running_boots())), 60)
    night.send_signal(signum)
    code, _, err = finish(night, 120)
    assert code == 128 + signum, err
    assert state(project) == "up"  # the exit trap's job, done by the guard
    assert "production.up: done" in err
    boots = journal(home(), "SELECT outcome FROM boots ORDER BY started_at")
    assert boots[-1] == ("interrupted",)  # the killed run's boot says how it ended
    code, _, err = finish(lifecycle(project, "caches"))
    assert "PRODUCTION" not in err
    code, out, err = finish(lifecycle(project, "night", str(plan), "--json"))
    assert json.loads(out)["state"] == "finished", err
    assert len(runs("demo/0.2:slow:cold", "done")) == 1


def test_sigkill_in_a_warm_run_then_the_resumed_night_settles_its_boot_and_ends(
    project: Path, docker_client: Any
) -> None:
    # The warm run's boot holds the caches of the finished cold run: a night's end archives
    # them, and a dead boot that still held them stopped every resume at "in use by boot".
    plan = write_plan(project, "warmkill", pins=["demo/0.2"], profiles={"slow": SLOW})
    night = lifecycle(project, "night", str(plan))
    wait_for("the warm run's boot", lambda: bool(runs("demo/0.2:slow:warm", "started")))
    wait_for("its container", lambda: bool(containers_of(docker_client, _running_boots())), 60)
    killed = _running_boots()
    sigkill(night)
    wait_for("the orphaned engine to exit", lambda: not containers_of(docker_client, killed), 60)

    code, out, err = finish(lifecycle(project, "night", str(plan), "--json"))
    report = json.loads(out)
    assert code == 0 and report["state"] == "finished", err
    assert {e["action"]: e["ok"] for e in report["end"]} == {"archive": True, "teardown": True}
    outcomes = journal(home(), "SELECT outcome FROM boots WHERE id = ?", (killed[0],))
    assert outcomes == [("interrupted",)]


def test_a_night_whose_production_up_fails_ends_1_and_says_production_is_down(
    project: Path,
) -> None:
    plan = write_plan(project, "upfails", pins=["demo/0.2"], profiles={"slow": SLOW})
    (project / "fail-up").touch()
    code, out, err = finish(lifecycle(project, "night", str(plan)))
    assert code == 1, err
    assert "production: DOWN since " in out and "not brought back" in out
    assert state(project) == "down"


def test_sigkill_while_production_goes_down_then_recover_brings_it_up(project: Path) -> None:
    plan = write_plan(project, "small", **SMALL)
    (project / "slow-down").touch()
    night = lifecycle(project, "night", str(plan))
    wait_for("the down hook to start", lambda: (project / "down.pid").exists())
    sigkill(night)
    os.kill(int((project / "down.pid").read_text()), 9)  # the hook ran in its own session

    code, _, err = finish(lifecycle(project, "caches"))
    assert "PRODUCTION may be down: the night stopped while production.down ran" in err
    code, out, err = finish(lifecycle(project, "night", "--recover", "--json"))
    assert code == 0, err
    assert json.loads(out)["recovered"][0]["up"] is True
    assert state(project) == "up"
    code, _, err = finish(lifecycle(project, "caches"))
    assert "PRODUCTION" not in err
    # The night itself resumes: production down, its cells, production up.
    (project / "slow-down").unlink()
    code, out, err = finish(lifecycle(project, "night", str(plan), "--json"))
    assert json.loads(out)["state"] == "finished", err
    assert state(project) == "up"


def test_a_dry_run_runs_the_hook_that_asks_and_none_that_acts(project: Path) -> None:
    plan = write_plan(project, "small", **SMALL)
    code, out, err = finish(lifecycle(project, "night", str(plan), "--dry-run", "--json"))
    assert code == 0, err
    planned = json.loads(out)
    assert planned["format"] == "lifecycle-night-plan/1"
    assert [c["id"] for c in planned["plan"]["cells"]] == [
        "demo/0.2:forced:cold",
        "demo/0.2:slow:cold",
        "demo/0.2:forced:warm",
        "demo/0.2:slow:warm",
    ]
    roles = {h["role"]: (h["acts"], h["ran"]) for h in planned["plan"]["production"]}
    assert roles == {"down": (True, False), "up": (True, False), "status": (False, True)}
    assert (project / "prod.log").read_text().split()[0] == "production.status"
    assert len((project / "prod.log").read_text().splitlines()) == 1
    assert not (home() / "ledger.sqlite3").exists()  # nothing recorded
    # A night that archives itself needs a location: the dry run says so, and why.
    plan = write_plan(project, "archived", **SMALL, end={"archive": True})
    code, _, err = finish(
        lifecycle(project, "night", str(plan), "--dry-run", env={"LIFECYCLE_ARCHIVE": ""})
    )
    assert code == 2, err
    assert f"no archive location ({plan} archives the night: `end: archive: true`)" in err


LADDER = {
    "schema_version": 1,
    "argument": "gpu_memory_utilization",
    "rungs": [0.91, 0.92],
    "shape": {
        "what": "one request carrying 64 prompts",
        "args": ["--forced-prompts", "64"],
        "path": {"log": ["step 1: requests=1 prompts=64 "]},
    },
    "margin": "demo:forced_step_margin_mib",
    "floor_mib": 40,
    "predictions": {"0.91": 840, "0.92": 20},
}


def test_tune_registers_predictions_first_and_writes_the_value_with_its_validity(
    project: Path, s3_client: Any, s3_bucket: str
) -> None:
    ladder = project / "ladder.yaml"
    ladder.write_text(
        json.dumps(LADDER).replace('"0.91": 840', "0.91: 840").replace('"0.92": 20', "0.92: 20")
    )
    code, out, err = finish(lifecycle(project, "tune", "demo/0.2", str(ladder), "--json"))
    assert code == 0, err
    report = json.loads(out)
    assert report["kind"] == "tune"
    [decision] = report["decisions"]
    assert (decision["action"], decision["value"]) == ("written", 0.91)
    [pin] = report["ladders"][0]["pins"]
    margins = {
        (r["value"], s): m["margin_mib"] for r in pin["rungs"] for s, m in r["measured"].items()
    }
    assert margins == {
        (0.91, "cold"): 789.4,
        (0.91, "warm"): 813.4,
        (0.92, "cold"): -29.8,
        (0.92, "warm"): -5.8,
    }

    # Registered before the first rung booted, and archived where they cannot be rewritten.
    registered = journal(home(), "SELECT min(registered_at) FROM predictions")[0][0]
    first_boot = journal(home(), "SELECT min(at) FROM night_runs")[0][0]
    assert registered < first_boot
    key = f"nights/nights/{report['id']}/predictions.json"
    stored = s3_client.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
    assert json.loads(stored)["predictions"][0]["margin_mib"] == 840.0
    from lifecycle.archive.location import ArchiveLocation
    from lifecycle.archive.store import BlobStore

    store = BlobStore(s3_client, ArchiveLocation(s3_bucket, "nights"))
    assert store.put_document(key, b"{}", only_new=True) is False  # never over the registered
    assert s3_client.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == stored

    written = (project / "manifests/demo/0.2/manifest.yaml").read_text()
    assert "value: 0.91\n    status: validated" in written
    code, out, _ = finish(lifecycle(project, "show", "demo/0.2", "--json"))
    tuned = json.loads(out)["tuned"]["gpu_memory_utilization"]
    validity = tuned["validity"]
    assert validity["observers"] == [] and validity["cache_states"] == ["cold", "warm"]
    assert validity["measured_mib"] == {"cold": 789.4, "warm": 813.4}
    assert validity["predicted_mib"] == 840.0 and validity["night"] == report["id"]


def tuned_and_journalled(project: Path) -> tuple[str, list[Any]]:
    """The manifest as the tune left it (its stamp and night id aside), and the ledger's night
    as steps: nights, their events and run steps in order, boots."""
    written = (project / "manifests/demo/0.2/manifest.yaml").read_text()
    written = re.sub(r"(measured_at|night): .*", r"\1: *", written)
    assert written.count("status: validated") == 1, written
    ledger = [
        journal(home(), "SELECT kind FROM nights"),
        journal(home(), "SELECT event FROM night_events ORDER BY id"),
        journal(home(), "SELECT cell, run, attempt, step FROM night_runs ORDER BY id"),
        journal(home(), "SELECT count(*) FROM boots"),
    ]
    return written, ledger


@pytest.mark.parametrize(
    "point", ["night-written", "night-settled", "night-ended", "night-finished"]
)
def test_a_tune_killed_at_each_step_resumes_to_the_end_an_unkilled_one_reaches(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    # Resumed without a build: the value written moved the manifest's digest, a build nobody
    # made (nor needs: no rung is left to boot). The resume boots nothing, takes no end action
    # twice and writes the report; manifest and ledger end as an unkilled tune leaves them.
    unkilled = tmp_path / "unkilled"
    shutil.copytree(project, unkilled, symlinks=True)
    ladder = project / "ladder.yaml"
    ladder.write_text(json.dumps({k: v for k, v in LADDER.items() if k != "predictions"}))
    killed = lifecycle(
        project, "tune", "demo/0.2", str(ladder), env={"LIFECYCLE_TEST_CRASH_AT": point}
    )
    code, _, err = finish(killed)
    assert code == -signal.SIGKILL, err
    code, out, err = finish(lifecycle(project, "tune", "demo/0.2", str(ladder), "--json"))
    assert code == 0, err
    report = json.loads(out)
    assert report["ran"] == 0 and report["state"] == "finished"
    assert [d["action"] for d in report["decisions"]] == ["written"]
    assert Path(report["report"]["json_file"]).is_file()
    resumed = tuned_and_journalled(project)

    monkeypatch.setenv("LIFECYCLE_HOME", str(tmp_path / "unkilled-home"))
    ladder = unkilled / "ladder.yaml"
    ladder.write_text(json.dumps({k: v for k, v in LADDER.items() if k != "predictions"}))
    code, _, err = finish(lifecycle(unkilled, "tune", "demo/0.2", str(ladder)))
    assert code == 0, err
    assert resumed == tuned_and_journalled(unkilled)


def test_revalidate_proposes_a_new_value_when_the_carried_one_does_not_clear(project: Path) -> None:
    before = (project / "manifests/demo/0.2/manifest.yaml").read_text()
    code, out, err = finish(lifecycle(project, "tune", "demo/0.2", "--revalidate", "--json"))
    assert code == 1, err
    [decision] = json.loads(out)["decisions"]
    assert (decision["action"], decision["value"]) == ("proposed", 0.91)
    assert "carried 0.92 does not clear 40 MiB" in decision["detail"]
    assert (project / "manifests/demo/0.2/manifest.yaml").read_text() == before
    # The morning screen says a proposal waits, and why (it showed the pin `untested` only).
    code, out, err = finish(lifecycle(project, "status"))
    assert f"\n  demo/0.2 gpu_memory_utilization: proposed: {decision['detail']}\n" in out, err
    assert "untested" not in out  # a tune's pin has no matrix cell, so no verdict to show
    code, out, err = finish(lifecycle(project, "status", "--json"))
    [proposed] = json.loads(out)["night"]["proposed"]
    assert proposed == {k: decision[k] for k in ("pin", "argument", "value", "detail")}, err
    # A carried value that clears on this release becomes validated as it is.
    manifest = project / "manifests/demo/0.2/manifest.yaml"
    manifest.write_text(before.replace("value: 0.92", "value: 0.91"))
    code, _, err = finish(lifecycle(project, "build", "demo/0.2"))  # another build: its image
    assert code == 0, err
    code, out, err = finish(lifecycle(project, "tune", "demo/0.2", "--revalidate", "--json"))
    [decision] = json.loads(out)["decisions"]
    assert code == 0 and (decision["action"], decision["value"]) == ("written", 0.91), err
    assert "value: 0.91\n    status: validated" in manifest.read_text()
    code, out, err = finish(lifecycle(project, "status", "--json"))
    assert json.loads(out)["night"]["proposed"] == [], err  # the last night wrote its value
    # demo/0.1's value is validated, not carried: nothing to revalidate.
    code, _, err = finish(lifecycle(project, "tune", "demo/0.1", "--revalidate"))
    assert code == 2 and "no tuned value is carried" in err
