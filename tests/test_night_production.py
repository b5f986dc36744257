"""Production always comes back: on success, on failure, on SIGINT and SIGTERM; and when it
cannot (SIGKILL), the journal says it is down and every verb repeats it until it is back."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from lifecycle.cli import cli
from lifecycle.home import Home, HomeUnusable
from lifecycle.hooks import HookExit, Interrupted, discover
from lifecycle.ledger import Ledger
from lifecycle.ledger.nights import production_left_down, production_left_down_in
from lifecycle.night.journal import NightJournal
from lifecycle.night.plan import Plan, load_plan
from lifecycle.night.production import (
    ProductionFailed,
    ProductionHooks,
    production_down,
    production_hooks,
)
from lifecycle.night.run import NightBusy, night_lock, recover

REPO = Path(__file__).resolve().parent.parent


class Runner:
    """A fake hook runner: records each event, answers with `rc`, may act during a hook."""

    def __init__(self, rc: dict[str, int] | None = None, during: dict[str, int] | None = None):
        self.events: list[str] = []
        self.rc = rc or {}
        self.during = during or {}  # event -> a signal this process gets while it runs

    def __call__(self, argv: Sequence[str], stdin: str, cwd: Path, timeout: float) -> HookExit:
        event = argv[1]
        self.events.append(event)
        if event in self.during:
            os.kill(os.getpid(), self.during[event])
        return HookExit(self.rc.get(event, 0), f"{event} said hello\n", "")


@pytest.fixture
def journal(tmp_path: Path) -> NightJournal:
    ledger = Ledger.open(tmp_path / "home")
    loaded = load_plan(REPO / "nights/demo.yaml")
    clock = iter(range(10_000))

    def stamp() -> str:
        return datetime(2026, 10, 10, 1, 0, next(clock) % 60, tzinfo=UTC).isoformat()

    return NightJournal.begin(ledger, loaded, "night", REPO, stamp)


@pytest.fixture
def hooks() -> ProductionHooks:
    found = discover(REPO / "hooks")
    return ProductionHooks(found["production-down"], found["production-up"], None)


def production_events(journal: NightJournal) -> list[str]:
    return [e.event for e in journal.events() if e.event.startswith("production.")]


UP = [
    "production.down:intent",
    "production.down:done",
    "production.up:intent",
    "production.up:done",
]


def test_production_comes_back_after_the_block(
    journal: NightJournal, hooks: ProductionHooks
) -> None:
    runner = Runner()
    with production_down(journal, hooks, lambda line: None, runner):
        assert production_events(journal) == UP[:2]
        assert production_left_down(journal.ledger)[0].event == "production.down:done"
    assert runner.events == ["production.down", "production.up"]
    assert production_events(journal) == UP
    assert production_left_down(journal.ledger) == []


def test_production_comes_back_when_the_night_fails(
    journal: NightJournal, hooks: ProductionHooks
) -> None:
    runner = Runner()
    with (
        pytest.raises(RuntimeError, match="docker went away"),
        production_down(journal, hooks, lambda line: None, runner),
    ):
        raise RuntimeError("docker went away")
    assert production_events(journal) == UP


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_production_comes_back_on_sigint_and_sigterm_and_a_second_signal_waits(
    journal: NightJournal, hooks: ProductionHooks, signum: int
) -> None:
    # A second signal arrives while production.up runs: it must not cut the hook short.
    runner = Runner(during={"production.up": signal.SIGTERM})
    with (
        pytest.raises(Interrupted) as raised,
        production_down(journal, hooks, lambda line: None, runner),
    ):
        os.kill(os.getpid(), signum)
        pytest.fail("the signal did not stop the night")
    assert raised.value.signum == signum
    assert production_events(journal) == UP
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_a_failed_down_stops_the_night_and_still_brings_production_up(
    journal: NightJournal, hooks: ProductionHooks
) -> None:
    runner = Runner(rc={"production.down": 3})
    with (
        pytest.raises(ProductionFailed, match="exited 3"),
        production_down(journal, hooks, lambda line: None, runner),
    ):
        pytest.fail("the night went on with production in an unknown state")
    assert production_events(journal) == [
        "production.down:intent",
        "production.down:failed",
        "production.up:intent",
        "production.up:done",
    ]


def test_a_down_hooks_flood_is_shown_as_its_end_saying_how_much_came_before(
    journal: NightJournal, tmp_path: Path
) -> None:
    """A real down hook that prints past OUTPUT_TAIL_BYTES (64 KiB) and fails: the night's
    error and its journal show the last of it under a marker saying how much is missing."""
    (tmp_path / "hooks").mkdir()
    for name, body in (("down", "yes 'still draining' | head -c 70000 >&2\nexit 3\n"),
                       ("up", "exit 0\n")):  # fmt: skip
        (tmp_path / "hooks" / name).write_text(f"#!/bin/sh\n{body}")
        (tmp_path / "hooks" / name).chmod(0o755)
    found = discover(tmp_path / "hooks")
    with (
        pytest.raises(ProductionFailed) as caught,
        production_down(journal, ProductionHooks(found["down"], found["up"], None), print),
    ):
        pytest.fail("the night went on with production in an unknown state")
    # 70000 bytes of "still draining\n", the last line cut short; shown: the last 20 lines
    missing = 70000 - len("still draining\n") * 19 - len("still drai")
    marker = f"[lifecycle: output cut: {missing} bytes left out before these lines]"
    assert f"'down' exited 3: {marker}\n" in str(caught.value), str(caught.value)[:300]
    [failed] = [e for e in journal.events() if e.event == "production.down:failed"]
    assert failed.detail is not None and failed.detail.startswith(f"exited 3: {marker}\n")


def test_left_down_every_verb_says_so_until_a_recovery_brings_it_up(
    journal: NightJournal, hooks: ProductionHooks, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What a SIGKILL between down and up leaves: the journal, and nothing else.
    journal.event("production.down:intent", "production-down")
    journal.event("production.down:done", "production-down")
    home = tmp_path / "home"  # where the journal fixture opened its ledger
    [left] = production_left_down_in(home)
    assert left.event == "production.down:done" and left.night_id == journal.night.id
    monkeypatch.setenv("LIFECYCLE_HOME", str(home))
    for verb in (["boots"], ["caches"], ["schema"], ["validate", "--json"]):
        out = CliRunner().invoke(cli, ["--manifests", str(REPO / "manifests"), *verb])
        assert "PRODUCTION is down: production.down ran and production.up never did" in out.stderr
        assert "lifecycle night --recover" in out.stderr
    # A failed up keeps it down.
    failing = Runner(rc={"production.up": 1})
    [still] = recover(journal.ledger, journal.stamp, lambda line: None, failing)
    assert not still.up and production_left_down_in(home)[0].event == "production.up:failed"
    [back] = recover(journal.ledger, journal.stamp, lambda line: None, Runner())
    assert back.up and production_left_down_in(home) == []
    out = CliRunner().invoke(cli, ["--manifests", str(REPO / "manifests"), "boots"])
    assert "PRODUCTION" not in out.stderr


def test_an_unreadable_ledger_is_reported_not_taken_for_no_night(tmp_path: Path) -> None:
    home = tmp_path / "home"
    Ledger.open(home).close()
    file = home / "ledger.sqlite3"
    pages = bytearray(file.read_bytes())
    pages[100:] = bytes(len(pages) - 100)  # the header (and so the size) kept, every page gone
    file.write_bytes(pages)
    with pytest.raises(HomeUnusable, match="cannot be read: database disk image is malformed"):
        production_left_down_in(home)
    file.write_bytes(b"not a ledger" * 100)
    with pytest.raises(HomeUnusable, match="is not a SQLite database"):
        production_left_down_in(home)


def test_no_ledger_or_one_from_before_nights_has_nothing_to_say(tmp_path: Path) -> None:
    assert production_left_down_in(tmp_path / "nowhere") == []
    home = tmp_path / "home"
    home.mkdir()
    with closing(sqlite3.connect(home / "ledger.sqlite3")) as conn:
        conn.execute("CREATE TABLE boots (id TEXT)")
        conn.execute("PRAGMA user_version = 1")
    assert production_left_down_in(home) == []


def test_a_status_hook_must_only_ask(tmp_path: Path) -> None:
    plan = Plan.model_validate(
        {"schema_version": 1, "name": "p", "pins": ["a"], "ladders": [],
         "production": {"down": "production-down", "up": "production-up",
                        "status": "production-up"}}
    )  # fmt: skip
    assert plan.production is not None
    with pytest.raises(Exception, match="does not declare `# lifecycle: asks`"):
        production_hooks(REPO, plan.production)
    asks = plan.production.model_copy(update={"status": "production-status"})
    assert production_hooks(REPO, asks).status is not None


def test_while_a_night_runs_its_production_is_down_on_purpose(
    journal: NightJournal, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    journal.event("production.down:intent", "production-down")
    journal.event("production.down:done", "production-down")
    home = Home(tmp_path / "home")  # where the journal fixture opened its ledger
    monkeypatch.setenv("LIFECYCLE_HOME", str(home.root))
    with night_lock(home):  # what a running night holds
        out = CliRunner().invoke(cli, ["--manifests", str(REPO / "manifests"), "boots"])
        assert f"production is down while night {journal.night.id} runs" in out.stderr
        assert "--recover" not in out.stderr
        with pytest.raises(NightBusy), night_lock(home):  # nothing recovers it from under it
            pass
