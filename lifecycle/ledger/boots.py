"""Boots and their caches in the ledger: which boot used which cache, cold or warm."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable, Sequence
from dataclasses import astuple, dataclass, fields

from lifecycle.home import Home
from lifecycle.leases import held, lease_held
from lifecycle.ledger.core import AMONG, Ledger, among, insert, update


@dataclass(frozen=True)
class CacheRow:
    """What a cache is, wherever it is told: the part of its row the archive's records carry."""

    id: str  # <cache name>-<12 hex>, also the dir's name under caches/
    cache_key: str  # sha256 of image id, cache name and GPU arch: what a warm boot must match
    cache_name: str
    manifest_name: str
    manifest_digest: str
    image_id: str
    arch: str
    host_path: str
    container_path: str
    created_at: str
    tree_digest: str | None = None  # of the last scan; None until a boot has ended
    files: int | None = None
    bytes: int | None = None
    scan_path: str | None = None
    scanned_at: str | None = None


@dataclass(frozen=True)
class CacheRecord(CacheRow):
    """One tracked JIT cache directory on this host: its row and this host's bookkeeping."""

    state: str = "live"  # live | archived | torn-down | missing
    in_use_by: str | None = None  # the boot holding it

    @property
    def gone(self) -> bool:
        """Whether its dir is no longer on this host: a teardown removed it, or it vanished
        behind the ledger's back (`missing`). Nothing boots from it, nor removes it, again."""
        return self.state in ("torn-down", "missing")

    def row(self) -> CacheRow:
        """The row without this host's bookkeeping, as records carry it."""
        return CacheRow(**{f.name: getattr(self, f.name) for f in fields(CacheRow)})


@dataclass(frozen=True)
class BootRecord:
    """One container run of a built engine image."""

    id: str
    started_at: str
    ended_at: str | None
    exit_code: int | None
    outcome: str  # running | ok | failed | interrupted | aborted | timeout (stopped at --timeout)
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
    tree_digest_before: str | None = None  # warm: the scan the boot started from
    tree_digest_after: str | None = None
    files_added: int | None = None  # cold: every file, since the dir started empty; not dirs
    files_changed: int | None = None
    files_removed: int | None = None
    dirs_added: int | None = None
    # cold-compiled | warm-hit | mounted-but-missed | unused | empty (lifecycle.evidence.verdict)
    verdict: str | None = None
    files_read: int | None = None  # opened by the engine and left as they were; None: not seen


@dataclass(frozen=True)
class BakedUse:
    """A cache baked into the image a boot ran (lifecycle bake), as the boot used it."""

    boot_id: str
    cache_name: str
    cache_id: str  # the cache it was baked from, perhaps on another host
    tree_digest: str  # of its layer, checked before the boot
    verdict: str | None = None  # as for CacheUse
    files_read: int | None = None
    files_written: int | None = None  # into its path, in the container's own layer

    def as_use(self) -> CacheUse:
        """As a cache use, for the audit chain: mode `baked`, its layer's tree before and after
        (a layer does not change)."""
        return CacheUse(
            self.boot_id, self.cache_id, "baked", self.tree_digest, self.tree_digest,
            files_added=self.files_written, verdict=self.verdict, files_read=self.files_read,
        )  # fmt: skip


@dataclass(frozen=True)
class TaintedFile:
    """A cache file holding a secret's value: kept on this host, never archived."""

    cache_id: str
    path: str  # relative to the cache's dir
    sha256: str  # of the bytes as found: the file is withheld while it still holds them
    secret: str  # the secret's name; its value is never stored
    boot_id: str | None  # the boot that wrote it; None: an archive's scan found it, outside boots


@dataclass(frozen=True)
class UntrackedWrite:
    """JIT output a boot wrote into its container's own layer, outside every tracked cache: it
    is lost with the container, so the next boot compiles it again."""

    boot_id: str
    path: str  # absolute, inside the container
    change: str  # added | changed
    bytes: int | None  # None when dockerd could not say


@dataclass(frozen=True)
class HookRunRecord:
    """One hook run at one event of a boot."""

    boot_id: str
    name: str
    event: str
    exit_code: int | None
    duration_s: float


@dataclass(frozen=True)
class CacheDamage:
    """A cache found changed behind lifecycle's back (by a boot about to mount it, or by an
    archive's scan): not the engine's doing (no boot held it), so it is never reused warm,
    until a restore."""

    cache_id: str
    found_at: str
    found_by: str  # the boot that found it, or `archive`
    tree_digest: str  # of the tree found
    paths: str  # JSON {"changed": [...], "added": [...], "removed": [...]}, relative paths

    @property
    def described(self) -> str:
        """`changed: a/x.so; removed: b.json`, at most five paths of each kind."""
        found = json.loads(self.paths)
        parts = [
            f"{kind}: {', '.join(found[kind][:5])}" + (" …" if len(found[kind]) > 5 else "")
            for kind in ("changed", "added", "removed")
            if found[kind]
        ]
        return "; ".join(parts) or "its tree digest differs"


def _last_use(column: str, otherwise: str) -> str:
    """SQL for `column` of the newest boot that used cache `c` (`b`: the boot, `u`: its use of
    the cache), or `otherwise` when no boot here used it yet."""
    return (
        f"COALESCE((SELECT {column} FROM boot_caches u JOIN boots b ON b.id = u.boot_id"
        f" WHERE u.cache_id = c.id ORDER BY b.started_at DESC, b.rowid DESC LIMIT 1), {otherwise})"
    )


# Its outcome; 'ok' for a cache no boot here used yet (a restored one).
_LAST_OUTCOME = _last_use("b.outcome", "'ok'")
# Whether it died without its end-of-boot scan (settled as `interrupted`): the cache's recorded
# tree is still the one the boot before it left.
_LAST_DIED = _last_use("b.outcome = 'interrupted' AND u.tree_digest_after IS NULL", "0")
_LAST_BOOT = _last_use("u.boot_id", "NULL")
# Whether its last boot ended without scanning it (SCAN_FAILED): its tree is unknown, though
# the engine may have ended well, so it is no boot's warm cache.
_LAST_UNSCANNED = _last_use(
    "b.outcome NOT IN ('running', 'interrupted') AND u.tree_digest_after IS NULL", "0"
)
_LAST_ERROR = _last_use("b.error", "NULL")
# How a boot's error names a cache its end-of-boot scan could not read; these come last in the
# error, so each runs to the next one or to its end.
SCAN_FAILED = "scan of cache {} failed: "


def scan_failure(error: str | None, cache_id: str) -> str | None:
    """Why a boot whose `error` this is could not scan cache `cache_id` (the file and why);
    None when it says nothing of it."""
    start = SCAN_FAILED.format(cache_id)
    if error is None or start not in error:
        return None
    said = error.split(start, 1)[1]
    return said.split("; " + SCAN_FAILED.format(""), 1)[0]


def warm_candidates(ledger: Ledger, cache_key: str) -> list[CacheRecord]:
    """Caches a warm boot may reuse, newest first: this key, on disk as far as the ledger knows
    (live or archived), held by no boot, scanned, not found changed behind lifecycle's back,
    and whose last boot here ended `ok` and scanned it, or died before its end-of-boot scan.

    A boot that failed or timed out may have left a half-built cache (a truncated `.so` crashes
    the engine that loads it); one whose scan failed holds a tree nobody saw; a cache restored
    from another host has no boot here yet. One
    whose boot died is taken only if a scan finds the tree its last recorded scan saw (the
    boot's caller scans each candidate before it mounts it): then the dead boot wrote nothing.
    """
    return ledger.records(
        CacheRecord,
        "SELECT c.* FROM caches c WHERE c.cache_key = ? AND c.state IN ('live', 'archived')"
        " AND c.in_use_by IS NULL AND c.tree_digest IS NOT NULL"
        f" AND (({_LAST_OUTCOME} = 'ok' AND NOT {_LAST_UNSCANNED}) OR {_LAST_DIED})"
        " AND NOT EXISTS (SELECT 1 FROM cache_damage d WHERE d.cache_id = c.id)"
        " ORDER BY c.created_at DESC, c.rowid DESC",
        (cache_key,),
    )


def not_reusable(ledger: Ledger, cache_ids: Iterable[str] | None = None) -> dict[str, str]:
    """Why each live or archived cache (of `cache_ids`, if given: a listing's) a warm boot
    would pass over is passed over."""
    why: dict[str, str] = {}
    only, params = ("", ()) if cache_ids is None else (f" AND c.id {AMONG}", among(cache_ids))
    rows = ledger.query(
        f"SELECT c.id, c.in_use_by, c.tree_digest, {_LAST_OUTCOME} AS outcome,"
        f" {_LAST_DIED} AS died, {_LAST_BOOT} AS last, {_LAST_UNSCANNED} AS unscanned,"
        f" {_LAST_ERROR} AS error"
        f" FROM caches c WHERE c.state IN ('live', 'archived'){only}",
        params,
    )
    for row in rows:
        if row["in_use_by"] is not None:
            why[row["id"]] = f"in use by {row['in_use_by']}"
        elif row["outcome"] != "ok" and not row["died"]:
            why[row["id"]] = (
                f"its last boot {row['last']} ended {row['outcome']}: it may hold a half-built file"
            )
        elif row["unscanned"]:
            said = scan_failure(row["error"], row["id"]) or "see `lifecycle boots`"
            why[row["id"]] = (
                f"its last boot {row['last']} could not scan it ({said}): what it holds is"
                " unknown, so no boot mounts it warm"
            )
        elif row["tree_digest"] is None:
            why[row["id"]] = "never scanned"
    damaged = "" if cache_ids is None else f" WHERE cache_id {AMONG}"
    sql = f"SELECT * FROM cache_damage{damaged} ORDER BY found_at"
    for damage in ledger.records(CacheDamage, sql, params):
        paths = json.loads(damage.paths)
        named = [*paths["changed"], *paths["added"], *paths["removed"]]
        shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
        why[damage.cache_id] = (
            f"changed behind lifecycle's back ({shown}), found by {damage.found_by}"
            f" at {damage.found_at}"
        )
    return why


def last_boot_ended(ledger: Ledger, cache_id: str) -> bool:
    """Whether the newest boot that used the cache ended and recorded its end-of-boot scan
    (or no boot used it yet): then nothing of lifecycle's may change it until the next boot."""
    rows = ledger.query(
        f"SELECT {_LAST_OUTCOME} AS outcome FROM caches c WHERE c.id = ?", (cache_id,)
    )
    return bool(rows) and rows[0]["outcome"] not in ("running", "interrupted")


def damage_found_by(ledger: Ledger, boot_id: str) -> list[CacheDamage]:
    """The caches a boot found changed behind lifecycle's back, and passed over."""
    sql = "SELECT * FROM cache_damage WHERE found_by = ? ORDER BY rowid"
    return ledger.records(CacheDamage, sql, (boot_id,))


def damage_of(ledger: Ledger, cache_id: str) -> CacheDamage | None:
    """The newest mark of the cache as changed behind lifecycle's back, if it still stands (a
    restore that puts its tree back lifts it)."""
    sql = "SELECT * FROM cache_damage WHERE cache_id = ? ORDER BY rowid DESC LIMIT 1"
    return ledger.record(CacheDamage, sql, (cache_id,))


def record_damage(ledger: Ledger, damage: CacheDamage) -> None:
    """Mark a cache found changed: one transaction of its own, whatever the boot does next."""
    with ledger.transaction() as conn:
        insert(conn, "cache_damage", damage)


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
    tainted: Sequence[TaintedFile] = (),
    untracked: Sequence[UntrackedWrite] = (),
    baked: Sequence[BakedUse] = (),
) -> None:
    """Record how the boot ended, what its caches hold now, and release them: one transaction."""
    with ledger.transaction() as conn:
        update(conn, "boots", boot, key="id")
        for use in uses:
            update(conn, "boot_caches", use, key=("boot_id", "cache_id"))
        for baked_use in baked:
            insert(conn, "baked_uses", baked_use)
        for cache in scanned:
            update(conn, "caches", cache, key="id")
        conn.execute("UPDATE caches SET in_use_by = NULL WHERE in_use_by = ?", (boot.id,))
        for run in hook_runs:
            insert(conn, "hook_runs", run)
        for found in tainted:
            insert(conn, "tainted_files", found, on_conflict="IGNORE")
        for write in untracked:
            insert(conn, "untracked_writes", write)


def all_caches(ledger: Ledger) -> list[CacheRecord]:
    """Every cache, newest first."""
    return ledger.records(CacheRecord, "SELECT * FROM caches ORDER BY created_at DESC, rowid DESC")


def all_boots(ledger: Ledger) -> list[BootRecord]:
    """Every boot, newest first."""
    return ledger.records(BootRecord, "SELECT * FROM boots ORDER BY started_at DESC, rowid DESC")


def cache_uses(
    ledger: Ledger, *, boot_id: str | None = None, cache_id: str | None = None
) -> list[CacheUse]:
    """Which boot used which cache, and how; all of them, or those of one boot or one cache."""
    if boot_id is not None:
        sql = "SELECT * FROM boot_caches WHERE boot_id = ? ORDER BY rowid"
        return ledger.records(CacheUse, sql, (boot_id,))
    if cache_id is not None:
        sql = "SELECT * FROM boot_caches WHERE cache_id = ? ORDER BY rowid"
        return ledger.records(CacheUse, sql, (cache_id,))
    return ledger.records(CacheUse, "SELECT * FROM boot_caches ORDER BY rowid")


def used_pairs(ledger: Ledger) -> list[tuple[str, str]]:
    """(boot id, cache id) of every use, oldest first: who used what, without the rest of
    each row (a GPU host's ledger holds tens of thousands)."""
    rows = ledger.query("SELECT boot_id, cache_id FROM boot_caches ORDER BY rowid")
    return [(row["boot_id"], row["cache_id"]) for row in rows]


def cache_by_id(ledger: Ledger, cache_id: str) -> CacheRecord | None:
    """One cache, or None."""
    return ledger.record(CacheRecord, "SELECT * FROM caches WHERE id = ?", (cache_id,))


def settle_boot(ledger: Ledger, boot_id: str, at: str, why: str) -> None:
    """A boot whose process died before recording an outcome: `interrupted`, its caches let go."""
    with ledger.transaction() as conn:
        conn.execute(
            "UPDATE boots SET outcome = 'interrupted', ended_at = ?, error = ?"
            " WHERE id = ? AND outcome = 'running'",
            (at, why, boot_id),
        )
        conn.execute("UPDATE caches SET in_use_by = NULL WHERE in_use_by = ?", (boot_id,))


DIED = "its lifecycle process ended without recording an outcome"


def dead_boots(ledger: Ledger, home: Home) -> list[str]:
    """Boots the ledger says run whose process died (the kernel drops a lock with its holder,
    SIGKILL included) before recording an outcome: nobody holds the boot's own lock (held from
    its intent to its outcome; a baked boot holds no cache) nor the lease of a cache it holds
    (all a boot recorded before boots had their own lock holds); their ids, oldest first."""
    holding: dict[str, list[str]] = {}
    for row in ledger.query("SELECT id, in_use_by FROM caches WHERE in_use_by IS NOT NULL"):
        holding.setdefault(row["in_use_by"], []).append(row["id"])
    running = ledger.query("SELECT id FROM boots WHERE outcome = 'running' ORDER BY id")
    return [
        row["id"]
        for row in running
        if not held(home.boot_lock(row["id"]))
        and not any(lease_held(home, cache_id) for cache_id in holding.get(row["id"], ()))
    ]


def settle_dead_boots(ledger: Ledger, home: Home, at: str) -> list[str]:
    """Each dead boot (`dead_boots`) ends as `interrupted` and lets its caches go; their ids.
    Its engine may still run: lifecycle.boot.engine.stop_orphans stops it first."""
    dead = dead_boots(ledger, home)
    for boot_id in dead:
        settle_dead_boot(ledger, home, boot_id, at)
    return dead


def settle_dead_boot(ledger: Ledger, home: Home, boot_id: str, at: str) -> None:
    """A dead boot `interrupted`, its caches let go, its lock file gone."""
    settle_boot(ledger, boot_id, at, DIED)
    home.boot_lock(boot_id).unlink(missing_ok=True)


def ended_boots(ledger: Ledger, boot_ids: Collection[str]) -> set[str]:
    """Those of `boot_ids` this ledger knows with an outcome: their engine is to have exited."""
    ids = sorted(boot_ids)
    marks = ", ".join("?" * len(ids))
    sql = f"SELECT id FROM boots WHERE outcome != 'running' AND id IN ({marks})"
    return {row["id"] for row in ledger.query(sql, tuple(ids))} if ids else set()


def tainted_files(ledger: Ledger, cache_id: str) -> list[TaintedFile]:
    """The cache's files known to hold a secret's value, by path."""
    sql = "SELECT * FROM tainted_files WHERE cache_id = ? ORDER BY path, secret"
    return ledger.records(TaintedFile, sql, (cache_id,))


def secret_names(ledger: Ledger) -> set[str]:
    """The names of the secrets boots on this host were passed (their values never stored)."""
    rows = ledger.query("SELECT DISTINCT secret_names FROM boots")
    return {name for row in rows for name in json.loads(row["secret_names"])}


def baked_uses(ledger: Ledger, boot_id: str | None = None) -> list[BakedUse]:
    """The baked caches of one boot (or of every boot), in the image's order."""
    if boot_id is None:
        return ledger.records(BakedUse, "SELECT * FROM baked_uses ORDER BY rowid")
    sql = "SELECT * FROM baked_uses WHERE boot_id = ? ORDER BY rowid"
    return ledger.records(BakedUse, sql, (boot_id,))


def untracked_writes(ledger: Ledger, boot_id: str | None = None) -> list[UntrackedWrite]:
    """JIT output written outside the tracked caches: of one boot, or of every boot."""
    if boot_id is None:
        return ledger.records(UntrackedWrite, "SELECT * FROM untracked_writes ORDER BY rowid")
    sql = "SELECT * FROM untracked_writes WHERE boot_id = ? ORDER BY path"
    return ledger.records(UntrackedWrite, sql, (boot_id,))


def hook_runs_of(ledger: Ledger, boot_id: str) -> list[HookRunRecord]:
    """The hook runs of one boot, in the order they ran."""
    sql = "SELECT * FROM hook_runs WHERE boot_id = ? ORDER BY rowid"
    return ledger.records(HookRunRecord, sql, (boot_id,))


def last_boot(ledger: Ledger, cache_id: str) -> BootRecord | None:
    """The newest boot that used the cache, or None."""
    sql = (
        "SELECT b.* FROM boots b JOIN boot_caches u ON u.boot_id = b.id WHERE u.cache_id = ?"
        " ORDER BY b.started_at DESC, b.rowid DESC LIMIT 1"
    )
    return ledger.record(BootRecord, sql, (cache_id,))


def boot_by_id(ledger: Ledger, boot_id: str) -> BootRecord | None:
    """One boot, or None."""
    return ledger.record(BootRecord, "SELECT * FROM boots WHERE id = ?", (boot_id,))


def boot_ids(ledger: Ledger) -> list[str]:
    """Every boot's id."""
    return [row["id"] for row in ledger.query("SELECT id FROM boots")]


@dataclass(frozen=True)
class Scanned:
    """What a cache holds as one scan saw it."""

    tree_digest: str
    files: int
    bytes: int
    scan_path: str
    scanned_at: str


def record_scan(
    ledger: Ledger,
    cache_id: str,
    scanned: Scanned,
    *,
    live: bool = False,
    new_row: CacheRecord | None = None,
    tainted: Sequence[TaintedFile] = (),
) -> None:
    """Record a cache's new scan (adding its row first when this host did not know it; making
    it live when it was restored, which also lifts a mark of damage: its tree was put back
    and verified) and the files it found holding a secret's value: one transaction."""
    with ledger.transaction() as conn:
        write_scan(conn, cache_id, scanned, live=live, new_row=new_row, tainted=tainted)


def write_scan(
    conn: sqlite3.Connection,
    cache_id: str,
    scanned: Scanned,
    *,
    live: bool = False,
    new_row: CacheRecord | None = None,
    tainted: Sequence[TaintedFile] = (),
) -> None:
    """`record_scan`'s writes, within a transaction the caller holds."""
    if new_row is not None:
        insert(conn, "caches", new_row)
    for found in tainted:
        insert(conn, "tainted_files", found, on_conflict="IGNORE")
    if live:
        conn.execute("DELETE FROM cache_damage WHERE cache_id = ?", (cache_id,))
    conn.execute(
        "UPDATE caches SET tree_digest = ?, files = ?, bytes = ?, scan_path = ?,"
        " scanned_at = ?, state = CASE WHEN ? THEN 'live' ELSE state END WHERE id = ?",
        (*astuple(scanned), live, cache_id),
    )
