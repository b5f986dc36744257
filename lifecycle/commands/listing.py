"""`lifecycle caches` and `lifecycle boots`: what exists, as rows for a table or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from lifecycle.leases import lease_held
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import all_boots, all_caches, cache_uses
from lifecycle.ledger.pins import pins
from lifecycle.table import human_age, human_bytes, render


def list_caches(ledger: Ledger, now: datetime) -> list[dict[str, Any]]:
    """Every cache with the boots that used it, cold and warm."""
    uses = cache_uses(ledger)
    pinned = pins(ledger)
    rows = []
    for cache in all_caches(ledger):
        mine = [u for u in uses if u.cache_id == cache.id]
        row = asdict(cache)
        row["boots_cold"] = [u.boot_id for u in mine if u.mode == "cold"]
        row["boots_warm"] = [u.boot_id for u in mine if u.mode == "warm"]
        row["pins"] = pinned.get(cache.id, [])
        row["age_s"] = (now - datetime.fromisoformat(cache.created_at)).total_seconds()
        # The ledger never says live for a dir that is not there: such a row is `missing` here
        # until a teardown records it (lifecycle.teardown settles it).
        if cache.state in ("live", "archived") and not Path(cache.host_path).is_dir():
            row["state"] = "missing"
        rows.append(row)
    return rows


def list_boots(ledger: Ledger) -> list[dict[str, Any]]:
    """Every boot with the caches it used."""
    uses = cache_uses(ledger)
    rows = []
    for boot in all_boots(ledger):
        row = asdict(boot)
        row["hooks"] = json.loads(boot.hooks)
        row["secret_names"] = json.loads(boot.secret_names)
        row["caches"] = [asdict(u) for u in uses if u.boot_id == boot.id]
        # A running boot's process holds its caches' leases while it lives: none held, it died.
        row["process_gone"] = boot.outcome == "running" and not any(
            lease_held(ledger.home, u["cache_id"]) for u in row["caches"]
        )
        rows.append(row)
    return rows


def caches_table(rows: list[dict[str, Any]]) -> str:
    """The human form of `lifecycle caches`."""
    return render(
        ["CACHE", "MANIFEST", "NAME", "SIZE", "FILES", "BOOTS", "STATE", "AGE"],
        [
            [
                r["id"],
                r["manifest_name"],
                r["cache_name"],
                human_bytes(r["bytes"]),
                r["files"] if r["files"] is not None else "-",
                f"{len(r['boots_cold'])} cold, {len(r['boots_warm'])} warm",
                r["state"]
                + (f" (in use by {r['in_use_by']})" if r["in_use_by"] else "")
                + (" pinned" if r["pins"] else ""),
                human_age(r["age_s"]),
            ]
            for r in rows
        ],
    )


def boots_table(rows: list[dict[str, Any]]) -> str:
    """The human form of `lifecycle boots`; instrumented boots are flagged on their row."""

    def caches(row: dict[str, Any]) -> str:
        modes = [u["mode"] for u in row["caches"]]
        grew = sum(u["files_added"] or 0 for u in row["caches"] if u["mode"] == "warm")
        text = ", ".join(f"{modes.count(m)} {m}" for m in ("cold", "warm") if m in modes)
        return text + (f" (+{grew} files while warm)" if grew else "")

    return render(
        ["BOOT", "STARTED", "MANIFEST", "PROFILE", "OUTCOME", "EXIT", "CACHES", "HOOKS"],
        [
            [
                r["id"],
                r["started_at"],
                r["manifest_name"],
                r["profile"],
                r["outcome"] + (" (process gone)" if r["process_gone"] else ""),
                r["exit_code"],
                caches(r),
                ", ".join(h["name"] for h in r["hooks"])
                + (" INSTRUMENTED" if r["instrumented"] else ""),
            ]
            for r in rows
        ],
    )
