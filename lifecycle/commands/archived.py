"""`lifecycle caches`, `boots` and `results --from s3://…`: what an archive holds, whichever host
archived it. Imported only when `--from` is given: the archive's records are pydantic models
and its store a boto3 client, ~0.2 s a listing of this host's ledger does not need."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lifecycle.archive.catalog import ArchivedBoot, ArchivedCache, archived_boots, archived_caches
from lifecycle.archive.copies import RecordCopies
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import UNREAD_PIN
from lifecycle.archive.store import BlobStore
from lifecycle.commands.boot_report import BootReport
from lifecycle.commands.context import Context
from lifecycle.commands.filters import METRICS_WIDTH, OUTCOMES, Facts, Filters, age, flags
from lifecycle.report import Listing, Row, plain
from lifecycle.results.archive import ArchivedResult, archived_results
from lifecycle.results.model import STATUSES, metrics_text
from lifecycle.table import human_age, human_bytes

CACHE_STATES = ("restorable", "evidence")  # with the cache's files, or not


@dataclass(frozen=True)
class ListedArchivedCache(Row):
    """One cache an archive holds, as `lifecycle caches --from` lists it."""

    cache: ArchivedCache
    age_s: float  # since its newest version was archived

    def to_json(self) -> dict[str, Any]:
        """The cache's row (from its newest version), its state there, every version, the
        boots and results its index lists, its age."""
        return {
            **plain(self.cache.row),
            "state": self.cache.state,
            "versions": plain(self.cache.versions),
            "boots": list(self.cache.boots),
            "results": list(self.cache.results),
            "age_s": self.age_s,
        }


@dataclass(frozen=True)
class ListedArchivedBoot(Row):
    """One boot an archive holds, as `lifecycle boots --from` lists it."""

    boot: ArchivedBoot

    def to_json(self) -> dict[str, Any]:
        """The boot's row (hooks and secret names as lists), its arch, caches and record."""
        row = BootReport(self.boot.boot, self.boot.uses).to_json()
        del row["format"]
        return {**row, "arch": self.boot.arch, "record": self.boot.record}


@dataclass(frozen=True)
class ListedArchivedResult(Row):
    """One result an archive holds, as `lifecycle results --from` lists it."""

    result: ArchivedResult

    def to_json(self) -> dict[str, Any]:
        """The canonical result, then what the archive adds: its digest, what it ran, who
        archived it, its team pins."""
        facts: dict[str, Any] = plain(self.result)
        return {**facts.pop("result"), **facts}


CACHE_COLUMNS = "CACHE MANIFEST NAME ARCH VERSIONS NEWEST SIZE STATE BY AGE"


def _cache_cells(r: ListedArchivedCache) -> list[object]:
    """Each cache's newest version, and how many it has."""
    row, newest = r.cache.row, r.cache.newest
    return [
        row.id, row.manifest_name, row.cache_name, row.arch, len(r.cache.versions),
        newest.tree_digest[:12], human_bytes(newest.bytes), r.cache.state, newest.host,
        human_age(r.age_s),
    ]  # fmt: skip


BOOT_COLUMNS = "BOOT STARTED HOST MANIFEST PROFILE OUTCOME ARCH CACHES"


def _boot_cells(r: ListedArchivedBoot) -> list[object]:
    boot = r.boot.boot
    uses = ", ".join(f"{u.cache_id} {u.mode}" for u in r.boot.uses)
    return [
        boot.id,
        boot.started_at,
        boot.host,
        boot.manifest_name,
        boot.profile,
        boot.outcome,
        r.boot.arch,
        uses,
    ]


RESULT_COLUMNS = "RESULT CREATED NAME STATUS BOOT MANIFEST HOST METRICS FLAGS"


def _result_cells(listed: ListedArchivedResult) -> list[object]:
    found, result = listed.result, listed.result.result
    return [
        result["id"], result["created_at"], result["name"], result["status"], result["boot_id"],
        found.manifest_name, found.host, metrics_text(result["metrics"], METRICS_WIDTH),
        flags(bool(result["instrumented"]), bool(found.pins)),
    ]  # fmt: skip


def open_archive(
    ctx: Context, source: str, filters: Filters, states: Sequence[str], listing: str
) -> tuple[BlobStore, datetime]:
    """A listing of the archive at `source` (no ledger): its --state checked against
    `states` first, then the store, and now."""
    filters.check_state(states, listing)
    location = ArchiveLocation.parse(source, "--from")
    return BlobStore(ctx.s3(), location, RecordCopies(ctx.home, location)), ctx.now()


def list_caches(ctx: Context, source: str, filters: Filters) -> Listing:
    """Every cache the archive at `source` holds, whoever archived it."""
    store, now = open_archive(ctx, source, filters, CACHE_STATES, "caches in an archive")
    found, unread = archived_caches(store)
    rows = tuple(
        ListedArchivedCache(c, age(now, c.newest.archived_at))
        for c in filters.select(now, found, _cache_facts)
    )
    return Listing(
        "lifecycle-archived-caches/1", "caches", rows, CACHE_COLUMNS, _cache_cells,
        store.location.url(), unreadable=unread,
    )  # fmt: skip


def _cache_facts(cache: ArchivedCache) -> Facts:
    """An archived cache is filtered by its newest version's time."""
    row = cache.row
    return Facts(row.manifest_name, row.arch, cache.state, cache.newest.archived_at)


def list_boots(ctx: Context, source: str, filters: Filters) -> Listing:
    """Every boot the archive at `source` holds a record of."""
    store, now = open_archive(ctx, source, filters, OUTCOMES, "boots")
    found, unread = archived_boots(store)
    kept = filters.select(now, found, _boot_facts)
    return Listing(
        "lifecycle-archived-boots/1", "boots", tuple(map(ListedArchivedBoot, kept)),
        BOOT_COLUMNS, _boot_cells, store.location.url(), unreadable=unread,
    )  # fmt: skip


def _boot_facts(found: ArchivedBoot) -> Facts:
    """An archived boot is filtered by when it started."""
    boot = found.boot
    return Facts(boot.manifest_name, found.arch, boot.outcome, boot.started_at)


def list_results(ctx: Context, source: str, filters: Filters) -> Listing:
    """Every result the archive at `source` holds, whichever host archived it."""
    store, now = open_archive(ctx, source, filters, STATUSES, "results")
    found, unread = archived_results(store)
    kept = filters.select(
        now,
        found,
        lambda r: Facts(r.manifest_name, r.arch, r.result["status"], r.result["created_at"]),
    )
    return Listing(
        "lifecycle-archived-results/1", "results", tuple(map(ListedArchivedResult, kept)),
        RESULT_COLUMNS, _result_cells, store.location.url(), _unread_pins, unread,
    )  # fmt: skip


def _unread_pins(listed: ListedArchivedResult) -> str | None:
    """A line under the table for a result pinned by a pin that cannot be read."""
    found = listed.result
    unread = [pin for pin in found.pins if pin.startswith(UNREAD_PIN)]
    return "\n".join(f"{found.result['id']}: pinned by {pin}" for pin in unread) or None
