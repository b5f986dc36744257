"""A boot's record (`lifecycle-boot-record/1`, lifecycle.records.BootRecordV1): one boot, written
once, after it ended.

Nothing here reads the environment: secrets appear only as the names the boot row lists,
and the log and evidence were redacted when the boot kept them.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from lifecycle.archive.sources import (
    BlobSource,
    RecordPlan,
    file_blob,
    read_snapshot,
    regular_files,
)
from lifecycle.archive.store import ArchiveError
from lifecycle.formats import BOOT_FORMAT
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord, cache_by_id, cache_uses, hook_runs_of
from lifecycle.ledger.builds import registry_images


def plan_boot_record(
    ledger: Ledger, home: Home, boot: BootRecord, *, host: str, tool_version: str
) -> RecordPlan:
    """Collect what the record says about a finished boot, and its blobs."""
    sources: dict[str, BlobSource] = {}
    uses = cache_uses(ledger, boot_id=boot.id)
    caches = [c for u in uses if (c := cache_by_id(ledger, u.cache_id)) is not None]
    evidence: dict[str, Any] = {}
    if boot.evidence_path and Path(boot.evidence_path).is_dir():
        top = Path(boot.evidence_path)
        for path in sorted(regular_files(top)):
            what = f"evidence of boot {boot.id}"
            evidence[path.relative_to(top).as_posix()] = file_blob(path, what, sources)
    manifest = read_snapshot(home.manifest_snapshot(boot.manifest_digest))
    document: dict[str, Any] = {
        "format": BOOT_FORMAT,
        "boot_id": boot.id,
        "boot": asdict(boot),
        "arch": ", ".join(sorted({c.arch for c in caches})) or "unknown",
        "caches": [asdict(c.row()) for c in caches],
        "uses": [asdict(use) for use in uses],
        "hook_runs": hook_runs(ledger, boot.id),
        "log": boot_log(boot, sources),
        "evidence": evidence,
        "image": image_snapshot(ledger, home, boot.image_id),
        "manifest": manifest,
        "patches": [
            _patch(home, p["file"], p["sha256"], sources)
            for p in (manifest or {}).get("patches", [])
        ],
        "host": host,
        "tool_version": tool_version,
    }
    return RecordPlan(document, sources)


def hook_runs(ledger: Ledger, boot_id: str) -> list[dict[str, Any]]:
    """A boot's hook runs as records list them (without the boot id they sit under)."""
    return [
        {"name": r.name, "event": r.event, "exit_code": r.exit_code, "duration_s": r.duration_s}
        for r in hook_runs_of(ledger, boot_id)
    ]


def boot_log(boot: BootRecord, sources: dict[str, BlobSource]) -> dict[str, Any] | None:
    """The boot's kept log as a blob, or None when it kept none."""
    log = Path(boot.log_path) if boot.log_path else None
    if log is None or not log.is_file():
        return None
    return file_blob(log, f"log of boot {boot.id}", sources)


def image_snapshot(ledger: Ledger, home: Home, image_id: str) -> dict[str, Any] | None:
    """The snapshot a boot kept of its image, with every registry digest this host pushed it
    to or pulled it from since (a push after the boot is still the same image)."""
    snapshot = read_snapshot(home.image_snapshot(image_id))
    if snapshot is None:
        return None
    known = set(snapshot.get("repo_digests") or [])
    known |= {image.reference for image in registry_images(ledger, image_id)}
    return {**snapshot, "repo_digests": sorted(known)}


def _patch(home: Home, file: str, sha256: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    path = home.patch_copy(sha256)
    if not path.is_file():
        return {"file": file, "sha256": sha256, "size": None}
    blob = file_blob(path, f"patch {file}", sources)
    if blob["sha256"] != sha256:
        raise ArchiveError(f"{path}: content does not match its name; the kept patch is damaged")
    return {"file": file, **blob}
