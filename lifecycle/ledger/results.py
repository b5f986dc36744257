"""Results in the ledger: what a boot was found to do, and where each result was archived.

A result is written once and never changed: its digest (sha256 of its canonical JSON) is
taken when it is added, so `lifecycle verify` can tell a result edited afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from lifecycle.ledger.core import Ledger, insert


@dataclass(frozen=True)
class ResultRecord:
    """One result recorded against one boot."""

    id: str
    boot_id: str
    name: str
    status: str  # pass | fail | inconclusive
    metrics: str  # JSON object: name -> number, string, bool or null
    note: str | None
    source: str  # manual | acceptance
    instrumented: bool  # the boot ran with an observing hook: not the engine's result alone
    document_sha256: str | None  # the attached JSON (--file, or the acceptance's stdout)
    document_size: int | None
    document_path: str | None  # kept under $LIFECYCLE_HOME/evidence/results/
    created_at: str
    digest: str  # sha256 of the canonical JSON (lifecycle.results.model.canonical_result)


@dataclass(frozen=True)
class ResultArchiveRecord:
    """A result's record in S3 (`results/<id>.json`), written last as its commit marker."""

    result_id: str
    location: str  # s3://bucket/prefix
    record_key: str  # PREFIX/results/<result id>.json
    record_sha256: str
    archived_at: str


def insert_result(ledger: Ledger, result: ResultRecord) -> None:
    """Record a result (one transaction); a second result of that name on that boot is refused
    by the schema's UNIQUE (boot_id, name)."""
    with ledger.transaction() as conn:
        insert(conn, "results", result)


def result_by_id(ledger: Ledger, result_id: str) -> ResultRecord | None:
    """One result, or None."""
    return ledger.record(ResultRecord, "SELECT * FROM results WHERE id = ?", (result_id,))


def result_named(ledger: Ledger, boot_id: str, name: str) -> ResultRecord | None:
    """The boot's result of that name, or None."""
    sql = "SELECT * FROM results WHERE boot_id = ? AND name = ?"
    return ledger.record(ResultRecord, sql, (boot_id, name))


def all_results(ledger: Ledger) -> list[ResultRecord]:
    """Every result, newest first."""
    return ledger.records(
        ResultRecord, "SELECT * FROM results ORDER BY created_at DESC, rowid DESC"
    )


def results_of_cache(ledger: Ledger, cache_id: str) -> list[ResultRecord]:
    """Every result of a boot that used the cache, oldest first."""
    return ledger.records(
        ResultRecord,
        "SELECT results.* FROM results JOIN boot_caches ON boot_caches.boot_id = results.boot_id"
        " WHERE boot_caches.cache_id = ? ORDER BY results.created_at, results.rowid",
        (cache_id,),
    )


def record_result_archive(ledger: Ledger, archive: ResultArchiveRecord) -> None:
    """Record that the result's record is in S3 at that location (read back and verified)."""
    with ledger.transaction() as conn:
        insert(conn, "result_archives", archive, on_conflict="REPLACE")


def result_archives(ledger: Ledger, result_id: str | None = None) -> list[ResultArchiveRecord]:
    """Where the result was archived, oldest first."""
    if result_id is None:
        sql = "SELECT * FROM result_archives ORDER BY archived_at, rowid"
        return ledger.records(ResultArchiveRecord, sql)
    return ledger.records(
        ResultArchiveRecord,
        "SELECT * FROM result_archives WHERE result_id = ? ORDER BY archived_at, rowid",
        (result_id,),
    )


def _not_archived_at(result: str) -> str:
    """SQL: the result (`result`: its table or alias) has no record at the location (the one
    `?`) yet. Asked of each result by the archives' primary key; `id NOT IN (SELECT …)` read
    every result's archive for each statement instead (a year of results: 9 ms each, and
    teardown asks once per cache on the host)."""
    return (
        "NOT EXISTS (SELECT 1 FROM result_archives a"
        f" WHERE a.result_id = {result}.id AND a.location = ?)"
    )


def results_not_archived_on(ledger: Ledger, cache_id: str, location: str) -> list[str]:
    """Ids of the results standing on the cache (their boot used it) with no record at
    `location` yet, oldest first."""
    rows = ledger.query(
        "SELECT r.id FROM results r JOIN boot_caches u ON u.boot_id = r.boot_id"
        f" WHERE u.cache_id = ? AND {_not_archived_at('r')}"
        " ORDER BY r.created_at, r.rowid",
        (cache_id, location),
    )
    return [row["id"] for row in rows]


def result_archives_on(ledger: Ledger, cache_id: str, location: str) -> list[ResultArchiveRecord]:
    """Where the ledger says this host wrote, at `location`, the record of each result standing
    on the cache (its boot used it), oldest result first."""
    return ledger.records(
        ResultArchiveRecord,
        "SELECT a.* FROM result_archives a JOIN results r ON r.id = a.result_id"
        " JOIN boot_caches u ON u.boot_id = r.boot_id"
        " WHERE u.cache_id = ? AND a.location = ? ORDER BY r.created_at, r.rowid",
        (cache_id, location),
    )


def unarchived_results(ledger: Ledger, location: str) -> list[ResultRecord]:
    """Results with no record at `location` yet, oldest first."""
    return ledger.records(
        ResultRecord,
        f"SELECT * FROM results WHERE {_not_archived_at('results')} ORDER BY created_at, rowid",
        (location,),
    )
