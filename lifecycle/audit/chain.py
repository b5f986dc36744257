"""The audit chain, built the same way whatever it is read from (the ledger, or S3 alone).

result -> boot (when, where, profile, hooks, instrumented) -> each cache (cold/warm, tree
digest, archive location) -> image (digest, labels) -> manifest (digest, pins, tuned values
with status) -> patches (sha256 each).

Both sources reduce to the same facts (`ChainFacts`, `CacheAuditFacts`): rows as the ledger
keeps them and as the archive records copied them. Only facts that do not change once a boot
is over enter the chain (a cache's current state or last scan do not), so a chain read from
S3 after teardown is the chain the ledger gave before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CHAIN_FORMAT = "lifecycle-audit-chain/1"
CACHE_FORMAT = "lifecycle-audit-cache/1"


@dataclass(frozen=True)
class CacheFacts:
    """One cache as one boot used it."""

    row: dict[str, Any]  # the cache's row (less this host's bookkeeping)
    use: dict[str, Any]  # the boot's use of it: mode, tree digests before and after
    archive: dict[str, Any] | None  # {location, record, record_sha256, with_content}


@dataclass(frozen=True)
class ChainFacts:
    """Everything a result's chain is made of."""

    result: dict[str, Any]  # the canonical result
    digest: str  # sha256 of its canonical JSON
    boot: dict[str, Any]  # the boot's row
    hook_runs: list[dict[str, Any]]
    log: dict[str, Any] | None  # {sha256, size} of the boot's (redacted) log
    caches: list[CacheFacts]
    image: dict[str, Any] | None  # snapshot: {id, tags, labels}
    manifest: dict[str, Any] | None  # snapshot: {digest, file, canonical, patches}


@dataclass(frozen=True)
class CacheAuditFacts:
    """A cache, every boot that used it and every result that stands on it."""

    row: dict[str, Any]
    state: str | None  # live / archived / torn-down; None when read from S3
    archive: dict[str, Any] | None
    boots: list[tuple[dict[str, Any], dict[str, Any]]]  # (boot row, its use of the cache)
    results: list[dict[str, Any]]  # canonical results, each with its digest


def build_chain(facts: ChainFacts) -> dict[str, Any]:
    """The chain of one result, as `audit result --json` prints it."""
    boot = facts.boot
    return {
        "format": CHAIN_FORMAT,
        "result": _result(facts.result, facts.digest),
        "boot": {
            **_boot(boot),
            "hook_runs": [
                {"name": run["name"], "event": run["event"], "exit_code": run["exit_code"]}
                for run in facts.hook_runs
            ],
            "image_tag": boot["image_tag"],
            "container_id": boot["container_id"],
            "secret_names": json.loads(boot["secret_names"]),
            "error": boot["error"],
            "log": facts.log,
        },
        "caches": [
            _cache(c)
            for c in sorted(facts.caches, key=lambda c: (c.row["cache_name"], c.row["id"]))
        ],
        "image": _image(facts.image, boot["image_id"]),
        **_manifest(facts.manifest, boot["manifest_name"], boot["manifest_digest"]),
    }


def build_cache_audit(facts: CacheAuditFacts) -> dict[str, Any]:
    """What `audit cache --json` prints: the cache, the boots that used it, its results."""
    row = facts.row
    boots = sorted(facts.boots, key=lambda pair: (pair[0]["started_at"], pair[0]["id"]))
    return {
        "format": CACHE_FORMAT,
        "cache": {
            **{k: row.get(k) for k in ("id", "cache_name", "manifest_name", "manifest_digest")},
            **{k: row.get(k) for k in ("image_id", "arch", "host_path", "container_path")},
            **{k: row.get(k) for k in ("created_at", "tree_digest", "files", "bytes")},
            "state": facts.state,
        },
        "archive": facts.archive,
        "boots": [
            {
                **_boot(boot),
                "mode": use["mode"],
                "tree_digest_before": use["tree_digest_before"],
                "tree_digest_after": use["tree_digest_after"],
            }
            for boot, use in boots
        ],
        "results": [
            {
                k: result[k]
                for k in ("id", "name", "status", "boot_id", "instrumented", "created_at")
            }
            | {"metrics": _sorted(result["metrics"]), "digest": result["digest"]}
            for result in sorted(facts.results, key=lambda r: (r["created_at"], r["id"]))
        ],
    }


def _result(result: dict[str, Any], digest: str) -> dict[str, Any]:
    # Keys in one order whatever the source: the ledger builds the dict, a record sorts it.
    keys = ("id", "name", "status", "boot_id", "metrics", "note", "source", "instrumented")
    return {
        **{key: result[key] for key in keys},
        "metrics": _sorted(result["metrics"]),
        "document": _sorted(result["document"]),
        "created_at": result["created_at"],
        "digest": digest,
    }


def _sorted(data: Any) -> Any:
    """Mappings with their keys sorted, at every depth (lists keep their order)."""
    if isinstance(data, dict):
        return {key: _sorted(data[key]) for key in sorted(data)}
    if isinstance(data, list):
        return [_sorted(item) for item in data]
    return data


def _boot(boot: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": boot["id"],
        "started_at": boot["started_at"],
        "ended_at": boot["ended_at"],
        "host": boot["host"],
        "profile": boot["profile"],
        "outcome": boot["outcome"],
        "exit_code": boot["exit_code"],
        "hooks": json.loads(boot["hooks"]),
        "instrumented": bool(boot["instrumented"]),
    }


def _cache(cache: CacheFacts) -> dict[str, Any]:
    row, use = cache.row, cache.use
    return {
        "id": row["id"],
        "name": row["cache_name"],
        "mode": use["mode"],
        "tree_digest": use["tree_digest_after"],  # what the cache held when the boot ended
        "tree_digest_before": use["tree_digest_before"],  # warm: what the boot started from
        "files_added": use["files_added"],
        "files_changed": use["files_changed"],
        "files_removed": use["files_removed"],
        "arch": row["arch"],
        "host_path": row["host_path"],
        "container_path": row["container_path"],
        "archive": cache.archive,
    }


def _image(snapshot: dict[str, Any] | None, image_id: str) -> dict[str, Any]:
    if snapshot is None:  # the boot kept no snapshot: only the id is known
        return {"id": image_id, "tags": None, "labels": None}
    return {"id": snapshot["id"], "tags": snapshot["tags"], "labels": _sorted(snapshot["labels"])}


def _manifest(snapshot: dict[str, Any] | None, name: str, digest: str) -> dict[str, Any]:
    """The `manifest` and `patches` steps of the chain."""
    canonical = (snapshot or {}).get("canonical") or {}
    tuned = canonical.get("tuned") or {}
    manifest = {
        "name": name,
        "digest": digest,
        "file": (snapshot or {}).get("file"),
        "pins": _sorted(canonical.get("engine")),
        "tuned": _sorted(tuned),
        # Carried values were measured on another release: flagged wherever they are shown.
        "not_revalidated": sorted(k for k, v in tuned.items() if v.get("status") != "validated"),
    }
    patches = [
        {"file": patch["file"], "sha256": patch["sha256"]}
        for patch in (snapshot or {}).get("patches", [])
    ]
    return {"manifest": manifest, "patches": patches if snapshot is not None else None}
