"""What the listings of this host's ledger (`caches`, `boots`, `results`) read: the rows their
filters may keep, chosen in SQL, and for those rows only what each shows of the other tables.

The SQL narrows, it does not decide: it keeps every row the listing's own test of a row
(lifecycle.commands.filters.Filters.keeps) keeps, and perhaps a few more, which that test then
drops: a time within a second of the window's edge (SQLite reads a time to the millisecond),
an arch that only contains the one asked (a row may name several, comma-separated), a cache
recorded live whose dir is gone (listed as missing). So a filtered listing reads about what it
shows, not every row a year of nights left, and shows what it did when it read them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from lifecycle.ledger.boots import BakedUse, BootRecord, CacheRecord, CacheUse, UntrackedWrite
from lifecycle.ledger.core import AMONG, Ledger, among
from lifecycle.ledger.results import ResultArchiveRecord, ResultRecord


@dataclass(frozen=True)
class Narrowing:
    """What a listing's filters ask of its rows, as the ledger can ask it; None: anything."""

    manifest: str | None = None
    arch: str | None = None  # the row's arch, or one of its boot's caches', contains it
    states: tuple[str, ...] | None = None  # the recorded states a row shown in the one asked has
    since: datetime | None = None  # made (or started) at or after; aware
    until: datetime | None = None  # at or before


@dataclass(frozen=True)
class _Table:
    """Where a listed table's row keeps what the filters look at: SQL over its alias."""

    name: str  # `caches c`: the table and its alias
    manifest: str
    boot: str | None  # the boot whose caches' arches are the row's; None: its own `arch`
    state: str
    at: str
    order: str  # newest first, as every listing is


_CACHES = _Table(
    "caches c", "c.manifest_name", None, "c.state", "c.created_at",
    "c.created_at DESC, c.rowid DESC",
)  # fmt: skip
_BOOTS = _Table(
    "boots b", "b.manifest_name", "b.id", "b.outcome", "b.started_at",
    "b.started_at DESC, b.rowid DESC",
)  # fmt: skip
_RESULTS = _Table(
    "results r", "(SELECT b.manifest_name FROM boots b WHERE b.id = r.boot_id)", "r.boot_id",
    "r.status", "r.created_at", "r.created_at DESC, r.rowid DESC",
)  # fmt: skip

# What the window's edge is moved out by, in days: SQLite's julianday reads a time to the
# millisecond (rounded) and this side's is a float; the listing's own test is exact.
_SLACK = 1 / 86400
_UNIX_EPOCH_JULIAN = 2440587.5


def _julian(at: datetime) -> float:
    """An aware time as SQLite's julianday() of its ISO 8601 text says it."""
    return at.timestamp() / 86400 + _UNIX_EPOCH_JULIAN


def _where(asked: Narrowing, table: _Table) -> tuple[str, tuple[object, ...]]:
    """The SQL condition (and its values) a row must meet to be kept: never narrower than
    the listing's own test (see the module's docstring)."""
    clauses: list[str] = []
    params: list[object] = []
    if asked.manifest is not None:
        clauses.append(f"{table.manifest} = ?")
        params.append(asked.manifest)
    if asked.arch:  # '' is the arch of a boot with no cache: the listing's test decides that
        contains = "instr(c.arch, ?) > 0"
        clauses.append(
            contains
            if table.boot is None
            else "EXISTS (SELECT 1 FROM boot_caches u JOIN caches c ON c.id = u.cache_id"
            f" WHERE u.boot_id = {table.boot} AND {contains})"
        )
        params.append(asked.arch)
    if asked.states is not None:
        clauses.append(f"{table.state} IN ({', '.join('?' * len(asked.states))})")
        params.extend(asked.states)
    # A time SQLite cannot read (julianday: NULL) is kept for the listing's test to judge.
    if asked.since is not None:
        clauses.append(f"COALESCE(julianday({table.at}) >= ?, 1)")
        params.append(_julian(asked.since) - _SLACK)
    if asked.until is not None:
        clauses.append(f"COALESCE(julianday({table.at}) <= ?, 1)")
        params.append(_julian(asked.until) + _SLACK)
    return " AND ".join(clauses) or "1", tuple(params)


def _listed(table: _Table, asked: Narrowing) -> tuple[str, tuple[object, ...]]:
    where, params = _where(asked, table)
    alias = table.name.split()[1]
    return f"SELECT {alias}.* FROM {table.name} WHERE {where} ORDER BY {table.order}", params


def listed_caches(ledger: Ledger, asked: Narrowing) -> list[CacheRecord]:
    """The caches `asked` may keep, newest first."""
    return ledger.records(CacheRecord, *_listed(_CACHES, asked))


def listed_boots(ledger: Ledger, asked: Narrowing) -> list[BootRecord]:
    """The boots `asked` may keep (its manifest, arch, outcome, start), newest first."""
    return ledger.records(BootRecord, *_listed(_BOOTS, asked))


def listed_results(ledger: Ledger, asked: Narrowing) -> list[ResultRecord]:
    """The results `asked` may keep (their boot's manifest and arch, status, time), newest
    first."""
    return ledger.records(ResultRecord, *_listed(_RESULTS, asked))


# The rows of the other tables for the listed ones: their ids, or None for every row (a listing
# no filter narrowed: finding each of a year's 80,000 uses by its index costs a quarter more
# than one scan of them).
Among = Iterable[str] | None


def _whose(column: str, ids: Among) -> tuple[str, tuple[str, ...]]:
    return ("", ()) if ids is None else (f" WHERE {column} {AMONG}", among(ids))


def cache_boots(ledger: Ledger, cache_ids: Among) -> list[tuple[str, str, str]]:
    """(cache id, boot id, cold or warm) of each use of these caches, oldest first: the use's
    other columns are not listed with a cache."""
    where, params = _whose("cache_id", cache_ids)
    sql = f"SELECT cache_id, boot_id, mode FROM boot_caches{where} ORDER BY rowid"
    return [(row["cache_id"], row["boot_id"], row["mode"]) for row in ledger.query(sql, params)]


def boots_uses(ledger: Ledger, boot_ids: Among) -> list[CacheUse]:
    """These boots' uses of caches, oldest first."""
    where, params = _whose("boot_id", boot_ids)
    return ledger.records(CacheUse, f"SELECT * FROM boot_caches{where} ORDER BY rowid", params)


def boots_untracked(ledger: Ledger, boot_ids: Among) -> list[UntrackedWrite]:
    """What these boots wrote outside the tracked caches, oldest first."""
    where, params = _whose("boot_id", boot_ids)
    sql = f"SELECT * FROM untracked_writes{where} ORDER BY rowid"
    return ledger.records(UntrackedWrite, sql, params)


def boots_baked(ledger: Ledger, boot_ids: Among) -> list[BakedUse]:
    """The caches baked into these boots' images, in each image's order."""
    where, params = _whose("boot_id", boot_ids)
    return ledger.records(BakedUse, f"SELECT * FROM baked_uses{where} ORDER BY rowid", params)


def boots_arches(ledger: Ledger, boot_ids: Among) -> dict[str, list[str]]:
    """boot id -> the GPU arches of the caches it used, sorted (none: no cache)."""
    where, params = _whose("u.boot_id", boot_ids)
    found: dict[str, list[str]] = {}
    rows = ledger.query(
        "SELECT DISTINCT u.boot_id, c.arch FROM boot_caches u JOIN caches c ON c.id = u.cache_id"
        f"{where} ORDER BY u.boot_id, c.arch",
        params,
    )
    for row in rows:
        found.setdefault(row["boot_id"], []).append(row["arch"])
    return found


def boots_caches(ledger: Ledger, boot_ids: Among) -> dict[str, list[str]]:
    """boot id -> the caches it used, oldest use first: without the rest of each use's row."""
    where, params = _whose("boot_id", boot_ids)
    found: dict[str, list[str]] = {}
    for row in ledger.query(
        f"SELECT boot_id, cache_id FROM boot_caches{where} ORDER BY rowid", params
    ):
        found.setdefault(row["boot_id"], []).append(row["cache_id"])
    return found


@dataclass(frozen=True)
class BootHead:
    """What a result's row shows of its boot."""

    id: str
    manifest_name: str
    profile: str
    hooks: str  # JSON list of {"name", "observing"}


def boot_heads(ledger: Ledger, boot_ids: Among) -> dict[str, BootHead]:
    """boot id -> its manifest, profile and hooks."""
    where, params = _whose("id", boot_ids)
    sql = f"SELECT id, manifest_name, profile, hooks FROM boots{where}"
    return {head.id: head for head in ledger.records(BootHead, sql, params)}


def results_archives(ledger: Ledger, result_ids: Among) -> dict[str, list[ResultArchiveRecord]]:
    """result id -> where its record was archived, oldest first."""
    where, params = _whose("result_id", result_ids)
    found: dict[str, list[ResultArchiveRecord]] = {}
    sql = f"SELECT * FROM result_archives{where} ORDER BY archived_at, rowid"
    for archive in ledger.records(ResultArchiveRecord, sql, params):
        found.setdefault(archive.result_id, []).append(archive)
    return found
