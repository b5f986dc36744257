"""A baked image's caches where dockerd keeps them: overlay2 keeps each layer as a plain dir
(`GraphDriver.Data`), so `bake` checks what it built and a boot what it is about to run, and
watches each layer as it watches a mounted cache (inotify sees reads through the overlay). That
needs dockerd's overlay2 storage on this host, read as root; elsewhere a baked image is refused
rather than called warm on trust."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifecycle.boot.caches import CachePlan
from lifecycle.boot.spec import BAKED, CacheMount
from lifecycle.boot.untracked import layer_writes
from lifecycle.build.plan import BAKED_LABEL  # JSON: the caches baked in, as BakedCache
from lifecycle.errors import AnswerNo
from lifecycle.fingerprint import Fingerprint, is_transient, scan
from lifecycle.manifest.model import Manifest
from lifecycle.table import visible

PROFILE_LABEL = "lifecycle.bake.profile"
ENGINE_LABEL = "lifecycle.bake.engine"  # the engine image's id, which it was built FROM
# JSON: what every baked cache's key was made of but its name (lifecycle.build.plan.key_factors)
FACTORS_LABEL = "lifecycle.bake.key_factors"


class BakedUnreadable(AnswerNo):
    """The image's layers cannot be read here, or a cache's layer is not what its label says:
    refused (exit 1), never booted on trust."""


@dataclass(frozen=True)
class BakedCache:
    """One cache baked into an image, as its label and the ledger's bake record list it."""

    name: str
    path: str  # where the image holds it (the manifest's cache path)
    cache_id: str  # the cache it was baked from, on the host that baked it
    tree_digest: str
    boot_id: str  # its last boot before the bake: ok, and not partial
    record: dict[str, str]  # its archive version record: location, key, sha256


def baked_caches(labels: Mapping[str, str]) -> list[BakedCache]:
    """The caches an image's label says are baked in; none for an image that is not baked."""
    return parse_baked(labels.get(BAKED_LABEL))


def baked_arch(labels: Mapping[str, str]) -> str | None:
    """The GPU arch a baked image's caches were compiled for, as its label says (None when it
    does not say: never taken for any arch)."""
    try:
        factors = json.loads(labels.get(FACTORS_LABEL) or "{}")
    except ValueError:
        return None
    arch = factors.get("arch") if isinstance(factors, dict) else None
    return arch if isinstance(arch, str) else None


def parse_baked(text: str | None) -> list[BakedCache]:
    """The caches of a bake, from its label's JSON (or the ledger's copy of it)."""
    if not text:
        return []
    try:
        return [BakedCache(**cache) for cache in json.loads(text)]
    except (ValueError, TypeError) as exc:
        # The image's label, which whoever pushed the image wrote: its keys may be anything.
        raise BakedUnreadable(f"label {BAKED_LABEL} does not parse: {visible(str(exc))}") from None


def layer_dirs(attrs: Mapping[str, Any]) -> list[Path]:
    """The image's layers as dirs on this host, top first."""
    driver = attrs.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    found = [data.get("UpperDir"), *(data.get("LowerDir") or "").split(":")]
    layers = [Path(d) for d in found if d]
    readable = all(os.access(d, os.R_OK | os.X_OK) for d in layers)
    if driver.get("Name") != "overlay2" or not layers or not readable:
        raise BakedUnreadable(
            f"cannot read the image's layers here (storage driver {driver.get('Name')!r}):"
            " baked caches are checked in dockerd's overlay2 storage on this host, as root"
        )
    return layers


def cache_layer(layers: list[Path], cache: BakedCache) -> Path:
    """The dir of the layer that holds the cache: the top-most one holding its path. Any other
    layer with a file under that path would show through the overlay: refused."""
    relative = cache.path.lstrip("/")
    holding = [layer / relative for layer in layers if (layer / relative).is_dir()]
    if not holding:
        raise BakedUnreadable(f"baked cache {cache.name}: no layer of the image holds {cache.path}")
    for other in holding[1:]:
        if any(files for _, _, files in os.walk(other)):
            raise BakedUnreadable(
                f"baked cache {cache.name}: another layer of the image adds files under"
                f" {cache.path}"
            )
    return holding[0]


def check_layer(layers: list[Path], cache: BakedCache) -> tuple[Path, Fingerprint]:
    """The cache's layer dir and its tree as scanned now, refused unless it is the tree the
    label names."""
    root = cache_layer(layers, cache)
    found = scan(root)
    if found.tree_digest != cache.tree_digest:
        raise BakedUnreadable(
            f"baked cache {cache.name} at {cache.path}: its layer holds tree"
            f" {found.tree_digest[:12]} ({found.files} files), not {cache.tree_digest[:12]}"
            f" as baked from {cache.cache_id}: refused"
        )
    return root, found


def plan_baked(attrs: Mapping[str, Any], manifest: Manifest, baked: list[BakedCache]) -> CachePlan:
    """A boot's caches when they are baked into its image: each layer checked against the tree
    its label names (refused otherwise), mounted nowhere, watched where dockerd keeps it."""
    declared = manifest.active_caches()
    named = sorted(c.name for c in baked)
    if named != sorted(declared):
        raise BakedUnreadable(
            f"the image bakes caches {', '.join(named) or 'none'}; the manifest declares"
            f" {', '.join(sorted(declared)) or 'none'}"
        )
    layers = layer_dirs(attrs)
    plan = CachePlan([], [], [], {}, [])
    for cache in baked:
        if declared[cache.name].path != cache.path:
            raise BakedUnreadable(
                f"baked cache {cache.name} is at {cache.path}; the manifest mounts it at"
                f" {declared[cache.name].path}"
            )
        root, tree = check_layer(layers, cache)
        plan.mounts.append(
            CacheMount(
                cache.cache_id, cache.name, str(root), cache.path, declared[cache.name].env,
                BAKED, files_before=tree.files,
            )
        )  # fmt: skip
        plan.before[cache.name] = tree
    return plan


def baked_writes(
    attrs: Mapping[str, Any], mounts: list[CacheMount]
) -> dict[str, frozenset[str]] | None:
    """Cache name -> the files the engine wrote under each baked cache's path (relative to it,
    lock and temporary files aside), from the container's own layer; None when that layer
    cannot be read here."""
    roots = {m.name: m.container_path.rstrip("/") + "/" for m in mounts if m.mode == BAKED}
    if not roots:
        return {}
    found = layer_writes(attrs, lambda path: any(path.startswith(r) for r in roots.values()))
    if found is None:
        return None
    written: dict[str, set[str]] = {name: set() for name in roots}
    for path, _change, _size in found:
        for name, root in roots.items():
            relative = path[len(root) :]
            parent, _, leaf = relative.rpartition("/")
            if path.startswith(root) and not is_transient(leaf, parent.rpartition("/")[2]):
                written[name].add(relative)
    return {name: frozenset(paths) for name, paths in written.items()}
