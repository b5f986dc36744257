"""Which host dirs a boot mounts: reuse the newest good cache with the same key, or start cold.

Each cache is taken under its lease (lifecycle.leases), held until the boot's end-of-boot scan
is recorded: a teardown verifying that cache makes the boot pass to the next candidate, and a
cache whose dir a teardown has already moved away is never mounted.

Before a cache is mounted warm it is scanned again against the tree its last scan recorded
(cheap: only files whose size, mtime or inode changed are read): a cache changed behind
lifecycle's back (a `.so` truncated by hand or by a full disk, a file planted in it) is
marked, never mounted, and the boot says which files changed, so a crash that follows is not
blamed on the engine. Bytes changed in place with all three kept (a disk's bit rot) are not
seen here: `lifecycle verify` hashes every file.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lifecycle.boot.spec import CacheMount
from lifecycle.build.plan import cache_key, key_factors
from lifecycle.errors import EnvironmentFailure, LifecycleError
from lifecycle.fingerprint import Fingerprint, ScanError, scan
from lifecycle.home import Home
from lifecycle.leases import CacheLease, try_lease
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    CacheDamage,
    CacheRecord,
    CacheUse,
    cache_by_id,
    record_damage,
    warm_candidates,
)
from lifecycle.manifest.model import Manifest


class CacheUnreadable(EnvironmentFailure):
    """A warm candidate its re-scan could not read (another user's file, one changing under
    the scan): neither the user's input nor a bug, so exit 3, with the way out."""


@dataclass(frozen=True)
class CachePlan:
    """The mounts of one boot, the caches it creates, and how it uses each."""

    mounts: list[CacheMount]
    new_caches: list[CacheRecord]
    uses: list[CacheUse]
    records: dict[str, CacheRecord]  # cache name -> the cache mounted for it (new or reused)
    leases: list[CacheLease]  # one per mounted cache: release once the boot is recorded
    damaged: list[CacheDamage] = field(default_factory=list)  # passed over: changed by hand
    # cache name -> the tree a warm cache held when mounted (its re-scan): what the end-of-boot
    # scan compares with, so the last scan's file is read once a boot
    before: dict[str, Fingerprint] = field(default_factory=dict)

    def release(self) -> None:
        """Give back every cache's lease."""
        for lease in self.leases:
            lease.release()


def plan_caches(
    ledger: Ledger,
    home: Home,
    manifest: Manifest,
    manifest_digest: str,
    image_id: str,
    *,
    labels: Mapping[str, str],
    arch: str,
    boot_id: str,
    cold: bool,
    now: str,
    secret_values: Mapping[str, str],
) -> CachePlan:
    """Pick or create one host dir per declared cache, each under its lease (dirs are made
    before they are recorded); on any failure the leases taken so far are given back.

    A cache is reused when its key matches (lifecycle.build.plan): what decides whether its
    compiled artefacts are valid, read from the image's labels, never the image's own id.
    `secret_values` (by name: as its end-of-boot scan has them) are masked in the paths its
    check of a warm cache sees."""
    plan = CachePlan([], [], [], {}, [])
    try:
        for name, declared in manifest.active_caches().items():
            key = cache_key(key_factors(labels, name, manifest_digest, arch))
            taken = (
                None if cold else _take_warm(ledger, home, key, plan, boot_id, now, secret_values)
            )
            if taken is None:
                cache_id = f"{name}-{secrets.token_hex(6)}"
                host_path = home.cache_dir(cache_id)
                host_path.mkdir(parents=True)
                record = CacheRecord(
                    id=cache_id,
                    cache_key=key,
                    cache_name=name,
                    manifest_name=manifest.name,
                    manifest_digest=manifest_digest,
                    image_id=image_id,
                    arch=arch,
                    host_path=str(host_path),
                    container_path=declared.path,
                    state="live",
                    in_use_by=None,
                    created_at=now,
                )
                lease = try_lease(home, cache_id)
                assert lease is not None, "a cache id nobody has seen yet is free"
                plan.new_caches.append(record)
                mode = "cold"
            else:
                record, lease, plan.before[name] = taken
                mode = "warm"
            plan.leases.append(lease)
            plan.records[name] = record
            plan.mounts.append(
                CacheMount(
                    record.id,
                    name,
                    record.host_path,
                    declared.path,
                    declared.env,
                    mode,
                    files_before=(record.files or 0) if mode == "warm" else 0,
                )
            )
            plan.uses.append(CacheUse(boot_id=boot_id, cache_id=record.id, mode=mode))
    except BaseException:
        plan.release()
        raise
    return plan


def _take_warm(
    ledger: Ledger,
    home: Home,
    key: str,
    plan: CachePlan,
    boot_id: str,
    now: str,
    secret_values: Mapping[str, str],
) -> tuple[CacheRecord, CacheLease, Fingerprint] | None:
    """The newest candidate whose lease is free, which is still there once we hold it, and
    which holds the tree its last scan recorded (one that does not is marked and passed);
    with that tree as scanned now."""
    for candidate in warm_candidates(ledger, key):
        lease = try_lease(home, candidate.id)
        if lease is None:
            continue  # a teardown is verifying it, or another boot just took it
        # Read again under the lease: a teardown may have removed it since the query.
        current = cache_by_id(ledger, candidate.id)
        if (
            current is not None
            and current.state in ("live", "archived")
            and current.in_use_by is None
            and Path(current.host_path).is_dir()
        ):
            previous = last_scan(current)
            # With the boot's secrets, as its end-of-boot scan: a path planted behind lifecycle's
            # back that names one is recorded masked in the mark of damage, as everywhere.
            try:
                found = scan(Path(current.host_path), previous, secrets=secret_values)
            except ScanError as exc:
                lease.release()
                raise CacheUnreadable(
                    f"cache {current.id} cannot be checked before it is mounted warm: {exc};"
                    " or `lifecycle boot --cold` boots with new caches, this one left unused"
                ) from None
            changed = damage(current, previous, found, boot_id, now)
            if changed is None:
                return current, lease, found
            record_damage(ledger, changed)
            plan.damaged.append(changed)
        lease.release()
    return None


def last_scan(cache: CacheRecord) -> Fingerprint | None:
    """The fingerprint of the cache's last recorded scan; None when there is none to read."""
    if cache.scan_path and Path(cache.scan_path).is_file():
        try:
            return Fingerprint.from_json(Path(cache.scan_path).read_text())
        except LifecycleError:
            return None  # a damaged scan file: judged by its tree digest alone
    return None


def damage(
    cache: CacheRecord, previous: Fingerprint | None, found: Fingerprint, by: str, now: str
) -> CacheDamage | None:
    """None when `found` is the tree the cache's last scan recorded; else what changed, as
    found by `by` (a boot, or `archive`)."""
    if found.tree_digest == cache.tree_digest:
        return None
    diff = previous.diff(found) if previous is not None else None
    paths = {
        "changed": list(diff.changed) if diff else [],
        "added": list(diff.added) if diff else [],
        "removed": list(diff.removed) if diff else [],
    }
    return CacheDamage(cache.id, now, by, found.tree_digest, json.dumps(paths))
