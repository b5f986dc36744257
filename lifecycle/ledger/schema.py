"""The ledger's schema, as the list of migrations that build it."""

from __future__ import annotations


def _caches_table(name: str, states: str) -> str:
    """The caches table as migration 2 made it, and as migration 6 rebuilds it (named `name`,
    its state one of `states`): one text, so the two cannot drift apart."""
    return f"""CREATE TABLE {name} (
        id TEXT PRIMARY KEY,
        cache_key TEXT NOT NULL,
        cache_name TEXT NOT NULL,
        manifest_name TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        image_id TEXT NOT NULL,
        arch TEXT NOT NULL,
        host_path TEXT NOT NULL,
        container_path TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ({states})),
        in_use_by TEXT,
        created_at TEXT NOT NULL,
        tree_digest TEXT,
        files INTEGER,
        bytes INTEGER,
        scan_path TEXT,
        scanned_at TEXT
    );
"""


def _boots_table(name: str, outcomes: str) -> str:
    """The boots table as migration 2 made it, and as migration 7 rebuilds it (named `name`,
    its outcome one of `outcomes`)."""
    return f"""    CREATE TABLE {name} (
        id TEXT PRIMARY KEY,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        exit_code INTEGER,
        outcome TEXT NOT NULL
            CHECK (outcome IN ({outcomes})),
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
"""


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
    """
    + _caches_table("caches", "'live', 'archived', 'torn-down'")
    + """    CREATE INDEX caches_key ON caches (cache_key, state);
"""
    + _boots_table("boots", "'running', 'ok', 'failed', 'interrupted', 'aborted'")
    + """    CREATE TABLE boot_caches (
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
    # 3: archives (verified records in S3), GC roots, and the two-phase teardown journal.
    """
    CREATE TABLE archives (
        cache_id TEXT PRIMARY KEY REFERENCES caches (id),
        location TEXT NOT NULL,
        record_key TEXT NOT NULL,
        record_sha256 TEXT NOT NULL,
        with_content INTEGER NOT NULL,
        blobs INTEGER NOT NULL,
        bytes_uploaded INTEGER NOT NULL,
        archived_at TEXT NOT NULL,
        verified_at TEXT
    );
    CREATE TABLE pins (
        cache_id TEXT NOT NULL REFERENCES caches (id),
        reason TEXT NOT NULL,
        pinned_at TEXT NOT NULL,
        PRIMARY KEY (cache_id, reason)
    );
    CREATE TABLE teardown_steps (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        cache_id TEXT NOT NULL REFERENCES caches (id),
        step TEXT NOT NULL CHECK (step IN ('intent', 'verified', 'deleted', 'done', 'refused')),
        detail TEXT,
        bytes_freed INTEGER,
        at TEXT NOT NULL
    );
    """,
    # 4: results recorded against boots (instrumented copied from the boot, so a result says it
    # wherever it goes), and where each result's own record was archived.
    """
    CREATE TABLE results (
        id TEXT PRIMARY KEY,
        boot_id TEXT NOT NULL REFERENCES boots (id),
        name TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pass', 'fail', 'inconclusive')),
        metrics TEXT NOT NULL,
        note TEXT,
        source TEXT NOT NULL CHECK (source IN ('manual', 'acceptance')),
        instrumented INTEGER NOT NULL,
        document_sha256 TEXT,
        document_size INTEGER,
        document_path TEXT,
        created_at TEXT NOT NULL,
        digest TEXT NOT NULL,
        UNIQUE (boot_id, name)
    );
    CREATE TABLE result_archives (
        result_id TEXT NOT NULL REFERENCES results (id),
        location TEXT NOT NULL,
        record_key TEXT NOT NULL,
        record_sha256 TEXT NOT NULL,
        archived_at TEXT NOT NULL,
        PRIMARY KEY (result_id, location)
    );
    """,
    # 5: the md5 of blob contents this host has read, by sha256. A fact about bytes, not about a
    # cache: re-archiving a cache that shares most files with an archived one then re-reads
    # only the new files for the md5s its record lists (the ETags verification compares).
    """
    CREATE TABLE blob_md5s (
        sha256 TEXT PRIMARY KEY,
        md5 TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
    # 6: a cache whose dir vanished behind the ledger's back (removed by hand, a lost disk) is
    # `missing`, never `live`. SQLite cannot alter a CHECK: the table is rebuilt (the ledger
    # migrates with foreign keys off, as SQLite's own procedure for this asks). And the cache
    # files a boot wrote a secret's value into (by the secret's name): never archived.
    """
    """
    + _caches_table("caches_v6", "'live', 'archived', 'torn-down', 'missing'")
    + """    INSERT INTO caches_v6 SELECT * FROM caches;
    DROP TABLE caches;
    ALTER TABLE caches_v6 RENAME TO caches;
    CREATE INDEX caches_key ON caches (cache_key, state);
    CREATE TABLE tainted_files (
        cache_id TEXT NOT NULL REFERENCES caches (id),
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        secret TEXT NOT NULL,
        boot_id TEXT NOT NULL REFERENCES boots (id),
        PRIMARY KEY (cache_id, path, sha256, secret)
    );
    """,
    # 7: a boot stopped at its --timeout is `timeout`, not `failed` (the boots table rebuilt, as
    # 6 did the caches'); each cache use counts dirs apart from files and keeps its verdict
    # (cold-compiled, warm-hit, mounted-but-missed, unused, empty); and the JIT output a boot
    # wrote outside its tracked caches, found in the container's own changes.
    """
    """
    + _boots_table("boots_v7", "'running', 'ok', 'failed', 'interrupted', 'aborted', 'timeout'")
    + """    INSERT INTO boots_v7 SELECT * FROM boots;
    DROP TABLE boots;
    ALTER TABLE boots_v7 RENAME TO boots;
    ALTER TABLE boot_caches ADD COLUMN dirs_added INTEGER;
    ALTER TABLE boot_caches ADD COLUMN verdict TEXT;
    CREATE TABLE untracked_writes (
        boot_id TEXT NOT NULL REFERENCES boots (id),
        path TEXT NOT NULL,
        change TEXT NOT NULL CHECK (change IN ('added', 'changed')),
        bytes INTEGER,
        PRIMARY KEY (boot_id, path)
    );
    """,
    # 8: acceptance nights (and tuning ladders, a night of rungs): the plan each ran, the
    # journal of its cell runs (`started`, then `done` with the run's summary), its events
    # (production down and up, end actions) and the predictions it registered before any
    # run. Rows are only ever added: a night's record is its journal. A run's boot is not a
    # foreign key, since a cell may run on another host's engine and ledger.
    """
    CREATE TABLE nights (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('night', 'tune')),
        plan_name TEXT NOT NULL,
        plan_file TEXT NOT NULL,
        plan_digest TEXT NOT NULL,
        plan TEXT NOT NULL,
        project TEXT NOT NULL,
        host TEXT NOT NULL,
        started_at TEXT NOT NULL
    );
    CREATE TABLE night_runs (
        id INTEGER PRIMARY KEY,
        night_id TEXT NOT NULL REFERENCES nights (id),
        cell TEXT NOT NULL,
        run INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        step TEXT NOT NULL CHECK (step IN ('started', 'done')),
        boot_id TEXT,
        verdict TEXT CHECK (verdict IN ('pass', 'fail', 'inconclusive')),
        summary TEXT,
        at TEXT NOT NULL
    );
    CREATE INDEX night_runs_cell ON night_runs (night_id, cell, attempt, run);
    CREATE TABLE night_events (
        id INTEGER PRIMARY KEY,
        night_id TEXT NOT NULL REFERENCES nights (id),
        event TEXT NOT NULL,
        detail TEXT,
        at TEXT NOT NULL
    );
    CREATE TABLE predictions (
        night_id TEXT NOT NULL REFERENCES nights (id),
        pin TEXT NOT NULL,
        argument TEXT NOT NULL,
        rung REAL NOT NULL,
        margin_mib REAL NOT NULL,
        registered_at TEXT NOT NULL,
        PRIMARY KEY (night_id, pin, argument, rung)
    );
    """,
    # 9: many hosts on one archive. Every archived state of a cache is its own immutable record
    # (a version, by tree digest, with the version it grew from), each boot and each result
    # too; `archives` keeps pointing at the newest version this host wrote (tree_digest NULL:
    # a record of the previous, one-per-cache format). Builds record their base image's
    # digest; images pushed and pulled by digest; and the journal of `gc --remote`.
    """
    ALTER TABLE archives ADD COLUMN tree_digest TEXT;
    CREATE TABLE cache_versions (
        cache_id TEXT NOT NULL REFERENCES caches (id),
        tree_digest TEXT NOT NULL,
        location TEXT NOT NULL,
        record_key TEXT NOT NULL,
        record_sha256 TEXT NOT NULL,
        with_content INTEGER NOT NULL,
        parent TEXT,
        archived_at TEXT NOT NULL,
        PRIMARY KEY (location, record_key)
    );
    CREATE TABLE boot_archives (
        boot_id TEXT NOT NULL REFERENCES boots (id),
        location TEXT NOT NULL,
        record_key TEXT NOT NULL,
        record_sha256 TEXT NOT NULL,
        archived_at TEXT NOT NULL,
        PRIMARY KEY (boot_id, location)
    );
    CREATE INDEX cache_versions_tree ON cache_versions (cache_id, tree_digest);
    ALTER TABLE builds ADD COLUMN base_digest TEXT;
    CREATE TABLE registry_images (
        image_id TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        reference TEXT NOT NULL,
        how TEXT NOT NULL CHECK (how IN ('pushed', 'pulled')),
        at TEXT NOT NULL,
        PRIMARY KEY (image_id, reference, how)
    );
    CREATE TABLE gc_runs (
        run_id TEXT PRIMARY KEY,
        location TEXT NOT NULL,
        started_at TEXT NOT NULL,
        policy TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE TABLE gc_objects (
        run_id TEXT NOT NULL REFERENCES gc_runs (run_id),
        key TEXT NOT NULL,
        phase INTEGER NOT NULL,
        size INTEGER NOT NULL,
        removed_at TEXT,
        spared TEXT,
        PRIMARY KEY (run_id, key)
    );
    """,
    # 10: md5s are no longer kept: a single blob is verified by the ChecksumSHA256 its PUT
    # stored, a cache's small files by their pack's, and an upload hashes nothing again.
    "DROP TABLE blob_md5s;",
    # 11: how many of a cache's files the engine read during a boot (opened and left as they
    # were, seen by inotify; NULL where not observed), and caches found changed behind
    # lifecycle's back before a boot would have mounted them (never reused warm again, until a
    # later scan records the tree they hold).
    """
    ALTER TABLE boot_caches ADD COLUMN files_read INTEGER;
    CREATE TABLE cache_damage (
        cache_id TEXT NOT NULL REFERENCES caches (id),
        found_at TEXT NOT NULL,
        found_by TEXT NOT NULL,
        tree_digest TEXT NOT NULL,
        paths TEXT NOT NULL,
        PRIMARY KEY (cache_id, found_at, found_by)
    );
    """,
    # 12: engine images with verified warm caches baked in (lifecycle bake): the caches as a
    # JSON list of {name, path, cache_id, tree_digest, boot_id, record: {location, key,
    # sha256}}, the same list the image's own label carries; and how a boot of a baked image
    # used each cache in its layers (no cache row here: the cache it was baked from may be
    # another host's, and nothing of this host's disk is it).
    """
    CREATE TABLE bakes (
        image_id TEXT PRIMARY KEY,
        tag TEXT NOT NULL,
        manifest_name TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        engine_image_id TEXT NOT NULL,
        profile TEXT NOT NULL,
        arch TEXT NOT NULL,
        caches TEXT NOT NULL,
        baked_at TEXT NOT NULL
    );
    CREATE TABLE baked_uses (
        boot_id TEXT NOT NULL REFERENCES boots (id),
        cache_name TEXT NOT NULL,
        cache_id TEXT NOT NULL,
        tree_digest TEXT NOT NULL,
        verdict TEXT,
        files_read INTEGER,
        files_written INTEGER,
        PRIMARY KEY (boot_id, cache_name)
    );
    """,
    # 13: the boots that used a cache, found by the cache: which boot last used each live
    # cache is asked per cache by `caches`, `status` and `plan`, and by each boot of its key;
    # without it each asks the whole table (505 live caches, 16,016 uses: 0.62 s -> 0.007 s).
    "CREATE INDEX boot_caches_by_cache ON boot_caches (cache_id);",
    # 14: a cache file holding a secret's value found by an archive's scan, outside any boot (a
    # file put there by hand): tainted as a boot's find is, by no boot (the table rebuilt, as 6
    # did the caches', for its boot to be NULL).
    """
    CREATE TABLE tainted_files_v14 (
        cache_id TEXT NOT NULL REFERENCES caches (id),
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        secret TEXT NOT NULL,
        boot_id TEXT REFERENCES boots (id),
        PRIMARY KEY (cache_id, path, sha256, secret)
    );
    INSERT INTO tainted_files_v14 SELECT * FROM tainted_files;
    DROP TABLE tainted_files;
    ALTER TABLE tainted_files_v14 RENAME TO tainted_files;
    """,
    # 15: a build is recorded `running` before dockerd is asked, so that one whose process was
    # killed is `interrupted` (settled by the next build), not missing (the table rebuilt, as 6
    # did the caches').
    """
    CREATE TABLE builds_v15 (
        id INTEGER PRIMARY KEY,
        started_at TEXT NOT NULL,
        duration_s REAL NOT NULL,
        manifest_name TEXT NOT NULL,
        manifest_file TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        tag TEXT NOT NULL,
        image_id TEXT,
        outcome TEXT NOT NULL
            CHECK (outcome IN ('running', 'built', 'up-to-date', 'failed', 'interrupted')),
        error TEXT,
        log_path TEXT,
        base_digest TEXT
    );
    INSERT INTO builds_v15 SELECT * FROM builds;
    DROP TABLE builds;
    ALTER TABLE builds_v15 RENAME TO builds;
    CREATE INDEX builds_digest ON builds (manifest_digest);
    """,
    # 16: a bake's attempt (its bake, but for the image id dockerd has not given yet), recorded
    # before dockerd is asked and ended once the bake is recorded or refused: one whose lock
    # nobody holds is a bake whose process died, its image perhaps finished by dockerd
    # (lifecycle.bake.image.settle_killed_bakes).
    """
    CREATE TABLE bake_attempts (
        id INTEGER PRIMARY KEY,
        tag TEXT NOT NULL,
        manifest_name TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        engine_image_id TEXT NOT NULL,
        profile TEXT NOT NULL,
        arch TEXT NOT NULL,
        caches TEXT NOT NULL,
        baked_at TEXT NOT NULL
    );
    """,
    # 17: the packs this host knows hold, wherever their index places a blob, that blob's
    # bytes: written here, or every blob of their index hashed here. A pack is named by the
    # sha256 of its bytes, so that holds for ever, at any location: an archive hashes each
    # pack another host wrote once, not on every archive that relies on it.
    """
    CREATE TABLE honest_packs (
        sha256 TEXT PRIMARY KEY,
        known_by TEXT NOT NULL CHECK (known_by IN ('written', 'hashed')),
        known_at TEXT NOT NULL
    );
    """,
    # 18: the MCV images of a bake (`bake --format mcv`), one per cache MCV has a layout for:
    # each goes with the bake it was made with (teardown --images, apply), recorded when it went.
    """
    CREATE TABLE mcv_images (
        image_id TEXT PRIMARY KEY,
        bake_image_id TEXT NOT NULL,
        cache_name TEXT NOT NULL,
        tag TEXT NOT NULL,
        removed_at TEXT
    );
    """,
    # 19: the index of each pack this host knows honest (honest_packs), as its text, so an
    # archive reads it from here and not from the pack's tail on every run; and the locations
    # whose listing last showed each such pack, so an index goes once no location holds its
    # pack (a `gc --remote` collected it). A pack never changes: its index is kept whole.
    """
    CREATE TABLE pack_indexes (
        sha256 TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        body BLOB NOT NULL
    );
    CREATE TABLE packs_seen (
        location TEXT NOT NULL,
        sha256 TEXT NOT NULL REFERENCES pack_indexes (sha256),
        PRIMARY KEY (location, sha256)
    ) WITHOUT ROWID;
    CREATE INDEX packs_seen_by_pack ON packs_seen (sha256);
    """,
    # 20: when a teardown (or apply) removed a bake's image, as 18 records its MCV images': a
    # bake's row is its provenance, kept after its image went (results and boots name it), so
    # the row stays and says the image went. NULL: no teardown recorded removing it (one
    # before this migration may have).
    "ALTER TABLE bakes ADD COLUMN removed_at TEXT;",
    # 21: when a teardown (or apply) removed the image a build made (or found up to date), as 20
    # records a bake's: every build row of that image says it went (a build of the same image
    # again is a row of its own, there until removed). NULL: no removal recorded; a pulled
    # image only a `registry_images` row names is another home's build, never removed here.
    "ALTER TABLE builds ADD COLUMN removed_at TEXT;",
    # 22: what a home a year of nights old asks by a column it had no index on
    # (bench/ledger_scale.py): the end of every boot frees the caches it held (`WHERE
    # in_use_by = ?`, a scan of every cache the home ever had: 4 ms at 18,000, growing with
    # each night), and teardown's plan reads the journal of the caches still here (12 ms at
    # 72,000 steps). Only the few caches held at a time are in the first index.
    """
    CREATE INDEX caches_in_use ON caches (in_use_by) WHERE in_use_by IS NOT NULL;
    CREATE INDEX teardown_steps_by_cache ON teardown_steps (cache_id, id);
    """,
)
