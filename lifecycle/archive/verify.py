"""Verify what this host archived: the records its ledger names, and every blob they name.

Each record is read by the key the ledger kept, checked against the sha256 the ledger kept
and against its own name, and every blob it names is checked on the server (listing, ETag,
stored checksum). Records are never rewritten, so what one host wrote verifies the same
whatever other hosts archived since.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lifecycle.archive.heal import inspect_record
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.ledger.archives import ArchiveRecord, BootArchiveRow
from lifecycle.records import BootRecordV1, CacheRecordV1


@dataclass(frozen=True)
class Covered:
    """What a verified archive of a cache holds: its tree, its files or not, and the boots
    whose records verify there (or, in a record of the previous format, that it lists)."""

    tree_digest: str
    with_content: bool
    boot_ids: frozenset[str]


@dataclass(frozen=True)
class VerifiedRecord:
    """A cache's archive as the server holds it now, and every object of it that does not verify."""

    problems: tuple[str, ...]  # () when the record and every blob it names are intact
    document: Covered | None  # what it covers, when there is a record that parses
    answered: bool = True  # False: the server could not be asked, so nothing is known


def fetch_verified(
    store: BlobStore,
    archive: ArchiveRecord,
    boots: Sequence[BootArchiveRow] = (),
    *,
    workers: int = 8,
) -> VerifiedRecord:
    """Read the cache's archived record (and the records of `boots` at the same location) and
    check them and every blob they name against the server."""
    relative = store.relative(archive.record_key)
    try:
        found = inspect_record(store, relative, archive.record_sha256, workers)
        problems, document = found.lines(), found.document
        if document is None:
            return VerifiedRecord(tuple(problems), None)
        if isinstance(document, BootRecordV1):
            raise ArchiveError(f"{archive.record_key} is a boot's record, not a cache's")
        verified: set[str] = set()
        if isinstance(document, CacheRecordV1):  # the previous format lists its boots itself
            verified, boots = document.boot_ids(), ()
        for row in boots:
            boot = inspect_record(store, store.relative(row.record_key), row.record_sha256)
            problems += boot.lines()
            if boot.document is not None and not boot.lines():
                verified.add(row.boot_id)
    except S3Unavailable:
        raise
    except ArchiveError as exc:
        return VerifiedRecord((f"{store.url(archive.record_key)}: cannot verify: {exc}",), None)
    covered = Covered(document.fingerprint.tree_digest, document.with_content, frozenset(verified))
    return VerifiedRecord(tuple(problems), covered)
