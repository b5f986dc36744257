"""The ledger's schema, as the list of migrations that build it."""

from __future__ import annotations

# Each entry moves the schema from version N to N+1; never edit one that has shipped.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE builds (
        id INTEGER PRIMARY KEY,
        started_at TEXT NOT NULL,
        duration_s REAL NOT NULL,
        manifest_name TEXT NOT NULL,
        manifest_file TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        tag TEXT NOT NULL,
        image_id TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('built', 'up-to-date', 'failed')),
        error TEXT,
        log_path TEXT
    );
    CREATE INDEX builds_digest ON builds (manifest_digest);
    """,
    # 2: boot caches, boots, which boot used which cache (cold or warm), hook runs.
    """
    CREATE TABLE caches (
        id TEXT PRIMARY KEY,
        cache_key TEXT NOT NULL,
        cache_name TEXT NOT NULL,
        manifest_name TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        image_id TEXT NOT NULL,
        arch TEXT NOT NULL,
        host_path TEXT NOT NULL,
        container_path TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('live', 'archived', 'torn-down')),
        in_use_by TEXT,
        created_at TEXT NOT NULL,
        tree_digest TEXT,
        files INTEGER,
        bytes INTEGER,
        scan_path TEXT,
        scanned_at TEXT
    );
    CREATE INDEX caches_key ON caches (cache_key, state);
    CREATE TABLE boots (
        id TEXT PRIMARY KEY,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        exit_code INTEGER,
        outcome TEXT NOT NULL
            CHECK (outcome IN ('running', 'ok', 'failed', 'interrupted', 'aborted')),
        error TEXT,
        host TEXT NOT NULL,
        profile TEXT NOT NULL,
        manifest_name TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        image_id TEXT NOT NULL,
        image_tag TEXT NOT NULL,
        container_id TEXT,
        hooks TEXT NOT NULL,
        instrumented INTEGER NOT NULL,
        secret_names TEXT NOT NULL,
        log_path TEXT,
        evidence_path TEXT
    );
    CREATE TABLE boot_caches (
        boot_id TEXT NOT NULL REFERENCES boots (id),
        cache_id TEXT NOT NULL REFERENCES caches (id),
        mode TEXT NOT NULL CHECK (mode IN ('cold', 'warm')),
        tree_digest_before TEXT,
        tree_digest_after TEXT,
        files_added INTEGER,
        files_changed INTEGER,
        files_removed INTEGER,
        PRIMARY KEY (boot_id, cache_id)
    );
    CREATE TABLE hook_runs (
        boot_id TEXT NOT NULL REFERENCES boots (id),
        name TEXT NOT NULL,
        event TEXT NOT NULL,
        exit_code INTEGER,
        duration_s REAL NOT NULL
    );
    """,
)
