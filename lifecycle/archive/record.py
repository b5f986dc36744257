"""Reading the archive's records: each checked against its format and against its own key.

A record's key ends in the sha256 of its bytes (lifecycle.archive.layout), so a record read
back is refused unless it hashes to its name: an object replaced or altered in place (by hand,
by another tool) is named as such, never believed. The previous release's records
(`caches/<cache>.json`, `results/<result>.json`) had no such name and are checked against
their format only.
"""

from __future__ import annotations

import hashlib
import json
from typing import TypeVar, cast

from pydantic import BaseModel

from lifecycle.archive.layout import Records, legacy_cache_key, parse_key, record_key
from lifecycle.archive.objects import ObjectStore
from lifecycle.archive.packs import Placed
from lifecycle.archive.store import ArchiveError, BlobRef
from lifecycle.records import (
    BootRecordV1,
    CacheRecordV1,
    CacheVersion,
    FileBlob,
    RecordInvalid,
    RecordRef,
    format_name,
    format_names,
    parse_as,
    stored_as,
)

Model = TypeVar("Model", bound=BaseModel)


def load_as(model: type[Model], body: bytes, where: str) -> Model:
    """A record of `model`'s format, checked field by field; anything else is one
    ArchiveError naming the object and what is wrong."""
    name = format_name(model)
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ArchiveError(f"{where}: not a JSON record: {exc}") from None
    if not isinstance(document, dict) or document.get("format") not in format_names(model):
        raise ArchiveError(f"{where}: not a {name} record")
    try:
        return parse_as(model, document)
    except RecordInvalid as exc:
        raise ArchiveError(f"{where}: not a valid {name} record: {exc}") from None


def read_legacy_cache(store: ObjectStore, cache_id: str) -> tuple[str, str, CacheRecordV1] | None:
    """(key, sha256 of its bytes, record) of the previous release's one record of the cache
    (`caches/<cache>.json`), or None when it has none."""
    relative = legacy_cache_key(cache_id)
    body = store.read(relative)
    if body is None:
        return None
    return (
        relative,
        hashlib.sha256(body).hexdigest(),
        load_as(CacheRecordV1, body, store.where(relative)),
    )


def create_record(store: ObjectStore, kind: Records, owner: str, record: BaseModel) -> str:
    """Write a record that refers to no blob (an image pushed, a team pin) once, named by its
    bytes under `<kind>/<owner>/`; its key under the prefix."""
    body = (json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()
    relative = record_key(kind, owner, hashlib.sha256(body).hexdigest())
    store.create(relative, body)
    return relative


def named_by_content(body: bytes, relative: str, where: str) -> None:
    """Refuse a record whose bytes are not the ones its key names (altered or replaced)."""
    key = parse_key(relative)
    if key is None or key.sha256 is None:
        return  # a record of the previous release: no digest in its name
    found = hashlib.sha256(body).hexdigest()
    if found != key.sha256:
        raise ArchiveError(f"{where}: its bytes have sha256 {found}, not the one its key names")


def read_as(store: ObjectStore, model: type[Model], relative: str) -> Model:
    """Read a record by its key (relative to the prefix), checked against its name and format;
    a missing one is an ArchiveError too."""
    where = store.where(relative)
    body = store.read(relative)
    if body is None:
        raise ArchiveError(f"{where}: missing")
    named_by_content(body, relative, where)
    return load_as(model, body, where)


CacheOrBoot = CacheVersion | CacheRecordV1 | BootRecordV1


def load_by_key(body: bytes, relative: str, where: str) -> CacheOrBoot:
    """A cache's or a boot's record, read as the format its key says it holds, and checked
    against its name."""
    key = parse_key(relative)
    if key is None or key.kind not in ("version", "legacy-cache", "boot"):
        raise ArchiveError(f"{where}: not the key of a cache's or a boot's record")
    named_by_content(body, relative, where)
    return load_as(cast(type[CacheOrBoot], stored_as(key.kind)), body, where)


def follow(store: ObjectStore, model: type[Model], ref: RecordRef) -> Model:
    """The record another record names by key and sha256, checked against both."""
    key = parse_key(ref.key)
    if key is None or key.sha256 != ref.sha256:
        raise ArchiveError(f"{store.where(ref.key)}: named with sha256 {ref.sha256}, not its own")
    return read_as(store, model, ref.key)


def record_blobs(document: CacheOrBoot) -> list[BlobRef]:
    """Every blob a record refers to that is its own object (not in a pack)."""
    return [
        BlobRef(b.sha256, b.size, b.md5) for b in document.blobs if not getattr(b, "pack", None)
    ]


def record_packs(document: CacheOrBoot) -> dict[str, int]:
    """The packs a record's blobs live in: sha256 -> size."""
    return {p.sha256: p.size for p in getattr(document, "packs", [])}


def placements(document: CacheOrBoot) -> dict[str, Placed]:
    """Where each packed blob of a record lives (none outside a cache version)."""
    blobs = document.blobs if isinstance(document, CacheVersion) else []
    return {
        b.sha256: Placed(b.pack, b.offset, b.size)
        for b in blobs
        if b.pack is not None and b.offset is not None
    }


def blob_roles(document: CacheOrBoot) -> dict[str, str]:
    """sha256 -> what a record's blob holds, for messages that name the damaged object.

    Content files are named by the caller, who has the fingerprint (itself a blob) in hand.
    """
    roles: dict[str, str] = {}
    if isinstance(document, BootRecordV1):
        _boot_roles(roles, document.boot_id, document.log, document.evidence)
    else:
        roles[document.fingerprint.sha256] = f"fingerprint of cache {document.cache_id}"
    if isinstance(document, CacheRecordV1):
        for boot in document.boots:
            _boot_roles(roles, boot.boot.id, boot.log, boot.evidence)
    if not isinstance(document, CacheVersion):
        for patch in document.patches:
            roles.setdefault(patch.sha256, f"patch {patch.file}")
    return roles


def _boot_roles(
    roles: dict[str, str], boot_id: str, log: FileBlob | None, evidence: dict[str, FileBlob]
) -> None:
    if log:
        roles.setdefault(log.sha256, f"log of boot {boot_id}")
    for path, ref in evidence.items():
        roles.setdefault(ref.sha256, f"evidence {path} of boot {boot_id}")
