"""`lifecycle caches`, `boots` and `results`: what this host's ledger holds, as a table or
JSON; with `--from s3://…`, what an archive holds, whichever host archived it
(lifecycle.commands.archived, imported only then: a listing of the ledger needs neither the
archive's record models nor an S3 client, and scripts run these every night)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lifecycle.commands import verbs
from lifecycle.commands.boot_report import BootReport, HookEntry, hooks_of
from lifecycle.commands.context import Context
from lifecycle.commands.filters import METRICS_WIDTH, OUTCOMES, Filters, age, flags
from lifecycle.home import Home
from lifecycle.leases import lease_held
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord, not_reusable, scan_failure
from lifecycle.ledger.listings import (
    boot_heads,
    boots_arches,
    boots_baked,
    boots_caches,
    boots_untracked,
    boots_uses,
    cache_boots,
    listed_boots,
    listed_caches,
    listed_results,
    results_archives,
)
from lifecycle.ledger.removal import pins
from lifecycle.ledger.results import ResultArchiveRecord, ResultRecord
from lifecycle.report import Listing, Row, fields_of, plain
from lifecycle.results.model import (
    STATUSES,
    Scalar,
    canonical_result,
    is_pin_of,
    metrics_text,
    pin_reason,
)
from lifecycle.table import count_of, human_age, human_bytes

CACHE_STATES = ("live", "archived", "torn-down", "missing")
# A cache shown missing may be recorded so, or live or archived with its dir gone.
RECORDED_AS = {"missing": ("live", "archived", "missing")}


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


def caches(ctx: Context, request: verbs.Caches) -> Listing:
    """`lifecycle caches`: this host's, or with --from an archive's."""
    filters = Filters.of(request)
    if request.source is not None:
        from lifecycle.commands import archived  # see the module's docstring

        return archived.list_caches(ctx, request.source, filters)
    return list_caches(ctx, filters)


def boots(ctx: Context, request: verbs.Boots) -> Listing:
    """`lifecycle boots`: this host's, or with --from an archive's."""
    filters = Filters.of(request)
    if request.source is not None:
        from lifecycle.commands import archived

        return archived.list_boots(ctx, request.source, filters)
    return list_boots(ctx, filters)


def list_caches(ctx: Context, filters: Filters) -> Listing:
    """The caches the filters keep with the boots that used them, cold and warm; in a home
    where nothing is recorded yet, none (and a note)."""
    filters.check_state(CACHE_STATES, "caches here")
    if not ctx.recorded():
        return Listing("lifecycle-caches/1", "caches", (), CACHE_COLUMNS, _cache_cells)
    now = ctx.now()
    with ctx.ledger(create=False) as ledger:
        kept = []
        for cache in listed_caches(ledger, filters.narrowing(now, RECORDED_AS)):
            state = cache.state
            if state in ("live", "archived") and not Path(cache.host_path).is_dir():
                state = "missing"
            facts = {"manifest": cache.manifest_name, "arch": cache.arch, "state": state}
            if filters.keeps(now, **facts, at=cache.created_at):
                kept.append((cache, state))
        # Of the other tables, what the kept caches show: a year of boots used ~80,000.
        ids = [cache.id for cache, _ in kept] if filters.narrows else None
        uses = _grouped(cache_boots(ledger, ids), lambda use: use[0])
        pinned, passed_over = pins(ledger), not_reusable(ledger, ids)
        rows = []
        for cache, state in kept:
            mine = uses.get(cache.id, [])
            rows.append(
                ListedCache(
                    cache,
                    state,
                    boots_cold=tuple(boot for _, boot, mode in mine if mode == "cold"),
                    boots_warm=tuple(boot for _, boot, mode in mine if mode == "warm"),
                    pins=tuple(pinned.get(cache.id, [])),
                    age_s=age(now, cache.created_at),
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


def list_boots(ctx: Context, filters: Filters) -> Listing:
    """The boots the filters keep with the caches they used; none in a home where nothing is
    recorded yet."""
    filters.check_state(OUTCOMES, "boots")
    if not ctx.recorded():
        return Listing("lifecycle-boots/1", "boots", (), BOOT_COLUMNS, _boot_cells)
    now = ctx.now()
    with ctx.ledger(create=False) as ledger:
        listed = listed_boots(ledger, filters.narrowing(now))
        arches = _arches(ledger, filters, (boot.id for boot in listed))
        kept = []
        for boot in listed:
            facts = {"manifest": boot.manifest_name, "arch": ", ".join(arches.get(boot.id, []))}
            if filters.keeps(now, **facts, state=boot.outcome, at=boot.started_at):
                kept.append(boot)
        # Each other table read once for the kept boots (all: whole) and grouped by boot.
        ids = [boot.id for boot in kept] if filters.narrows else None
        uses = _grouped(boots_uses(ledger, ids), lambda use: use.boot_id)
        writes = _grouped(boots_untracked(ledger, ids), lambda write: write.boot_id)
        baked = _grouped(boots_baked(ledger, ids), lambda use: use.boot_id)
        rows = []
        for boot in kept:
            mine = uses.get(boot.id, [])
            gone = boot.outcome == "running" and not any(
                lease_held(ctx.home, u.cache_id) for u in mine
            )
            outside = tuple(writes.get(boot.id, ()))
            in_layers = tuple(baked.get(boot.id, ()))
            rows.append(ListedBoot(BootReport(boot, tuple(mine), outside, (), in_layers), gone))
    return Listing("lifecycle-boots/1", "boots", tuple(rows), BOOT_COLUMNS, _boot_cells)


def _arches(ledger: Ledger, filters: Filters, boot_ids: Iterable[str]) -> dict[str, list[str]]:
    """The arches of these boots' caches, when --arch asks (no row shows them)."""
    return {} if filters.arch is None else boots_arches(ledger, boot_ids)


@dataclass(frozen=True)
class ResultView:
    """One result as `result add` and `results` show it."""

    id: str
    boot_id: str
    name: str
    status: str
    metrics: dict[str, Scalar]
    note: str | None
    source: str
    instrumented: bool
    document: dict[str, Any] | None  # {sha256, size} of the attached JSON
    created_at: str
    digest: str
    manifest_name: str
    profile: str
    hooks: tuple[HookEntry, ...]
    document_path: str | None
    caches: tuple[str, ...]
    pinned: tuple[str, ...]  # the caches behind it that this result pinned
    archives: tuple[ResultArchiveRecord, ...]  # where its record is in S3, verified


RESULT_COLUMNS = "RESULT CREATED NAME STATUS BOOT MANIFEST METRICS ARCHIVED FLAGS"


def _result_cells(r: ResultView) -> list[object]:
    """A result's row; instrumented and pinned ones are flagged on it."""
    return [
        r.id, r.created_at, r.name, r.status, r.boot_id, r.manifest_name,
        metrics_text(r.metrics, METRICS_WIDTH), "yes" if r.archives else "no",
        flags(r.instrumented, bool(r.pinned)),
    ]  # fmt: skip


def results(ctx: Context, request: verbs.Results) -> Listing:
    """`lifecycle results`: this host's, or with --from an archive's."""
    filters = Filters.of(request)
    if request.source is not None:
        from lifecycle.commands import archived

        return archived.list_results(ctx, request.source, filters)
    return list_results(ctx, filters)


def list_results(ctx: Context, filters: Filters) -> Listing:
    """The results the filters keep (by their boot's manifest and arch, their status and
    time); none in a home where nothing is recorded yet."""
    filters.check_state(STATUSES, "results")
    if not ctx.recorded():
        return Listing("lifecycle-results/1", "results", (), RESULT_COLUMNS, _result_cells)
    now = ctx.now()
    with ctx.ledger(create=False) as ledger:
        listed = listed_results(ledger, filters.narrowing(now))
        arches = _arches(ledger, filters, (result.boot_id for result in listed))
        views = []
        for view in describe(ledger, listed, every=not filters.narrows):
            facts = {
                "manifest": view.manifest_name,
                "arch": ", ".join(arches.get(view.boot_id, [])),
            }
            if filters.keeps(now, **facts, state=view.status, at=view.created_at):
                views.append(view)
        rows = tuple(views)
        return Listing("lifecycle-results/1", "results", rows, RESULT_COLUMNS, _result_cells)


def describe(
    ledger: Ledger, results: list[ResultRecord], *, every: bool = False
) -> list[ResultView]:
    """Results with their boots' manifest, profile and hooks, their caches, pins and archives;
    the ledger is read once for all of them, and only for them (`every`: they are every
    result, so each other table is read whole)."""
    boot_ids = None if every else [result.boot_id for result in results]
    boots, caches = boot_heads(ledger, boot_ids), boots_caches(ledger, boot_ids)
    archives = results_archives(ledger, None if every else (result.id for result in results))
    held = pins(ledger)
    views = []
    for result in results:
        boot, mine = boots[result.boot_id], pin_reason(result.id)
        used = tuple(caches.get(boot.id, ()))
        pinned = tuple(sorted(c for c in used if any(is_pin_of(r, mine) for r in held.get(c, []))))
        views.append(
            ResultView(
                **canonical_result(result),
                digest=result.digest,
                manifest_name=boot.manifest_name,
                profile=boot.profile,
                hooks=hooks_of(boot.hooks),
                document_path=result.document_path,
                caches=used,
                pinned=pinned,
                archives=tuple(archives.get(result.id, ())),
            )
        )
    return views
