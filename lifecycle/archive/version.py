"""A cache version's record (`lifecycle-cache-version/2`, lifecycle.records.CacheVersion): a
cache's state at one point in time, its files among its blobs when archived --with-content.

The boots that used the cache are records of their own (lifecycle.archive.bootrecord): a
version never changes once written, however many boots come later.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lifecycle.archive.sources import BlobSource, RecordPlan, memory_blob
from lifecycle.build.plan import key_factors
from lifecycle.fingerprint import Fingerprint
from lifecycle.formats import VERSION_FORMAT
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord, boot_by_id, cache_uses, tainted_files
from lifecycle.withheld import withheld_files

_LOCAL_ONLY = ("state", "in_use_by")  # this host's bookkeeping, not facts about the cache


def plan_version(
    ledger: Ledger,
    home: Home,
    cache: CacheRecord,
    fingerprint: Fingerprint,
    *,
    with_content: bool,
    parent: str | None,
    host: str,
    tool_version: str,
) -> RecordPlan:
    """Collect what the version record says about `cache` (scanned as `fingerprint`)."""
    sources: dict[str, BlobSource] = {}
    scan = memory_blob(fingerprint.to_json().encode(), f"fingerprint of {cache.id}", sources)
    document: dict[str, Any] = {
        "format": VERSION_FORMAT,
        "cache_id": cache.id,
        "tree_digest": fingerprint.tree_digest,
        "parent": parent,
        "made_by": _made_by(ledger, cache.id),
        "host": host,
        "tool_version": tool_version,
        "with_content": with_content,
        "cache": {k: v for k, v in asdict(cache).items() if k not in _LOCAL_ONLY},
        "key": _key_factors(home, cache),
        "fingerprint": {
            **scan,
            "tree_digest": fingerprint.tree_digest,
            "files": fingerprint.files,
            "bytes": fingerprint.bytes,
        },
        "content": None,
        "withheld": [],
    }
    if with_content:
        root = Path(cache.host_path)
        # A file holding a secret's value, in its bytes or its name, stays on this host; the
        # record says so.
        withheld = withheld_files(fingerprint, tainted_files(ledger, cache.id))
        document["withheld"] = [asdict(w) for w in withheld]
        left_out = {w.path for w in withheld}
        files = [e for e in fingerprint.entries if e.kind == "file" and e.path not in left_out]
        for e in files:
            assert e.sha256 is not None, "a scanned file always has its sha256"
            source = BlobSource(e.sha256, e.size, f"cache file {e.path}", root=root, entry=e)
            sources.setdefault(e.sha256, source)
        document["content"] = {"files": len(files), "bytes": sum(e.size for e in files)}
    return RecordPlan(document, sources)


def _made_by(ledger: Ledger, cache_id: str) -> dict[str, str] | None:
    """The last boot here that used the cache (whose end-of-boot scan is what it holds)."""
    uses = [u for u in cache_uses(ledger) if u.cache_id == cache_id]
    boots = [b for u in uses if (b := boot_by_id(ledger, u.boot_id)) is not None]
    if not boots:
        return None
    last = max(boots, key=lambda b: b.started_at)
    return {"id": last.id, "outcome": last.outcome}


def _key_factors(home: Home, cache: CacheRecord) -> dict[str, Any] | None:
    """What the cache's key was made of, read from the boot snapshot of its image."""
    path = home.image_snapshot(cache.image_id)
    if not path.is_file():
        return None
    try:
        labels = json.loads(path.read_text()).get("labels") or {}
    except ValueError:
        return None
    return key_factors(labels, cache.cache_name, cache.manifest_digest, cache.arch)
