"""Which host dirs a boot mounts: reuse the newest good cache with the same key, or start cold.

Each cache is taken under its lease (lifecycle.leases), held until the boot's end-of-boot scan
is recorded: a teardown verifying that cache makes the boot pass to the next candidate, and a
cache whose dir a teardown has already moved away is never mounted.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lifecycle.boot.spec import CacheMount
from lifecycle.build.keys import cache_key, key_factors
from lifecycle.leases import CacheLease, try_lease
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord, CacheUse, cache_by_id, warm_candidates
from lifecycle.manifest.model import Manifest


@dataclass(frozen=True)
class CachePlan:
    """The mounts of one boot, the caches it creates, and how it uses each."""

    mounts: list[CacheMount]
    new_caches: list[CacheRecord]
    uses: list[CacheUse]
    records: dict[str, CacheRecord]  # cache name -> the cache mounted for it (new or reused)
    leases: list[CacheLease]  # one per mounted cache: release once the boot is recorded

    def release(self) -> None:
        """Give back every cache's lease."""
        for lease in self.leases:
            lease.release()


def plan_caches(
    ledger: Ledger,
    manifest: Manifest,
    manifest_digest: str,
    image_id: str,
    *,
    labels: Mapping[str, str],
    arch: str,
    boot_id: str,
    cold: bool,
    now: str,
) -> CachePlan:
    """Pick or create one host dir per declared cache, each under its lease (dirs are made
    before they are recorded); on any failure the leases taken so far are given back.

    A cache is reused when its key matches (lifecycle.build.keys): what decides whether its
    compiled artefacts are valid, read from the image's labels, never the image's own id."""
    plan = CachePlan([], [], [], {}, [])
    try:
        for name, declared in manifest.active_caches().items():
            key = cache_key(key_factors(labels, name, manifest_digest, arch))
            taken = None if cold else _take_warm(ledger, key)
            if taken is None:
                cache_id = f"{name}-{secrets.token_hex(6)}"
                host_path = ledger.home.cache_dir(cache_id)
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
                lease = try_lease(ledger.home, cache_id)
                assert lease is not None, "a cache id nobody has seen yet is free"
                plan.new_caches.append(record)
                mode = "cold"
            else:
                record, lease = taken
                mode = "warm"
            plan.leases.append(lease)
            plan.records[name] = record
            plan.mounts.append(
                CacheMount(record.id, name, record.host_path, declared.path, declared.env, mode)
            )
            plan.uses.append(CacheUse(boot_id=boot_id, cache_id=record.id, mode=mode))
    except BaseException:
        plan.release()
        raise
    return plan


def _take_warm(ledger: Ledger, key: str) -> tuple[CacheRecord, CacheLease] | None:
    """The newest candidate whose lease is free and which is still there once we hold it."""
    for candidate in warm_candidates(ledger, key):
        lease = try_lease(ledger.home, candidate.id)
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
            return current, lease
        lease.release()
    return None
