"""Which host dirs a boot mounts: reuse the newest live cache with the same key, or start cold."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path

from lifecycle.boot.spec import CacheMount
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord, CacheUse, newest_live_cache
from lifecycle.manifest.model import Manifest


@dataclass(frozen=True)
class CachePlan:
    """The mounts of one boot, the caches it creates, and how it uses each."""

    mounts: list[CacheMount]
    new_caches: list[CacheRecord]
    uses: list[CacheUse]
    records: dict[str, CacheRecord]  # cache name -> the cache mounted for it (new or reused)


def cache_key(image_id: str, cache_name: str, arch: str) -> str:
    """What must match for a cache to be reused: the exact image, the cache, the GPU arch.

    The image id covers the engine, its patches and its compiler; a JIT cache built for
    another of those is at best useless and at worst loads stale kernels.
    """
    return hashlib.sha256(f"{image_id}\0{cache_name}\0{arch}".encode()).hexdigest()


def plan_caches(
    ledger: Ledger,
    manifest: Manifest,
    manifest_digest: str,
    image_id: str,
    *,
    arch: str,
    boot_id: str,
    cold: bool,
    now: str,
) -> CachePlan:
    """Pick or create one host dir per declared cache (dirs are made before they are recorded)."""
    mounts, new_caches, uses, records = [], [], [], {}
    for name, declared in manifest.active_caches().items():
        key = cache_key(image_id, name, arch)
        live = None if cold else newest_live_cache(ledger, key)
        if live is not None and not Path(live.host_path).is_dir():
            live = None  # removed behind our back: nothing to be warm from
        if live is None:
            cache_id = f"{name}-{secrets.token_hex(6)}"
            host_path = ledger.home / "caches" / cache_id
            host_path.mkdir(parents=True)
            live_record = CacheRecord(
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
            new_caches.append(live_record)
            mode = "cold"
        else:
            live_record, mode = live, "warm"
        records[name] = live_record
        mounts.append(
            CacheMount(
                cache_id=live_record.id,
                name=name,
                host_path=live_record.host_path,
                container_path=declared.path,
                env=declared.env,
                mode=mode,
            )
        )
        uses.append(CacheUse(boot_id=boot_id, cache_id=live_record.id, mode=mode))
    return CachePlan(mounts, new_caches, uses, records)
