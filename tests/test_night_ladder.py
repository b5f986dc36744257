"""The night's arithmetic: cell order, a ladder's choice, what counts toward a pin, downtime."""

from __future__ import annotations

from pathlib import Path

from lifecycle.ledger.nights import NightEvent
from lifecycle.night.cells import cells
from lifecycle.night.engine import RunSummary
from lifecycle.night.ladder import climb
from lifecycle.night.plan import Plan, load_plan
from lifecycle.night.view import cell_view, disagreements, pin_views, production_view

REPO = Path(__file__).resolve().parent.parent
CHECK = {"name": "c", "path": {"log": ["a"]}, "pass_when": {"log": ["b"]}}
SHAPE = {"what": "64 prompts in one request", "args": ["--forced-prompts", "64"]}


def plan(**overrides: object) -> Plan:
    data: dict[str, object] = {
        "schema_version": 1,
        "name": "p",
        "pins": ["a", "b"],
        "profiles": {
            "batch": {
                "checks": [CHECK],
                "repeats": 5,
                "instrumented": {"hooks": ["x"], "repeats": 3},
            }
        },
        "ladders": [
            {
                "argument": "gpu_memory_utilization",
                "rungs": [0.9, 0.91, 0.92],
                "shape": {**SHAPE, "path": {"log": ["prompts=64"]}},
                "margin": "m",
                "floor_mib": 40,
            }
        ],
    }
    data.update(overrides)
    return Plan.model_validate(data)


def run(cell: str, n: int, verdict: str, margin: float | None = None) -> RunSummary:
    return RunSummary(
        cell=cell, run=n, attempt=1, boot_id=f"b-{cell}-{n}", host="h", outcome="ok",
        exit_code=0, instrumented=cell.endswith(":instrumented"), hooks=[], args=[],
        verdict=verdict, checks=[], margin_mib=margin,
    )  # fmt: skip


def test_each_pin_runs_cold_before_warm_and_its_rungs_last_in_both_states() -> None:
    ordered = [c.id for c in cells(plan(cache_states=["warm", "cold"]))]
    first_pin = ordered[: len(ordered) // 2]
    assert first_pin[:4] == [
        "a:batch:cold",
        "a:batch:cold:instrumented",
        "a:batch:warm",
        "a:batch:warm:instrumented",
    ]
    assert first_pin[4:] == [
        f"a:gpu_memory_utilization={v}:{s}" for s in ("cold", "warm") for v in (0.9, 0.91, 0.92)
    ]
    # A matrix of warm cells only still climbs every rung cold and warm.
    warm_only = [c.id for c in cells(plan(cache_states=["warm"])) if c.rung is not None]
    assert {i.rsplit(":", 1)[1] for i in warm_only} == {"cold", "warm"}


def test_the_demo_plan_loads_and_makes_56_runs() -> None:
    loaded = load_plan(REPO / "nights/demo.yaml")
    assert sum(c.repeats for c in cells(loaded.plan)) == 56


def test_the_value_is_the_highest_rung_clearing_the_floor_in_both_cache_states() -> None:
    p = plan()
    ladder, ordered = p.ladders[0], cells(p)
    margins = {  # (value, state) -> margin: 0.92 passes warm, fails cold
        (0.9, "cold"): 1600.0, (0.9, "warm"): 1630.0,
        (0.91, "cold"): 790.0, (0.91, "warm"): 810.0,
        (0.92, "cold"): 30.0, (0.92, "warm"): 70.0,
    }  # fmt: skip
    runs = {
        (c.id, 1): run(c.id, 1, "pass" if margins[(c.rung.value, c.state)] >= 40 else "fail",
                       margins[(c.rung.value, c.state)])
        for c in ordered if c.rung and c.pin == "a"
    }  # fmt: skip
    climbed = climb(ladder, "a", ordered, runs, {0.92: 60.0})
    assert climbed.complete and climbed.chosen == 0.91
    assert climbed.why == "0.91 clears 40 MiB (790.0 MiB cold, 810.0 MiB warm); 0.92 does not"
    assert climbed.rung(0.92) is not None and climbed.rung(0.92).predicted_mib == 60.0
    # A margin that was not measured (the shape never forced) never clears.
    runs[("a:gpu_memory_utilization=0.91:cold", 1)] = run("x", 1, "inconclusive", None)
    assert climb(ladder, "a", ordered, runs, {}).chosen == 0.9
    # Nothing run on the other pin: nothing chosen, and it says so.
    other = climb(ladder, "b", ordered, runs, {})
    assert not other.complete and other.chosen is None


def test_only_plain_matrix_cells_count_and_an_observer_that_changed_the_outcome_is_named() -> None:
    p = plan(ladders=[])
    by_id = {c.id: c for c in cells(p)}
    runs = {}
    for cell_id, passes, n in [
        ("a:batch:cold", 0, 5), ("a:batch:cold:instrumented", 2, 3),
        ("a:batch:warm", 5, 5), ("a:batch:warm:instrumented", 3, 3),
    ]:  # fmt: skip
        for i in range(1, n + 1):
            runs[(cell_id, i)] = run(cell_id, i, "pass" if i <= passes else "fail")
    for run_ in runs.values():
        if run_.instrumented:
            runs[(run_.cell, run_.run)] = run_.model_copy(update={"hooks": ["memory-history"]})
    views = [cell_view(by_id[i], runs) for i in by_id if i.startswith("a:")]
    [pin_a, pin_b] = pin_views(
        p, [*views, *(cell_view(c, {}) for c in by_id.values() if c.pin == "b")]
    )
    assert pin_a.verdict == "fail" and pin_a.cells == 2  # the instrumented cells are not counted
    assert pin_b.verdict == "pending"
    [changed] = disagreements(views)
    assert changed.text.startswith("the hook changed the outcome: 2/3 with, 0/5 without")
    assert changed.hooks == ["memory-history"]


def test_downtime_is_read_from_the_production_events_across_a_recovery() -> None:
    def event(name: str, at: str) -> NightEvent:
        return NightEvent("n", name, None, f"2026-10-10T{at}+00:00")

    events = [
        event("production.down:intent", "01:00:00.000"),
        event("production.down:done", "01:00:05.000"),
        # SIGKILL here; the next night recovers:
        event("production.up:intent", "03:38:00.000"),
        event("production.up:done", "03:38:00.500"),
        event("production.down:intent", "03:38:01.000"),
        event("production.down:done", "03:38:02.000"),
    ]
    down = production_view(events)
    assert down is not None and not down.up
    assert [i.seconds for i in down.intervals] == [9480.5, None]
    assert down.downtime_s == 9480.5  # 2 h 38 min, and the interval still open is not counted
    events.append(event("production.up:done", "03:40:01.000"))
    up = production_view(events)
    assert up is not None and up.up and up.downtime_s == 9480.5 + 120.0


def test_an_integer_argument_is_laddered_in_integers(tmp_path: Path) -> None:
    # Rungs read as floats were refused by the integer check they then failed ("got 2.0").
    from lifecycle.night.plan import ladder_plan

    file = tmp_path / "ladder.yaml"
    file.write_text(
        "schema_version: 1\nargument: max_num_seqs\nrungs: [2, 4]\n"
        "shape: {what: x, args: [--forced-prompts, '64'], path: {log: [x]}}\n"
        "margin: m\nfloor_mib: 40\n"
    )
    [ladder] = ladder_plan(file, "demo/0.2").plan.ladders
    assert ladder.rungs == [2, 4] and all(type(rung) is int for rung in ladder.rungs)
    fractions = plan().ladders[0].rungs
    assert fractions == [0.9, 0.91, 0.92] and all(type(r) is float for r in fractions)
