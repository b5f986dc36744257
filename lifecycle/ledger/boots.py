"""Boots and their caches in the ledger: which boot used which cache, cold or warm."""

from __future__ import annotations

from dataclasses import dataclass

from lifecycle.ledger.core import Ledger
from lifecycle.ledger.rows import from_row, insert, update


@dataclass(frozen=True)
class CacheRecord:
    """One tracked JIT cache directory on this host."""

    id: str
    cache_key: str
    cache_name: str
    manifest_name: str
    manifest_digest: str
    image_id: str
    arch: str
    host_path: str
    container_path: str
    state: str  # live | archived | torn-down
    in_use_by: str | None
    created_at: str
    tree_digest: str | None = None
    files: int | None = None
    bytes: int | None = None
    scan_path: str | None = None
    scanned_at: str | None = None


@dataclass(frozen=True)
class BootRecord:
    """One container run of a built engine image."""

    id: str
    started_at: str
    ended_at: str | None
    exit_code: int | None
    outcome: str  # running | ok | failed | interrupted | aborted
    error: str | None
    host: str
    profile: str
    manifest_name: str
    manifest_digest: str
    image_id: str
    image_tag: str
    container_id: str | None
    hooks: str  # JSON list of {"name", "observing"}
    instrumented: bool
    secret_names: str  # JSON list of names; values are never stored
    log_path: str | None
    evidence_path: str | None


@dataclass(frozen=True)
class CacheUse:
    """A cache as one boot used it."""

    boot_id: str
    cache_id: str
    mode: str  # cold | warm
    tree_digest_before: str | None = None
    tree_digest_after: str | None = None
    files_added: int | None = None
    files_changed: int | None = None
    files_removed: int | None = None


@dataclass(frozen=True)
class HookRunRecord:
    """One hook run at one event of a boot."""

    boot_id: str
    name: str
    event: str
    exit_code: int | None
    duration_s: float


def newest_live_cache(ledger: Ledger, cache_key: str) -> CacheRecord | None:
    """The cache a warm boot reuses: newest live one with this key that no boot holds."""
    # An archived cache is still on disk and as warm as ever; reusing it makes it live again.
    rows = ledger.query(
        "SELECT * FROM caches WHERE cache_key = ? AND state IN ('live', 'archived')"
        " AND in_use_by IS NULL ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (cache_key,),
    )
    return from_row(CacheRecord, rows[0]) if rows else None


def start_boot(
    ledger: Ledger, boot: BootRecord, new_caches: list[CacheRecord], uses: list[CacheUse]
) -> None:
    """Record the intent of a boot and take its caches, all in one transaction."""
    with ledger.transaction() as conn:
        for cache in new_caches:
            insert(conn, "caches", cache)
        insert(conn, "boots", boot)
        for use in uses:
            insert(conn, "boot_caches", use)
            # A boot may change the cache, so an archive taken before it is no longer current:
            # the cache is live again until it is re-archived.
            conn.execute(
                "UPDATE caches SET in_use_by = ?, state = 'live' WHERE id = ?",
                (boot.id, use.cache_id),
            )


def finish_boot(
    ledger: Ledger,
    boot: BootRecord,
    uses: list[CacheUse],
    scanned: list[CacheRecord],
    hook_runs: list[HookRunRecord],
) -> None:
    """Record how the boot ended, what its caches hold now, and release them: one transaction."""
    with ledger.transaction() as conn:
        update(conn, "boots", boot, key="id")
        for use in uses:
            conn.execute(
                "UPDATE boot_caches SET tree_digest_before = ?, tree_digest_after = ?,"
                " files_added = ?, files_changed = ?, files_removed = ?"
                " WHERE boot_id = ? AND cache_id = ?",
                (
                    use.tree_digest_before,
                    use.tree_digest_after,
                    use.files_added,
                    use.files_changed,
                    use.files_removed,
                    use.boot_id,
                    use.cache_id,
                ),
            )
        for cache in scanned:
            update(conn, "caches", cache, key="id")
        conn.execute("UPDATE caches SET in_use_by = NULL WHERE in_use_by = ?", (boot.id,))
        for run in hook_runs:
            insert(conn, "hook_runs", run)


def all_caches(ledger: Ledger) -> list[CacheRecord]:
    """Every cache, newest first."""
    rows = ledger.query("SELECT * FROM caches ORDER BY created_at DESC, rowid DESC")
    return [from_row(CacheRecord, row) for row in rows]


def all_boots(ledger: Ledger) -> list[BootRecord]:
    """Every boot, newest first."""
    rows = ledger.query("SELECT * FROM boots ORDER BY started_at DESC, rowid DESC")
    return [from_row(BootRecord, row) for row in rows]


def cache_uses(ledger: Ledger, *, boot_id: str | None = None) -> list[CacheUse]:
    """Which boot used which cache, and how; all of them, or those of one boot."""
    if boot_id is None:
        rows = ledger.query("SELECT * FROM boot_caches ORDER BY rowid")
    else:
        sql = "SELECT * FROM boot_caches WHERE boot_id = ? ORDER BY rowid"
        rows = ledger.query(sql, (boot_id,))
    return [from_row(CacheUse, row) for row in rows]


def cache_by_id(ledger: Ledger, cache_id: str) -> CacheRecord | None:
    """One cache, or None."""
    rows = ledger.query("SELECT * FROM caches WHERE id = ?", (cache_id,))
    return from_row(CacheRecord, rows[0]) if rows else None
