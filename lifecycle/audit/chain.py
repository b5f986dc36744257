"""The audit chain, built the same way whatever it is read from (the ledger, or S3 alone).

result -> boot -> caches -> image -> manifest -> patches (docs/verbs/audit.md). Both sources
reduce to the same facts; only facts that do not change once a boot is over enter the chain (not
a cache's current state or last scan), so a chain read from S3 after teardown is the chain the
ledger gave before it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from lifecycle.ledger.boots import BootRecord, CacheRow, CacheUse
from lifecycle.records import FileBlob, HookRun, ImageSnapshot, ManifestSnapshot

CHAIN_FORMAT = "lifecycle-audit-chain/1"
CACHE_FORMAT = "lifecycle-audit-cache/1"
COLLECTED_FORMAT = "lifecycle-audit-collected/1"
Json = Any  # values as JSON has them (metrics, labels, the canonical manifest's parts)


class ArchiveFacts(TypedDict):
    """Where a cache's record is, and which version of the cache it holds."""

    location: str
    record: str  # s3://bucket/key
    record_sha256: str
    with_content: bool
    tree_digest: str | None  # the version's tree (None: a previous-format record, unread)
    parent: str | None  # the tree that version grew from


@dataclass(frozen=True)
class CacheFacts:
    """One cache as one boot used it."""

    row: CacheRow  # the cache's row (less this host's bookkeeping)
    use: CacheUse  # the boot's use of it: mode, tree digests before and after
    archive: ArchiveFacts | None


@dataclass(frozen=True)
class ChainFacts:
    """Everything a result's chain is made of."""

    result: dict[str, Json]  # the canonical result
    digest: str  # sha256 of its canonical JSON
    boot: BootRecord
    hook_runs: list[HookRun]
    log: FileBlob | None  # the boot's (redacted) log
    caches: list[CacheFacts]
    image: ImageSnapshot | None
    manifest: ManifestSnapshot | None
    # A pushed bake's in-toto Statement (lifecycle.bake.provenance), as recorded with the push
    provenance: dict[str, Json] | None = None
    left_out: tuple[str, ...] = ()  # records of the archive that could not be read, each a line


@dataclass(frozen=True)
class CacheAuditFacts:
    """A cache, its archived versions, every boot that used it and every result on it."""

    row: CacheRow
    state: str | None  # live / archived / torn-down; None when read from S3
    archive: ArchiveFacts | None  # its newest version
    boots: list[tuple[BootRecord, CacheUse]]
    results: list[dict[str, Json]]  # canonical results, each with its digest
    versions: list[ArchiveFacts]  # every archived version, oldest first
    # Records of the archive that could not be read (s3:// URL -> why): left out of the above
    unreadable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Collected:
    """A target none of whose records the archive holds, as gc's records there say a gc
    removed them by rule: the chain ends there (what `verify` calls collected)."""

    target: str
    kind: str  # result | cache
    records: dict[str, str]  # s3:// URL of each record -> `collected by gc g-… on HOST …`


# `lifecycle-audit-chain/1` (`audit result --json`) and `lifecycle-audit-cache/1` (`audit cache
# --json`): their keys are the ones build_chain and build_cache_audit write, in that order.
Chain = dict[str, Json]
CacheAudit = dict[str, Json]


def build_chain(facts: ChainFacts) -> Chain:
    """The chain of one result, as `audit result --json` prints it."""
    boot = facts.boot
    caches = sorted(facts.caches, key=lambda c: (c.row.cache_name, c.row.id))
    return {
        "format": CHAIN_FORMAT,
        "result": _result(facts.result, facts.digest),
        "boot": {
            **_boot(boot),
            "hook_runs": [
                {"name": run.name, "event": run.event, "exit_code": run.exit_code}
                for run in facts.hook_runs
            ],
            "image_tag": boot.image_tag,
            "container_id": boot.container_id,
            "secret_names": json.loads(boot.secret_names),
            "error": boot.error,
            "log": facts.log.model_dump() if facts.log else None,
        },
        "caches": [_cache(c) for c in caches],
        "image": _image(facts.image, boot.image_id)
        | ({"provenance": facts.provenance} if facts.provenance else {}),
        "manifest": _manifest(facts.manifest, boot.manifest_name, boot.manifest_digest),
        "patches": (
            [{"file": p.file, "sha256": p.sha256} for p in facts.manifest.patches]
            if facts.manifest
            else None
        ),
        # A tree behind the result that the archive cannot give back; a record left out.
        "warnings": [w for c in caches if (w := _not_restorable(c))] + list(facts.left_out),
    }


def _not_restorable(cache: CacheFacts) -> str | None:
    """Why the tree a result stood on cannot be had back from the archive, or None."""
    stood_on, archive = cache.use.tree_digest_after, cache.archive
    if stood_on is None or (archive is not None and archive["tree_digest"] == stood_on):
        return None
    if archive is not None and archive["tree_digest"] is None:
        return (
            f"cache {cache.row.id}: archived in the previous format, one record per cache that"
            " a later archive rewrites: the tree this result stood on may not be restorable"
        )
    held = f"; its record there holds {str(archive['tree_digest'])[:12]}" if archive else ""
    return (
        f"cache {cache.row.id}: the tree this result stood on ({stood_on[:12]}) is not"
        f" archived{held}; it cannot be restored"
    )


def build_cache_audit(facts: CacheAuditFacts) -> CacheAudit:
    """What `audit cache --json` prints: the cache, the boots that used it, its results."""
    row = facts.row
    boots = sorted(facts.boots, key=lambda pair: (pair[0].started_at, pair[0].id))
    shown = (
        *("id", "cache_name", "manifest_name", "manifest_digest", "image_id", "arch"),
        *("host_path", "container_path", "created_at", "tree_digest", "files", "bytes"),
    )
    return {
        "format": CACHE_FORMAT,
        "cache": {**{k: getattr(row, k) for k in shown}, "state": facts.state},
        "archive": facts.archive,
        "versions": facts.versions,
        "boots": [
            {
                **_boot(boot),
                "mode": use.mode,
                "tree_digest_before": use.tree_digest_before,
                "tree_digest_after": use.tree_digest_after,
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
    } | ({"unreadable": dict(facts.unreadable)} if facts.unreadable else {})


def _result(result: dict[str, Json], digest: str) -> dict[str, Json]:
    # Keys in one order whatever the source: the ledger builds the dict, a record sorts it.
    keys = ("id", "name", "status", "boot_id", "metrics", "note", "source", "instrumented")
    return {
        **{key: result[key] for key in keys},
        "metrics": _sorted(result["metrics"]),
        "document": _sorted(result["document"]),
        "created_at": result["created_at"],
        "digest": digest,
    }


def _sorted(data: Json) -> Json:
    """Mappings with their keys sorted, at every depth (lists keep their order)."""
    if isinstance(data, dict):
        return {key: _sorted(data[key]) for key in sorted(data)}
    if isinstance(data, list):
        return [_sorted(item) for item in data]
    return data


def _boot(boot: BootRecord) -> dict[str, Json]:
    return {
        "id": boot.id,
        "started_at": boot.started_at,
        "ended_at": boot.ended_at,
        "host": boot.host,
        "profile": boot.profile,
        "outcome": boot.outcome,
        "exit_code": boot.exit_code,
        "hooks": json.loads(boot.hooks),
        "instrumented": bool(boot.instrumented),
    }


def _cache(cache: CacheFacts) -> dict[str, Json]:
    row, use = cache.row, cache.use
    return {
        "id": row.id,
        "name": row.cache_name,
        "mode": use.mode,
        "tree_digest": use.tree_digest_after,  # what the cache held when the boot ended
        "tree_digest_before": use.tree_digest_before,  # warm: what the boot started from
        "files_added": use.files_added,
        "files_changed": use.files_changed,
        "files_removed": use.files_removed,
        "arch": row.arch,
        "host_path": row.host_path,
        "container_path": row.container_path,
        "archive": cache.archive,
    }


def _image(snapshot: ImageSnapshot | None, image_id: str) -> dict[str, Json]:
    if snapshot is None:  # the boot kept no snapshot: only the id is known
        return {"id": image_id, "tags": None, "labels": None, "repo_digests": []}
    return {
        "id": snapshot.id,
        "tags": list(snapshot.tags),
        "labels": _sorted(snapshot.labels),
        "repo_digests": sorted(snapshot.repo_digests),  # REGISTRY/REPO@sha256:… pushed or pulled
    }


def _manifest(snapshot: ManifestSnapshot | None, name: str, digest: str) -> dict[str, Json]:
    """The `manifest` step of the chain."""
    canonical = snapshot.canonical if snapshot else {}
    tuned = canonical.get("tuned") or {}
    return {
        "name": name,
        "digest": digest,
        "file": snapshot.file if snapshot else None,
        "pins": _sorted(canonical.get("engine")),
        "tuned": _sorted(tuned),
        # Carried values were measured on another release: flagged wherever they are shown.
        "not_revalidated": sorted(k for k, v in tuned.items() if v.get("status") != "validated"),
    }
