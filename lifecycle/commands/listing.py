"""`lifecycle caches` and `lifecycle boots`: what exists, as a table or JSON; on this host (its
ledger), or with `--from s3://…` what an archive holds, whichever host archived it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from lifecycle.archive.catalog import ArchivedBoot, ArchivedCache, archived_boots, archived_caches
from lifecycle.commands import verbs
from lifecycle.commands.boot import BootReport
from lifecycle.commands.context import Context
from lifecycle.commands.filters import Facts, Filters, open_archive
from lifecycle.home import Home
from lifecycle.leases import lease_held
from lifecycle.ledger.boots import (
    CacheRecord,
    all_boots,
    all_caches,
    baked_uses,
    boot_arches,
    cache_uses,
    not_reusable,
    scan_failure,
    untracked_writes,
)
from lifecycle.ledger.removal import pins
from lifecycle.report import Listing, Row, fields_of, plain
from lifecycle.table import count_of, human_age, human_bytes

CACHE_STATES = ("live", "archived", "torn-down", "missing")
ARCHIVED_CACHE_STATES = ("restorable", "evidence")  # with the cache's files, or not
OUTCOMES = ("running", "ok", "failed", "interrupted", "aborted", "timeout")


T = TypeVar("T")


@dataclass(frozen=True)
class ListedCache(Row):
    """One tracked cache, as `lifecycle caches` lists it."""

    cache: CacheRecord
    # live | archived | torn-down | missing: a dir the ledger thinks is there but is not shows
    # as missing here, never as live, until a teardown records it so.
    state: str
    boots_cold: tuple[str, ...]
    boots_warm: tuple[str, ...]
    pins: tuple[str, ...]
    age_s: float
    not_reusable: str | None = None  # why a warm boot would pass it over; None: it would not

    def to_json(self) -> dict[str, Any]:
        """The cache's row, its state as shown, the boots that used it, its pins, its age,
        why a warm boot would not reuse it."""
        listed = {k: v for k, v in fields_of(self).items() if k != "cache"}
        return {**plain(self.cache), **listed}


@dataclass(frozen=True)
class ListedBoot(Row):
    """One boot, as `lifecycle boots` lists it."""

    boot: BootReport
    # A running boot's process holds its caches' leases while it lives: none held, it died.
    process_gone: bool

    def to_json(self) -> dict[str, Any]:
        """The boot's report, less its format tag, and whether its process is gone."""
        boot = {k: v for k, v in self.boot.to_json().items() if k != "format"}
        return {**boot, "process_gone": self.process_gone}


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


CACHE_COLUMNS = "CACHE MANIFEST NAME SIZE FILES BOOTS STATE AGE"


def _cache_cells(r: ListedCache) -> list[object]:
    in_use = f" (in use by {r.cache.in_use_by})" if r.cache.in_use_by and not r.not_reusable else ""
    state = r.state + in_use + (" pinned" if r.pins else "")
    state += ", not reusable" if r.not_reusable else ""
    return [
        r.cache.id, r.cache.manifest_name, r.cache.cache_name, human_bytes(r.cache.bytes),
        r.cache.files if r.cache.files is not None else "-",
        f"{len(r.boots_cold)} cold, {len(r.boots_warm)} warm", state, human_age(r.age_s),
    ]  # fmt: skip


BOOT_COLUMNS = "BOOT STARTED MANIFEST PROFILE OUTCOME EXIT CACHES JIT HOOKS"


def _boot_cells(row: ListedBoot) -> list[object]:
    """A boot's row; instrumented boots are flagged on it."""
    boot = row.boot.boot
    hooks = ", ".join(h.name for h in row.boot.hooks) + (
        " INSTRUMENTED" if boot.instrumented else ""
    )
    outcome = boot.outcome + (" (process gone)" if row.process_gone else "")
    # An engine that ended well with a cache its end-of-boot scan could not read: `ok`, and
    # that cache no boot's warm cache; the row says so, `why` and `caches` say which and why.
    unscanned = [u for u in row.boot.caches if scan_failure(boot.error, u.cache_id)]
    if unscanned:
        outcome += f" ({count_of(len(unscanned), 'cache')} not scanned)"
    return [
        boot.id, boot.started_at, boot.manifest_name, boot.profile, outcome, boot.exit_code,
        _caches_cell(row.boot), row.boot.warmth[1], hooks,
    ]  # fmt: skip


def _caches_cell(boot: BootReport) -> str:
    # An empty cache is `empty`, whether it was mounted cold or warm.
    modes = ["empty" if u.verdict == "empty" else u.mode for u in boot.caches]
    warm = [u for u in boot.caches if u.mode == "warm"]
    files = sum(u.files_added or 0 for u in warm)
    dirs = sum(u.dirs_added or 0 for u in warm)
    text = ", ".join(f"{modes.count(m)} {m}" for m in ("cold", "warm", "empty") if m in modes)
    text += f"{', ' if text else ''}{len(boot.baked)} baked" if boot.baked else ""
    grew = [f"+{files} files"] * bool(files) + [f"+{dirs} dirs"] * bool(dirs)
    return text + (f" ({', '.join(grew)} while warm)" if grew else "")


def _grouped(items: Iterable[T], key: Callable[[T], str]) -> dict[str, list[T]]:
    """The items by their key, each list in the items' order."""
    found: dict[str, list[T]] = {}
    for item in items:
        found.setdefault(key(item), []).append(item)
    return found


def _cache_note(r: ListedCache) -> str | None:
    return f"{r.cache.id}: not reusable: {r.not_reusable}" if r.not_reusable else None


ARCHIVED_CACHE_COLUMNS = "CACHE MANIFEST NAME ARCH VERSIONS NEWEST SIZE STATE BY AGE"


def _archived_cache_cells(r: ListedArchivedCache) -> list[object]:
    """Each cache's newest version, and how many it has."""
    row, newest = r.cache.row, r.cache.newest
    return [
        row.id, row.manifest_name, row.cache_name, row.arch, len(r.cache.versions),
        newest.tree_digest[:12], human_bytes(newest.bytes), r.cache.state, newest.host,
        human_age(r.age_s),
    ]  # fmt: skip


ARCHIVED_BOOT_COLUMNS = "BOOT STARTED HOST MANIFEST PROFILE OUTCOME ARCH CACHES"


def _archived_boot_cells(r: ListedArchivedBoot) -> list[object]:
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


def caches(ctx: Context, request: verbs.Caches) -> Listing:
    """`lifecycle caches`: this host's, or with --from an archive's."""
    filters = Filters.of(request)
    if request.source is not None:
        return list_archived_caches(ctx, request.source, filters)
    return list_caches(ctx, filters)


def boots(ctx: Context, request: verbs.Boots) -> Listing:
    """`lifecycle boots`: this host's, or with --from an archive's."""
    filters = Filters.of(request)
    if request.source is not None:
        return list_archived_boots(ctx, request.source, filters)
    return list_boots(ctx, filters)


def list_caches(ctx: Context, filters: Filters) -> Listing:
    """Every cache with the boots that used it, cold and warm; in a home where nothing is
    recorded yet, none (and a note)."""
    filters.check_state(CACHE_STATES, "caches here")
    if not ctx.recorded():
        return Listing("lifecycle-caches/1", "caches", (), CACHE_COLUMNS, _cache_cells)
    now = ctx.now()
    with ctx.ledger(create=False) as ledger:
        pinned, passed_over = pins(ledger), not_reusable(ledger)
        uses = _grouped(cache_uses(ledger), lambda use: use.cache_id)
        rows = []
        for cache in all_caches(ledger):
            mine = uses.get(cache.id, [])
            state = cache.state
            if state in ("live", "archived") and not Path(cache.host_path).is_dir():
                state = "missing"
            facts = {"manifest": cache.manifest_name, "arch": cache.arch, "state": state}
            if not filters.keeps(now, **facts, at=cache.created_at):
                continue
            rows.append(
                ListedCache(
                    cache,
                    state,
                    boots_cold=tuple(u.boot_id for u in mine if u.mode == "cold"),
                    boots_warm=tuple(u.boot_id for u in mine if u.mode == "warm"),
                    pins=tuple(pinned.get(cache.id, [])),
                    age_s=_age(now, cache.created_at),
                    not_reusable=_not_reusable(ctx.home, cache, state, passed_over),
                )
            )
    return Listing(
        "lifecycle-caches/1", "caches", tuple(rows), CACHE_COLUMNS, _cache_cells, note=_cache_note
    )


def _not_reusable(
    home: Home, cache: CacheRecord, state: str, passed_over: dict[str, str]
) -> str | None:
    """Why a warm boot would pass the cache over; a boot that holds it and whose process is
    gone (killed) crashed: what it left may be half built."""
    if state == "missing":
        return None
    if cache.in_use_by is not None and not lease_held(home, cache.id):
        return (
            f"its boot {cache.in_use_by} died while holding it (process gone): it may hold a"
            " half-built file"
        )
    return passed_over.get(cache.id)


def list_archived_caches(ctx: Context, source: str, filters: Filters) -> Listing:
    """Every cache the archive at `source` holds, whoever archived it."""
    store, now = open_archive(ctx, source, filters, ARCHIVED_CACHE_STATES, "caches in an archive")
    found, unread = archived_caches(store)
    rows = tuple(
        ListedArchivedCache(c, _age(now, c.newest.archived_at))
        for c in filters.select(now, found, _cache_facts)
    )
    return Listing(
        "lifecycle-archived-caches/1", "caches", rows, ARCHIVED_CACHE_COLUMNS,
        _archived_cache_cells, store.location.url(), unreadable=unread,
    )  # fmt: skip


def _age(now: datetime, at: str) -> float:
    return (now - datetime.fromisoformat(at)).total_seconds()


def _cache_facts(cache: ArchivedCache) -> Facts:
    """An archived cache is filtered by its newest version's time."""
    row = cache.row
    return Facts(row.manifest_name, row.arch, cache.state, cache.newest.archived_at)


def list_boots(ctx: Context, filters: Filters) -> Listing:
    """Every boot with the caches it used; none in a home where nothing is recorded yet."""
    filters.check_state(OUTCOMES, "boots")
    if not ctx.recorded():
        return Listing("lifecycle-boots/1", "boots", (), BOOT_COLUMNS, _boot_cells)
    now = ctx.now()
    with ctx.ledger(create=False) as ledger:
        # Each table read once and grouped by boot: a GPU host's ledger holds thousands.
        uses = _grouped(cache_uses(ledger), lambda use: use.boot_id)
        writes = _grouped(untracked_writes(ledger), lambda write: write.boot_id)
        baked = _grouped(baked_uses(ledger), lambda use: use.boot_id)
        arches = boot_arches(ledger)
        rows = []
        for boot in all_boots(ledger):
            mine = uses.get(boot.id, [])
            facts = {"manifest": boot.manifest_name, "arch": ", ".join(arches.get(boot.id, []))}
            if not filters.keeps(now, **facts, state=boot.outcome, at=boot.started_at):
                continue
            gone = boot.outcome == "running" and not any(
                lease_held(ctx.home, u.cache_id) for u in mine
            )
            outside = tuple(writes.get(boot.id, ()))
            in_layers = tuple(baked.get(boot.id, ()))
            rows.append(ListedBoot(BootReport(boot, tuple(mine), outside, (), in_layers), gone))
    return Listing("lifecycle-boots/1", "boots", tuple(rows), BOOT_COLUMNS, _boot_cells)


def list_archived_boots(ctx: Context, source: str, filters: Filters) -> Listing:
    """Every boot the archive at `source` holds a record of."""
    store, now = open_archive(ctx, source, filters, OUTCOMES, "boots")
    found, unread = archived_boots(store)
    kept = filters.select(now, found, _boot_facts)
    return Listing(
        "lifecycle-archived-boots/1", "boots", tuple(map(ListedArchivedBoot, kept)),
        ARCHIVED_BOOT_COLUMNS, _archived_boot_cells, store.location.url(), unreadable=unread,
    )  # fmt: skip


def _boot_facts(found: ArchivedBoot) -> Facts:
    """An archived boot is filtered by when it started."""
    boot = found.boot
    return Facts(boot.manifest_name, found.arch, boot.outcome, boot.started_at)
