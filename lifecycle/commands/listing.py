"""`lifecycle caches` and `lifecycle boots`: what exists, as a table or JSON."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.commands.boot import BootReport, report_of
from lifecycle.commands.context import Context
from lifecycle.commands.report import Report, Row, fields_of, plain
from lifecycle.leases import lease_held
from lifecycle.ledger.boots import (
    CacheRecord,
    all_boots,
    all_caches,
    cache_uses,
    untracked_writes,
)
from lifecycle.ledger.pins import pins
from lifecycle.table import human_age, human_bytes, render


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

    def to_json(self) -> dict[str, Any]:
        """The cache's row, its state as shown, the boots that used it, its pins, its age."""
        listed = {k: v for k, v in fields_of(self).items() if k != "cache"}
        return {**plain(self.cache), **listed}


@dataclass(frozen=True)
class CachesReport(Report):
    """Every tracked cache, newest first."""

    FORMAT: ClassVar[str] = "lifecycle-caches/1"
    caches: tuple[ListedCache, ...]


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
class BootsReport(Report):
    """Every boot, newest first."""

    FORMAT: ClassVar[str] = "lifecycle-boots/1"
    boots: tuple[ListedBoot, ...]


def list_caches(ctx: Context) -> CachesReport:
    """Every cache with the boots that used it, cold and warm; in a home where nothing is
    recorded yet, none (and a note)."""
    if not ctx.recorded():
        return CachesReport(())
    now = ctx.now()
    with ctx.ledger(create=False) as ledger:
        uses, pinned = cache_uses(ledger), pins(ledger)
        rows = []
        for cache in all_caches(ledger):
            mine = [u for u in uses if u.cache_id == cache.id]
            state = cache.state
            if state in ("live", "archived") and not Path(cache.host_path).is_dir():
                state = "missing"
            rows.append(
                ListedCache(
                    cache,
                    state,
                    boots_cold=tuple(u.boot_id for u in mine if u.mode == "cold"),
                    boots_warm=tuple(u.boot_id for u in mine if u.mode == "warm"),
                    pins=tuple(pinned.get(cache.id, [])),
                    age_s=(now - datetime.fromisoformat(cache.created_at)).total_seconds(),
                )
            )
    return CachesReport(tuple(rows))


def list_boots(ctx: Context) -> BootsReport:
    """Every boot with the caches it used; none in a home where nothing is recorded yet."""
    if not ctx.recorded():
        return BootsReport(())
    with ctx.ledger(create=False) as ledger:
        uses, writes = cache_uses(ledger), untracked_writes(ledger)
        rows = []
        for boot in all_boots(ledger):
            mine = [u for u in uses if u.boot_id == boot.id]
            gone = boot.outcome == "running" and not any(
                lease_held(ledger.home, u.cache_id) for u in mine
            )
            outside = [w for w in writes if w.boot_id == boot.id]
            rows.append(ListedBoot(report_of(boot, mine, outside), gone))
    return BootsReport(tuple(rows))


def render_caches(report: CachesReport) -> str:
    """The table of `lifecycle caches`."""
    return render(
        ["CACHE", "MANIFEST", "NAME", "SIZE", "FILES", "BOOTS", "STATE", "AGE"],
        [
            [
                r.cache.id,
                r.cache.manifest_name,
                r.cache.cache_name,
                human_bytes(r.cache.bytes),
                r.cache.files if r.cache.files is not None else "-",
                f"{len(r.boots_cold)} cold, {len(r.boots_warm)} warm",
                r.state
                + (f" (in use by {r.cache.in_use_by})" if r.cache.in_use_by else "")
                + (" pinned" if r.pins else ""),
                human_age(r.age_s),
            ]
            for r in report.caches
        ],
    )


def render_boots(report: BootsReport) -> str:
    """The table of `lifecycle boots`; instrumented boots are flagged on their row."""

    def caches(boot: BootReport) -> str:
        # An empty cache is `empty`, whether it was mounted cold or warm.
        modes = ["empty" if u.verdict == "empty" else u.mode for u in boot.caches]
        warm = [u for u in boot.caches if u.mode == "warm"]
        files = sum(u.files_added or 0 for u in warm)
        dirs = sum(u.dirs_added or 0 for u in warm)
        text = ", ".join(f"{modes.count(m)} {m}" for m in ("cold", "warm", "empty") if m in modes)
        grew = [f"+{files} files"] * bool(files) + [f"+{dirs} dirs"] * bool(dirs)
        return text + (f" ({', '.join(grew)} while warm)" if grew else "")

    return render(
        ["BOOT", "STARTED", "MANIFEST", "PROFILE", "OUTCOME", "EXIT", "CACHES", "JIT", "HOOKS"],
        [
            [
                row.boot.boot.id,
                row.boot.boot.started_at,
                row.boot.boot.manifest_name,
                row.boot.boot.profile,
                row.boot.boot.outcome + (" (process gone)" if row.process_gone else ""),
                row.boot.boot.exit_code,
                caches(row.boot),
                row.boot.warmth[1],
                ", ".join(h.name for h in row.boot.hooks)
                + (" INSTRUMENTED" if row.boot.boot.instrumented else ""),
            ]
            for row in report.boots
        ],
    )
