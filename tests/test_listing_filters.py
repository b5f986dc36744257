"""The listings' filters asked in SQL (lifecycle/ledger/listings.py): for every combination of
a manifest, an arch, a state and a time window, a filtered listing is, byte for byte, its
whole listing (every row read) with the rows the filters keep, each judged in Python: at each
edge of a window, for a time written in another zone, an arch among several, a boot with no
cache, a cache whose dir is gone. And a filtered listing reads about what it shows."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.ledger_scale import make_home
from lifecycle.commands import listing
from lifecycle.commands.context import Context
from lifecycle.commands.filters import Filters
from lifecycle.home import Home
from lifecycle.ledger import Ledger, core
from lifecycle.ledger.boots import (
    BakedUse,
    BootRecord,
    CacheRecord,
    CacheUse,
    UntrackedWrite,
    finish_boot,
    start_boot,
)
from lifecycle.ledger.removal import TeardownStep, record_step
from lifecycle.ledger.results import ResultRecord, insert_result
from lifecycle.report import Listing

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)
# The odd rows' times, as other writers may have put them: another zone, `Z`, microseconds.
AT_ZONE = "2026-06-01T13:30:00+02:00"  # 11:30 UTC
AT_Z = "2026-06-01T10:00:00Z"
AT_MICRO = "2026-06-01T09:15:30.250000+00:00"
AT_BASIC = "20260601T081500Z"  # ISO 8601's basic form: Python reads it, SQLite's julianday not
AT_NIGHT = "2026-05-30T06:00:00+00:00"  # make_home's 25th boot of its night (below)


def _cache(cache_id: str, arch: str, at: str, host_path: Path) -> CacheRecord:
    return CacheRecord(
        cache_id, f"key-{arch}", "triton", "0.31", "d" * 64, "sha256:" + "e" * 64, arch,
        str(host_path), "/root/.cache/triton", at,
    )  # fmt: skip


def _boot(boot_id: str, at: str, outcome: str = "running") -> BootRecord:
    return BootRecord(
        boot_id, at, None, None, outcome, None, "gpu-host-a", "default", "0.31", "d" * 64,
        "sha256:" + "e" * 64, "lifecycle/0.31:latest", None, '[{"name": "acceptance",'
        ' "observing": false}]', False, "[]", None, None,
    )  # fmt: skip


def _result(result_id: str, boot_id: str, status: str, at: str) -> ResultRecord:
    return ResultRecord(
        result_id, boot_id, "smoke", status, '{"tokens_per_s": 1000.0}', None, "manual",
        False, None, None, None, at, "f" * 64,
    )  # fmt: skip


def _odd_rows(ledger: Ledger, here: Path) -> None:
    """What make_home's regular nights never hold; `here` is a cache's dir that is there."""
    # A boot of no tracked cache (its caches baked into its image): its arch is ''.
    baked = _boot("b-baked", AT_Z)
    start_boot(ledger, baked, [], [])
    ended = replace(baked, ended_at=AT_Z, exit_code=0, outcome="ok")
    finish_boot(ledger, ended, [], [], [], baked=[BakedUse("b-baked", "triton", "c-far", "a")])
    insert_result(ledger, _result("r-baked", "b-baked", "pass", AT_MICRO))
    # A boot of two arches (one cache names two, comma-separated), started in another zone,
    # failed, with JIT output outside its caches; one of its caches' dir is here (live).
    gone_80 = here / "80"
    multi = [_cache("c-multi", "90a, 80", AT_ZONE, here), _cache("c-80", "80", AT_ZONE, gone_80)]
    boot = _boot("b-zone", AT_ZONE)
    start_boot(ledger, boot, multi, [CacheUse("b-zone", c.id, "cold") for c in multi])
    ended = replace(boot, ended_at=AT_ZONE, exit_code=1, outcome="failed", error="engine died")
    writes = [UntrackedWrite("b-zone", "/root/.nv/x.bin", "added", 10)]
    finish_boot(ledger, ended, [], [], [], untracked=writes)
    insert_result(ledger, _result("r-zone", "b-zone", "inconclusive", AT_ZONE))
    # A boot still running (its process gone: no lease held) on a cache whose dir is here.
    live = _cache("c-held", "90a", AT_MICRO, here)
    start_boot(
        ledger, _boot("b-running", AT_MICRO), [live], [CacheUse("b-running", live.id, "cold")]
    )
    # A cache a teardown found gone (recorded missing).
    gone = _cache("c-gone", "90a", AT_Z, here / "gone")
    start_boot(ledger, _boot("b-gone", AT_Z, "ok"), [gone], [CacheUse("b-gone", gone.id, "warm")])
    step = TeardownStep("t-1", "c-gone", "done", None, 0, AT_Z)
    record_step(ledger, step, cache_state="missing")
    insert_result(ledger, _result("r-basic", "b-gone", "fail", AT_BASIC))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A night of 60 boots, 5 min apart from 04:00 two days before NOW (make_home), and the
    odd rows of this morning."""
    root = tmp_path_factory.mktemp("filters")
    home, here = root / "lifecycle", root / "cache"
    here.mkdir()
    make_home(home, 60, NOW - timedelta(days=1))
    ledger = Ledger.open(home)
    try:
        _odd_rows(ledger, here)
    finally:
        ledger.close()
    return home


def _context(home: Path) -> Context:
    return Context({}, REPO / "manifests", Home(home), now=lambda: NOW)


def _windows() -> Iterator[tuple[timedelta | None, timedelta | None]]:
    """(older than, newer than): none, each side at each odd time's edge (the row kept) and a
    microsecond past it (dropped), and both sides at once."""
    yield None, None
    for at in (AT_ZONE, AT_Z, AT_MICRO, AT_BASIC, AT_NIGHT):
        edge = NOW - datetime.fromisoformat(at)
        tick = timedelta(microseconds=1)
        yield from ((edge, None), (edge + tick, None), (None, edge), (None, edge - tick))
    yield timedelta(hours=1), timedelta(hours=3)
    yield timedelta(hours=30), timedelta(days=2)


LISTINGS: dict[str, tuple[Callable[[Context, Filters], Listing], tuple[str, ...]]] = {
    "caches": (listing.list_caches, listing.CACHE_STATES),
    "boots": (listing.list_boots, ("running", "ok", "failed", "interrupted", "timeout")),
    "results": (listing.list_results, ("pass", "fail", "inconclusive")),
}


def _facts(verb: str, row: Any, arches: dict[str, str]) -> dict[str, str]:
    """What the filters look at in a row of the whole listing, found in Python from the rows
    (a boot's arches are its caches', as the caches listing shows them)."""
    if verb == "caches":
        cache = row.cache
        return {"manifest": cache.manifest_name, "arch": cache.arch, "state": row.state,
                "at": cache.created_at}  # fmt: skip
    if verb == "boots":
        boot = row.boot.boot
        used = sorted({arches[u.cache_id] for u in row.boot.caches})
        return {"manifest": boot.manifest_name, "arch": ", ".join(used), "state": boot.outcome,
                "at": boot.started_at}  # fmt: skip
    used = sorted({arches[cache_id] for cache_id in row.caches})
    return {"manifest": row.manifest_name, "arch": ", ".join(used), "state": row.status,
            "at": row.created_at}  # fmt: skip


def _printed(shown: Listing) -> tuple[str, str]:
    return shown.text(), "".join(shown.json_text())


@pytest.mark.parametrize("verb", LISTINGS)
def test_a_filtered_listing_is_its_whole_listing_filtered_in_python(home: Path, verb: str) -> None:
    """Each combination's table and JSON against the whole listing's rows the filters keep,
    judged one by one (`Filters.keeps`), as every listing did before its filters were asked
    in SQL."""
    ctx = _context(home)
    run, states = LISTINGS[verb]
    whole = run(ctx, Filters())
    arches = {row.cache.id: row.cache.arch for row in listing.list_caches(ctx, Filters()).rows}
    facts = [_facts(verb, row, arches) for row in whole.rows]
    assert len(whole.rows) > 60
    kinds = set()  # of the rows kept: the filters tell rows apart, not all or nothing
    combinations = itertools.product(
        (None, "0.31", "nope"), (None, "90a", "80", ""), (None, *states), _windows()
    )
    for manifest, arch, state, (older, newer) in combinations:
        filters = Filters(manifest, arch, state, older, newer)
        kept = tuple(
            row for row, f in zip(whole.rows, facts, strict=True) if filters.keeps(NOW, **f)
        )
        shown = run(ctx, filters)
        assert _printed(shown) == _printed(replace(whole, rows=kept)), filters
        kinds.add(frozenset(map(id, kept)))
    assert len(kinds) > 25, len(kinds)


def test_the_window_edges_keep_what_they_touch(home: Path) -> None:
    """The edges the comparison above turns on: a row exactly as old as --older-than, or as
    --newer-than, is listed; a microsecond further, not (each time in its own zone)."""
    ctx = _context(home)
    edge = NOW - datetime.fromisoformat(AT_ZONE)
    tick = timedelta(microseconds=1)

    def boots(older: timedelta | None, newer: timedelta | None) -> set[str]:
        rows = listing.list_boots(ctx, Filters(older_than=older, newer_than=newer)).rows
        return {row.boot.boot.id for row in rows}

    assert "b-zone" in boots(edge, None) and "b-zone" not in boots(edge + tick, None)
    assert "b-zone" in boots(None, edge) and "b-zone" not in boots(None, edge - tick)
    missing = listing.list_caches(ctx, Filters(state="missing")).rows
    assert {"c-gone", "c-80"} <= {row.cache.id for row in missing}
    assert "c-multi" not in {row.cache.id for row in missing}  # its dir is here: live


class _Counting:
    """Rows the ledger hands back, counted across every query: as rows, or made records."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        query, from_row = Ledger.query, core.from_row

        def counted(ledger: Ledger, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
            found = query(ledger, sql, params)
            self.rows += len(found)
            return found

        def made(cls: Any, row: Any) -> Any:
            self.rows += 1
            return from_row(cls, row)

        monkeypatch.setattr(Ledger, "query", counted)
        monkeypatch.setattr(core, "from_row", made)


@pytest.mark.parametrize("verb", LISTINGS)
def test_a_filtered_listing_reads_about_what_it_shows(
    home: Path, verb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The morning's rows of one manifest are a few of the home's: the listing read every row
    of its table and of the tables beside it (every cache use, archive, arch), then dropped
    all but those. Now it reads about those rows' own."""
    ctx = _context(home)
    run, _ = LISTINGS[verb]
    counting = _Counting(monkeypatch)
    whole = len(run(ctx, Filters()).rows)
    read_whole, counting.rows = counting.rows, 0
    shown = len(run(ctx, Filters(manifest="0.31", newer_than=timedelta(hours=6))).rows)
    assert 0 < shown < whole / 5
    assert counting.rows < read_whole / 10, (counting.rows, read_whole, shown, whole)
