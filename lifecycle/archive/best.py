"""`restore --best`: the newest complete version, in the whole archive, of a cache this host
would boot warm from.

A version qualifies when its cache's key is the one a boot here computes (lifecycle.build.plan:
the manifest digest, the base image digest, the pins, the cache's name, this host's GPU arch),
it holds the cache's files, and the boot it was left by ended `ok` (a failed boot may have left
a half-built .so, which crashes the engine that loads it). Which host archived it does not
matter: that is the point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lifecycle.archive.catalog import archived_caches
from lifecycle.archive.store import BlobStore


@dataclass(frozen=True)
class Best:
    """The version chosen for one cache name."""

    cache_name: str
    cache_id: str
    tree_digest: str
    archived_at: str
    host: str  # the host that archived it
    record: str  # s3:// URL of its record


def best_versions(store: BlobStore, keys: Mapping[str, str]) -> dict[str, Best]:
    """cache name -> the newest complete version whose cache key is `keys[name]`."""
    best: dict[str, Best] = {}
    for cache in archived_caches(store, named=keys):
        name = cache.row.cache_name
        for version in cache.versions:
            good = version.made_by is None or version.made_by.outcome == "ok"
            if version.cache_key != keys.get(name) or not version.with_content or not good:
                continue
            found = Best(
                name, cache.row.id, version.tree_digest, version.archived_at, version.host,
                version.record,
            )  # fmt: skip
            best[name] = max(found, best.get(name, found), key=lambda b: (b.archived_at, b.record))
    return best
