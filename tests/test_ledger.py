"""The ledger: versioned migrations, one transaction per change, evidence written atomically."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from lifecycle.ledger import (
    MIGRATIONS,
    BuildRecord,
    HomeUnusable,
    Ledger,
    NoLedger,
    default_home,
    has_ledger,
)
from lifecycle.ledger.archives import (
    archive_of,
    honest_packs,
    keep_pack_indexes,
    pack_indexes,
    prune_pack_indexes,
    versions_of,
)
from lifecycle.ledger.builds import all_builds, record_build

BUILT = BuildRecord(
    started_at="2026-10-10T06:00:00+00:00",
    duration_s=1.5,
    manifest_name="demo",
    manifest_file="manifests/demo/0.2/manifest.yaml",
    manifest_digest="ab" * 32,
    tag="lifecycle/demo:0.2.0-abababababab",
    image_id="sha256:" + "cd" * 32,
    outcome="built",
    error=None,
    log_path=None,
)


def test_open_migrates_to_the_latest_schema(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    ledger.close()
    conn = sqlite3.connect(tmp_path / "ledger.sqlite3")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    Ledger.open(tmp_path).close()  # re-opening is a no-op


def test_a_newer_schema_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    Ledger.open(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "ledger.sqlite3")
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.close()
    (tmp_path / "ledger.lock").unlink()
    before = (tmp_path / "ledger.sqlite3").read_bytes()
    with pytest.raises(HomeUnusable, match=f"knows schemas up to {len(MIGRATIONS)}") as refused:
        Ledger.open(tmp_path)
    assert refused.value.exit_code == 3
    assert (tmp_path / "ledger.sqlite3").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.sqlite3"]


def test_without_create_an_empty_home_stays_empty(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(NoLedger):
        Ledger.open(home, create=False)
    assert not home.exists()
    home.mkdir()
    (home / "ledger.sqlite3").touch()  # what a process killed right after connect leaves
    assert not has_ledger(home)
    with pytest.raises(NoLedger):
        Ledger.open(home, create=False)
    assert [p.name for p in home.iterdir()] == ["ledger.sqlite3"]
    Ledger.open(home).close()  # a verb that records starts it as a new ledger
    assert has_ledger(home)


def test_a_short_file_is_truncated_only_without_a_write_ahead_log(tmp_path: Path) -> None:
    # Another process's checkpoint writes the header, then the pages: a ledger read in between
    # looks short, and SQLite reads its pages from the log. Without a log, short is truncated.
    home = tmp_path / "home"
    Ledger.open(home).close()
    ledger = home / "ledger.sqlite3"
    ledger.write_bytes(ledger.read_bytes()[: ledger.stat().st_size // 2])
    with pytest.raises(HomeUnusable, match="is truncated"):
        has_ledger(home)
    (home / "ledger.sqlite3-wal").write_bytes(b"frames a checkpoint is copying")
    assert has_ledger(home)


def test_builds_round_trip(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    first = record_build(ledger, BUILT)
    second = record_build(ledger, replace(BUILT, outcome="up-to-date", duration_s=0.01))
    assert [b.id for b in all_builds(ledger)] == [first, second]
    assert all_builds(ledger)[1].outcome == "up-to-date"


def test_a_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    with pytest.raises(sqlite3.IntegrityError):
        record_build(ledger, replace(BUILT, outcome="half-done"))  # refused by the CHECK constraint
    assert all_builds(ledger) == []


def test_evidence_is_renamed_into_place(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path)
    path = ledger.keep_evidence("builds", "one.log", b"step 1/4\n")
    assert path.read_bytes() == b"step 1/4\n"
    assert [p.name for p in path.parent.iterdir()] == ["one.log"]  # no temp file left


def test_default_home() -> None:
    assert default_home({"LIFECYCLE_HOME": "/x"}) == Path("/x")
    assert default_home({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path("/s/lifecycle")
    assert default_home({"HOME": "/h"}) == Path("/h/.local/state/lifecycle")


def _ledger_at_schema(home: Path, version: int) -> sqlite3.Connection:
    """A ledger as lifecycle left it at schema `version`, open for the test to fill."""
    conn = sqlite3.connect(home / "ledger.sqlite3", isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    for number, script in enumerate(MIGRATIONS[:version], start=1):
        for statement in filter(str.strip, script.split(";")):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    return conn


def _insert(conn: sqlite3.Connection, table: str, row: tuple[object, ...]) -> None:
    conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)


def _old_cache(state: str) -> tuple[object, ...]:
    """Cache vllm-1's row as schemas 2 to 8 have it (state aside)."""
    return (
        "vllm-1", "k", "vllm", "demo", "d" * 64, "sha256:i", "unknown", "/c/vllm-1", "/v",
        state, None, "2026-10-10T00:00:00", "t" * 64, 3, 30, None, None,
    )  # fmt: skip


def test_schema_6_keeps_every_row_of_an_older_ledger_and_allows_missing(tmp_path: Path) -> None:
    conn = _ledger_at_schema(tmp_path, 5)
    cache = _old_cache("archived")
    _insert(conn, "caches", cache)
    boot = (
        "b-1", "2026-10-10T00:00:00", None, 0, "ok", None, "h", "serve", "demo", "d" * 64,
        "sha256:i", "t:1", None, "[]", 0, "[]", None, None,
    )  # fmt: skip
    _insert(conn, "boots", boot)
    conn.execute(
        "INSERT INTO boot_caches (boot_id, cache_id, mode) VALUES ('b-1', 'vllm-1', 'cold')"
    )
    conn.close()

    ledger = Ledger.open(tmp_path)
    assert ledger.query("PRAGMA user_version")[0][0] == len(MIGRATIONS)
    assert tuple(ledger.query("SELECT * FROM caches")[0]) == cache
    assert ledger.query("SELECT cache_id FROM boot_caches")[0][0] == "vllm-1"
    # A cache's uses are found by the cache, not by reading every use (13).
    plan = ledger.query("EXPLAIN QUERY PLAN SELECT * FROM boot_caches WHERE cache_id = 'vllm-1'")
    assert "USING INDEX boot_caches_by_cache" in plan[0]["detail"]
    assert ledger.query("PRAGMA foreign_keys")[0][0] == 1
    with ledger.transaction() as writer:
        writer.execute("UPDATE caches SET state = 'missing' WHERE id = 'vllm-1'")
        with pytest.raises(sqlite3.IntegrityError):
            writer.execute(
                "INSERT INTO boot_caches (boot_id, cache_id, mode) VALUES ('b-1', 'x', 'warm')"
            )
    ledger.close()


def test_schema_7_keeps_every_boot_and_allows_timeout_and_untracked_writes(
    tmp_path: Path,
) -> None:
    conn = _ledger_at_schema(tmp_path, 6)
    _insert(conn, "caches", _old_cache("live"))
    boot = (
        "b-1", "2026-10-10T00:00:00", "2026-10-10T00:01:00", 137, "failed", None, "h", "serve",
        "demo", "d" * 64, "sha256:i", "t:1", "c1", "[]", 0, "[]", "/l", "/e",
    )  # fmt: skip
    _insert(conn, "boots", boot)
    conn.execute(
        "INSERT INTO boot_caches (boot_id, cache_id, mode, files_added)"
        " VALUES ('b-1', 'vllm-1', 'cold', 5)"
    )
    conn.execute("INSERT INTO tainted_files VALUES ('vllm-1', 'a.log', 'f', 'HF_TOKEN', 'b-1')")
    conn.close()

    ledger = Ledger.open(tmp_path)
    assert ledger.query("PRAGMA user_version")[0][0] == len(MIGRATIONS) >= 7
    assert tuple(ledger.query("SELECT * FROM boots")[0]) == boot
    use = ledger.query("SELECT * FROM boot_caches")[0]
    assert (use["files_added"], use["dirs_added"], use["verdict"]) == (5, None, None)
    assert ledger.query("SELECT boot_id FROM tainted_files")[0][0] == "b-1"
    with ledger.transaction() as writer:
        writer.execute("UPDATE boots SET outcome = 'timeout' WHERE id = 'b-1'")
        writer.execute(
            "INSERT INTO untracked_writes VALUES ('b-1', '/tmp/torchinductor_root/x.gch',"
            " 'added', 155000000)"
        )
        with pytest.raises(sqlite3.IntegrityError):
            writer.execute("UPDATE boots SET outcome = 'slow' WHERE id = 'b-1'")
        with pytest.raises(sqlite3.IntegrityError):
            writer.execute("INSERT INTO untracked_writes VALUES ('b-2', '/x.so', 'added', 1)")
    assert ledger.query("PRAGMA foreign_key_check") == []
    ledger.close()


def test_schema_8_adds_the_nights_to_a_ledger_of_schema_7(tmp_path: Path) -> None:
    conn = _ledger_at_schema(tmp_path, 7)
    boot = (
        "b-1", "2026-10-10T00:00:00", "2026-10-10T00:01:00", 0, "ok", None, "h", "serve",
        "demo", "d" * 64, "sha256:i", "t:1", "c1", "[]", 0, "[]", "/l", "/e",
    )  # fmt: skip
    _insert(conn, "boots", boot)
    conn.close()

    ledger = Ledger.open(tmp_path)
    assert ledger.query("PRAGMA user_version")[0][0] == len(MIGRATIONS) >= 8
    assert tuple(ledger.query("SELECT * FROM boots")[0]) == boot
    night = ("n-1", "night", "p", "p.yaml", "x" * 64, "{}", "/project", "h", "2026-10-10")
    with ledger.transaction() as writer:
        writer.execute(f"INSERT INTO nights VALUES ({', '.join('?' * len(night))})", night)
        writer.execute(
            "INSERT INTO night_runs (night_id, cell, run, attempt, step, at)"
            " VALUES ('n-1', 'demo/0.2:batch:cold', 1, 1, 'started', '2026-10-10')"
        )
        with pytest.raises(sqlite3.IntegrityError):  # a run of a night nobody started
            writer.execute(
                "INSERT INTO night_events (night_id, event, at) VALUES ('n-2', 'x', 'now')"
            )
    ledger.close()


def test_schema_9_reads_an_older_hosts_archives_as_the_previous_format(tmp_path: Path) -> None:
    # A host that archived before versions existed: its archive rows point at one record per
    # cache (no tree digest), its builds knew no base digest. Both are kept, read as such.
    conn = _ledger_at_schema(tmp_path, 8)
    _insert(conn, "caches", _old_cache("archived"))
    at = "2026-10-10T00:01:00"
    _insert(
        conn, "archives", ("vllm-1", "s3://b/p", "p/caches/vllm-1.json", "s" * 64, 1, 3, 30, at, at)
    )
    _insert(
        conn,
        "builds",
        (1, at, 1.5, "demo", "m.yaml", "d" * 64, "t:1", "sha256:i", "built", None, "/l"),
    )
    conn.close()

    ledger = Ledger.open(tmp_path)
    assert ledger.query("PRAGMA user_version")[0][0] == len(MIGRATIONS) >= 9
    found = archive_of(ledger, "vllm-1")
    assert found is not None and found.record_key == "p/caches/vllm-1.json"
    assert found.tree_digest is None  # the previous format's mark
    assert versions_of(ledger, "vllm-1") == []
    [row] = ledger.query("SELECT image_id, base_digest FROM builds")
    assert tuple(row) == ("sha256:i", None)
    assert ledger.query("PRAGMA foreign_key_check") == []
    ledger.close()


def test_schema_19_keeps_the_honest_packs_and_prunes_indexes_to_each_listing(
    tmp_path: Path,
) -> None:
    conn = _ledger_at_schema(tmp_path, 18)
    _insert(conn, "honest_packs", ("a" * 64, "written", "2026-10-10T00:00:00"))
    conn.close()

    ledger = Ledger.open(tmp_path)
    assert ledger.query("PRAGMA user_version")[0][0] == len(MIGRATIONS) >= 19
    assert honest_packs(ledger, ["a" * 64, "b" * 64]) == {"a" * 64}
    assert pack_indexes(ledger, ["a" * 64]) == {}  # read from the pack once, then kept
    text = f"{'c' * 64} 0 10\n".encode()
    keep_pack_indexes(ledger, "s3://one/p", {"a" * 64: (100, text), "b" * 64: (200, text)})
    keep_pack_indexes(ledger, "s3://two/p", {"a" * 64: (100, text)})
    assert pack_indexes(ledger, ["a" * 64, "b" * 64, "d" * 64]) == {
        "a" * 64: (100, text), "b" * 64: (200, text)
    }  # fmt: skip
    # Gone from one location's listing: an index stays while another location holds its pack.
    prune_pack_indexes(ledger, "s3://one/p", {"e" * 64})
    assert set(pack_indexes(ledger, ["a" * 64, "b" * 64])) == {"a" * 64}
    prune_pack_indexes(ledger, "s3://two/p", set())
    assert pack_indexes(ledger, ["a" * 64]) == {}
    assert ledger.query("SELECT * FROM packs_seen") == []
    assert ledger.query("PRAGMA foreign_key_check") == []
    ledger.close()


def test_schema_21_records_a_builds_image_removed_and_a_read_verb_migrates_once(
    tmp_path: Path,
) -> None:
    from lifecycle.ledger.builds import all_bakes, image_removed

    home = tmp_path / "home"
    home.mkdir()
    conn = _ledger_at_schema(home, 20)
    image, other = "sha256:" + "cd" * 32, "sha256:" + "ef" * 32
    at = "2026-10-10T06:00:00+00:00"
    for build_id, image_id in ((1, image), (2, image), (3, other)):
        row = (build_id, at, 1.5, "demo", "m.yaml", "d" * 64, "t:1", image_id, "built", None)
        _insert(conn, "builds", (*row, "/l", "b" * 64))
    _insert(conn, "bakes", ("sha256:b", "t:b", "demo", "d" * 64, image, "serve", "x", "[]", at, at))
    conn.close()

    # A verb that only reads opens it as `status` does: migrated once, then only read.
    Ledger.open(home, create=False).close()
    (home / "ledger.lock").unlink(missing_ok=True)
    before = {p.name: p.read_bytes() for p in home.iterdir() if p.is_file()}
    ledger = Ledger.open(home, create=False)
    assert ledger.query("PRAGMA user_version")[0][0] == len(MIGRATIONS) >= 21
    assert [b.removed_at for b in all_bakes(ledger)] == [at]  # 20's, kept
    assert [b.removed_at for b in all_builds(ledger)] == [None, None, None]
    ledger.close()
    after = {p.name: p.read_bytes() for p in home.iterdir() if p.is_file()}
    assert after == before  # no lock file made, nothing written

    ledger = Ledger.open(home)
    image_removed(ledger, image, "2026-10-11T00:00:00+00:00")
    record_build(ledger, replace(BUILT, image_id=image))  # built again, the same image: on dockerd
    image_removed(ledger, image, "2026-10-12T00:00:00+00:00")  # ... removed again
    removed = [(b.id, b.removed_at) for b in all_builds(ledger)]
    assert removed == [
        (1, "2026-10-11T00:00:00+00:00"), (2, "2026-10-11T00:00:00+00:00"), (3, None),
        (4, "2026-10-12T00:00:00+00:00"),
    ]  # fmt: skip
    ledger.close()


def test_schema_22_asks_a_year_old_home_by_index_not_by_scan(tmp_path: Path) -> None:
    """The end of every boot frees what it held by `in_use_by`, and teardown reads the
    journal by cache: both scanned every row a home ever had, each boot and each plan."""
    ledger = Ledger.open(tmp_path)
    asked = {
        "UPDATE caches SET in_use_by = NULL WHERE in_use_by = ?": ("b-1",),
        "SELECT * FROM teardown_steps WHERE cache_id = ? ORDER BY id": ("c-1",),
        "SELECT * FROM teardown_steps WHERE cache_id IN (SELECT value FROM json_each(?))"
        " ORDER BY id": ('["c-1"]',),
    }
    for sql, args in asked.items():
        plan = " ".join(row[-1] for row in ledger.query(f"EXPLAIN QUERY PLAN {sql}", args))
        assert "USING INDEX" in plan and "SCAN caches" not in plan, (sql, plan)
        assert "SCAN teardown_steps" not in plan, (sql, plan)
    ledger.close()
