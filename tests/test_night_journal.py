"""Which night a plan runs: its unfinished one (resumed), never one that measured other builds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from lifecycle.errors import LifecycleError
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.nights import run_steps
from lifecycle.night.engine import Engine, RunSummary
from lifecycle.night.journal import FINISHED, RERUN, NightJournal
from lifecycle.night.local import LocalEngine
from lifecycle.night.plan import load_plan
from lifecycle.night.prepare import prepare
from lifecycle.night.run import Night, NightRequest, _begin, _journal

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def night(tmp_path: Path) -> Night:
    return Night(
        ledger=Ledger.open(tmp_path / "home"),
        home=Home(tmp_path / "home"),
        engine=cast(Engine, None),  # choosing the night needs no engine
        manifests_dir=REPO / "manifests",
        project=REPO,
        store=None,
        say=lambda line: None,
        now=lambda: datetime.now(UTC),
    )


def _chosen(
    night: Night, request: NightRequest, builds: dict[str, str]
) -> tuple[NightJournal, str | None]:
    """The night `run_night` would run, its plan prepared as a dry run prepares it."""
    prepared = prepare(request.loaded.plan, REPO / "manifests", REPO, None)
    resumed, note = _journal(night, request, builds, prepared)
    return resumed or _begin(night, request, builds), note


def test_a_plan_resumes_its_unfinished_night_and_refuses_one_of_other_builds(night: Night) -> None:
    request = NightRequest(load_plan(REPO / "nights/demo.yaml"))
    builds = {"demo/0.1": "a" * 64, "demo/0.2": "b" * 64}
    first, note = _chosen(night, request, builds)
    assert note is None and first.builds() == builds
    again, note = _chosen(night, request, builds)
    assert again.night.id == first.night.id and note == f"resuming night {first.night.id}"
    other = {**builds, "demo/0.2": "c" * 64}
    with pytest.raises(LifecycleError, match=r"measured other builds of demo/0\.2"):
        _chosen(night, request, other)
    fresh, _ = _chosen(night, NightRequest(request.loaded, new=True), other)
    assert fresh.night.id != first.night.id and fresh.builds() == other


def test_a_finished_night_is_shown_not_rerun_unless_asked_or_its_builds_changed(
    night: Night,
) -> None:
    request = NightRequest(load_plan(REPO / "nights/demo.yaml"))
    builds = {"demo/0.1": "a" * 64, "demo/0.2": "b" * 64}
    first, _ = _chosen(night, request, builds)
    first.event(FINISHED)
    shown, note = _chosen(night, request, builds)
    assert shown.night.id == first.night.id and note is not None and "nothing to run" in note
    assert "--rerun" in note  # its builds stand: a cell may run again
    rerun = NightRequest(request.loaded, rerun=("demo/0.2:forced:*",))
    reopened, _ = _chosen(night, rerun, builds)
    assert reopened.night.id == first.night.id
    reopened.event(RERUN, "demo/0.2:forced:cold")
    assert not reopened.finished and reopened.attempt("demo/0.2:forced:cold") == 2
    first.event(FINISHED)
    rebuilt, _ = _chosen(night, request, {**builds, "demo/0.2": "c" * 64})
    assert rebuilt.night.id != first.night.id  # another build: another night


def test_a_finished_night_run_again_on_what_its_ladders_wrote_is_shown_not_begun_again(
    night: Night,
) -> None:
    request = NightRequest(load_plan(REPO / "nights/demo.yaml"))
    measured = {"demo/0.1": "a" * 64, "demo/0.2": "b" * 64}
    first, _ = _chosen(night, request, measured)
    written = {**measured, "demo/0.2": "c" * 64}  # its ladder's value moved demo/0.2's digest
    first.event(FINISHED, json.dumps(written))
    shown, note = _chosen(night, request, written)
    assert shown.night.id == first.night.id and note is not None and "nothing to run" in note
    assert "--rerun" not in note and "--new" in note  # --rerun is refused over its writes
    with pytest.raises(LifecycleError, match="pass --new"):
        _chosen(night, NightRequest(request.loaded, rerun=("demo/0.2:*",)), written)
    edited = {**measured, "demo/0.2": "d" * 64}
    assert _chosen(night, request, edited)[0].night.id != first.night.id  # another build


def test_a_rerun_supersedes_the_runs_of_the_attempt_before(night: Night) -> None:
    request = NightRequest(load_plan(REPO / "nights/demo.yaml"))
    journal, _ = _chosen(night, request, {})
    summary = RunSummary(
        cell="demo/0.2:forced:cold", run=1, attempt=1, boot_id="b-1", host="h", outcome="failed",
        exit_code=1, instrumented=False, hooks=[], args=[], verdict="fail", checks=[],
    )  # fmt: skip
    journal.started(summary.cell, 1, 1)
    journal.done(summary)
    assert list(journal.runs()) == [("demo/0.2:forced:cold", 1)]
    journal.event(RERUN, summary.cell)
    assert journal.runs() == {} and journal.boot_ids() == ["b-1"]  # superseded, still recorded
    journal.started(summary.cell, 1, 2)
    last = run_steps(night.ledger, journal.night.id)[-1]
    assert (last.step, last.attempt) == ("started", 2)  # never done: the night resumes there


def test_the_journal_says_which_node_ran_each_boot_for_a_driver_that_resumes(
    night: Night,
) -> None:
    """A resumed cluster night sends its end actions where the boots before it ran."""
    request = NightRequest(load_plan(REPO / "nights/demo.yaml"))
    journal, _ = _chosen(night, request, {})
    for run, node in ((1, "gpu-1/0123abcd"), (2, None)):  # on a cluster; on this host
        summary = RunSummary(
            cell="demo/0.2:forced:cold", run=run, attempt=1, boot_id=f"b-{run}", host="h",
            outcome="ok", exit_code=0, instrumented=False, hooks=[], args=[], verdict="pass",
            checks=[], node=node,
        )  # fmt: skip
        journal.started(summary.cell, run, 1)
        journal.done(summary)
    journal.started("demo/0.2:forced:cold", 3, 1)  # under way: no boot journalled yet
    assert journal.boot_nodes() == {"b-1": "gpu-1/0123abcd", "b-2": None}


def test_this_host_ends_its_own_boots_and_says_it_did_not_end_a_cluster_nodes(
    night: Night,
) -> None:
    """A night begun with `--engine ray`, resumed with the local engine: the boots a node
    ran are out of this host's reach, and the end says so rather than ok."""
    engine = LocalEngine(None, night.ledger, night.home, {}, "unknown")
    mine = engine.teardown({"b-2": None})
    assert mine.ok and mine.detail == "no cache of this night is left"
    mixed = engine.teardown({"b-1": "gpu-1/0123abcd", "b-2": None})
    assert not mixed.ok and "not done on gpu-1/0123abcd" in mixed.detail, mixed
    assert "--engine ray" in mixed.detail
