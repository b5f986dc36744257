"""gc's own record in the archive: what one sweep removed, when, on which host, by which rule.

A sweep of `gc --remote` (lifecycle.gc.run) writes `gc/<run>/<sha256>.json`
(`lifecycle-gc-record/1`) once, after its last look at the archive and before its first
deletion, so no object goes that no record accounts for: a run killed in between leaves keys
listed that are still there (read as they are), and its completion writes a record of its own
for what it then removes. gc never removes these records (they are not of a kind it plans),
so any host's `verify` can tell an object gc collected by rule from one that was lost.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lifecycle import __version__
from lifecycle.archive.layout import parse_key
from lifecycle.archive.record import create_record, read_as
from lifecycle.archive.store import BlobStore
from lifecycle.formats import GC_FORMAT
from lifecycle.parallel import pool_map
from lifecycle.records import GcRecordV1

GC_PREFIX = "gc/"


@dataclass(frozen=True)
class Removal:
    """One object a gc removed, as its record says."""

    run_id: str
    host: str
    at: str
    policy: str
    rule: str

    def describe(self) -> str:
        """`collected by gc g-… on HOST at T (POLICY: RULE)`."""
        when = f"on {self.host} at {self.at}"
        return f"collected by gc {self.run_id} {when} ({self.policy}: {self.rule})"


def record_removal(
    store: BlobStore,
    run_id: str,
    policy: str,
    keys: Iterable[str],
    rules: Mapping[str, str],
    at: str,
) -> str:
    """Write, once, the record of what a sweep is about to remove (`rules`: why each kind of
    object may go); its key under the prefix."""
    removed: dict[str, list[str]] = {}
    for key in sorted(keys):
        parsed = parse_key(key)
        assert parsed is not None and parsed.kind in rules, "gc plans only keys of its kinds"
        removed.setdefault(parsed.kind, []).append(key)
    record = GcRecordV1(
        format=GC_FORMAT,
        run_id=run_id,
        host=socket.gethostname(),
        tool_version=__version__,
        policy=policy,
        removed_at=at,
        removed=removed,
        rules={kind: rules[kind] for kind in removed},
    )
    return create_record(store, "gc", run_id, record)


def removals(store: BlobStore, workers: int = 8) -> dict[str, Removal]:
    """Every key gc's records at this location say a gc removed (the first record naming it)."""
    keys = [
        parsed.key
        for item in store.list(GC_PREFIX)
        if (parsed := parse_key(item.key)) is not None and parsed.kind == "gc"
    ]
    records = pool_map(lambda key: read_as(store, GcRecordV1, key), keys, workers, "gc-records")
    found: dict[str, Removal] = {}
    for record in sorted(records, key=lambda r: r.removed_at):
        for kind, keys in record.removed.items():
            rule = record.rules.get(kind, kind)
            removal = Removal(record.run_id, record.host, record.removed_at, record.policy, rule)
            for key in keys:
                found.setdefault(key, removal)
    return found
