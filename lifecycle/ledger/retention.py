"""What the retention policy (lifecycle.policy) is evaluated on, and what a saved plan is
bound to, read from the ledger."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from lifecycle.ledger.core import Ledger


@dataclass(frozen=True)
class CacheOnHost:
    """A cache still on this host (live or archived), with its newest boot."""

    seq: int  # the order caches were recorded in
    id: str
    manifest_name: str
    manifest_digest: str
    cache_name: str
    created_at: str
    profile: str | None  # of its newest boot; None if none
    started_at: str | None
    outcome: str  # of its newest boot ('ok' if none)
    manifest_file: str | None  # of the newest build of its manifest digest
    archived: bool  # an archive of it is recorded here


_ON_HOST = """
SELECT c.rowid AS seq, c.id, c.manifest_name, c.manifest_digest, c.cache_name, c.created_at,
       b.profile, b.started_at, COALESCE(b.outcome, 'ok') AS outcome,
       (SELECT manifest_file FROM builds WHERE manifest_digest = c.manifest_digest
        ORDER BY started_at DESC LIMIT 1) AS manifest_file,
       EXISTS (SELECT 1 FROM archives a WHERE a.cache_id = c.id) AS archived
FROM caches c
LEFT JOIN boots b ON b.id = (
    SELECT u.boot_id FROM boot_caches u JOIN boots bb ON bb.id = u.boot_id
    WHERE u.cache_id = c.id ORDER BY bb.started_at DESC, bb.rowid DESC LIMIT 1)
WHERE c.state IN ('live', 'archived')
ORDER BY c.rowid
"""


def caches_on_host(ledger: Ledger) -> list[CacheOnHost]:
    """Every cache not torn down, oldest first."""
    return [
        CacheOnHost(**(dict(row) | {"archived": bool(row["archived"])}))
        for row in ledger.query(_ON_HOST)
    ]


def releases_built(ledger: Ledger) -> list[tuple[str, str, str, str]]:
    """(manifest name, manifest file, manifest digest, image id) of each image built here
    (an interrupted build's, dockerd finished, too), newest first."""
    rows = ledger.query(
        "SELECT manifest_name, manifest_file, manifest_digest, image_id, MAX(started_at) AS at"
        " FROM builds WHERE image_id IS NOT NULL"
        " AND outcome IN ('built', 'up-to-date', 'interrupted')"
        " GROUP BY manifest_name, manifest_digest, image_id ORDER BY at DESC"
    )
    return [
        (r["manifest_name"], r["manifest_file"], r["manifest_digest"], r["image_id"]) for r in rows
    ]


# What a saved plan is bound to: every row the plan reads (the policy's facts, teardown's
# decision, which images go), so that a change to any of them moves the digest. Caches,
# boots, pins, archives (of caches, boots and results), results, files holding a secret;
# each build's, bake's and MCV image's image and whether a teardown (or apply) removed it.
_STATE = (
    "SELECT id, state, in_use_by, tree_digest FROM caches ORDER BY id",
    "SELECT cache_id, location, record_key, with_content, tree_digest FROM archives"
    " ORDER BY cache_id",
    "SELECT cache_id, reason FROM pins ORDER BY cache_id, reason",
    "SELECT id, outcome FROM boots ORDER BY id",
    "SELECT boot_id, location, record_key FROM boot_archives ORDER BY boot_id, location",
    "SELECT id, boot_id FROM results ORDER BY id",
    "SELECT result_id, location, record_key FROM result_archives ORDER BY result_id, location",
    "SELECT cache_id, path, sha256, secret FROM tainted_files ORDER BY 1, 2, 3, 4",
    # Only ever appended to: its length says whether a teardown wrote since.
    "SELECT COUNT(*), MAX(id) FROM teardown_steps",
    "SELECT manifest_digest, image_id, outcome, removed_at FROM builds ORDER BY rowid",
    "SELECT image_id, engine_image_id, removed_at FROM bakes ORDER BY image_id",
    "SELECT image_id, bake_image_id, removed_at FROM mcv_images ORDER BY image_id",
)


def state_digest(ledger: Ledger) -> str:
    """A digest of what the ledger says that a retention plan depends on."""
    rows = [[list(row) for row in ledger.query(sql)] for sql in _STATE]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
