"""The archive's records: each read checked against its format and against its own key, and those
that name no blob (an image pushed, a team pin, what a gc removed) written once.

A record's key ends in the sha256 of its bytes, so one altered or replaced in place (by hand,
by another tool) is named as such, never believed; the previous release's records have no
such name and are checked against their format only. A key also names whose record it is (a
result, a boot, a cache's tree...): another's record filed under it is refused the same way.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar, cast

from pydantic import BaseModel

from lifecycle import __version__
from lifecycle.archive.layout import (
    CACHE_KINDS,
    Key,
    Records,
    blob_key,
    cache_prefix,
    legacy_cache_key,
    legacy_marker_prefix,
    legacy_result_key,
    pack_key,
    parse_key,
    record_key,
    records_of,
)
from lifecycle.archive.objects import Listing, ObjectStore
from lifecycle.archive.packs import Placed
from lifecycle.archive.store import ArchiveError, BlobRef, BlobStore, S3Unavailable
from lifecycle.errors import MAX_QUOTED_CHARS, clip
from lifecycle.formats import GC_FORMAT, STORED_UNDER
from lifecycle.parallel import pool_map
from lifecycle.records import (
    BootRecordV1,
    CacheRecordV1,
    CacheVersion,
    FileBlob,
    GcRecordV1,
    ImageRecordV1,
    PinV1,
    Record,
    RecordInvalid,
    RecordRef,
    ResultRecordV1,
    ResultRecordV2,
    format_name,
    format_names,
    parse_as,
    stored_as,
)
from lifecycle.table import visible

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
        load_named(CacheRecordV1, body, relative, store.where(relative)),
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


# What a key names of its record: (the record's field, what it holds, the key's part). The
# sha256 in a key shows the bytes are not altered, not that they are this record's: another
# record's bytes copied under the key are named by their content too, and, believed, would
# answer for another result, boot, cache or tree (audit, verify, restore). The previous
# release's keys (`caches/<cache>.json`, `results/<result>.json`) name theirs the same way.
_NAMED: dict[str, tuple[tuple[str, str, str], ...]] = {
    "version": (("cache_id", "cache", "id"), ("tree_digest", "tree", "tree")),
    "legacy-cache": (("cache_id", "cache", "id"),),
    "boot": (("boot_id", "boot", "id"),),
    "result": (("result_id", "result", "id"),),
    "legacy-result": (("result_id", "result", "id"),),
    "image": (("manifest_digest", "manifest", "id"),),
    "pin": (("target", "a pin of result", "id"),),
    "gc": (("run_id", "gc run", "id"),),
    "gc-intent": (("run_id", "gc run", "id"),),
}
assert _NAMED.keys() >= STORED_UNDER, "every kind of key a record is stored under"


def named_by_key(record: BaseModel, relative: str, where: str) -> None:
    """Refuse a record that is not the one its key names (another's, filed under its key)."""
    key = parse_key(relative)
    for field, what, part in _NAMED.get(key.kind, ()) if key else ():
        found, named = getattr(record, field), getattr(key, part)
        if found != named:  # the record's field, chosen by whoever wrote it: one line, short
            shown = visible(clip(str(found), MAX_QUOTED_CHARS))
            raise ArchiveError(f"{where}: holds {what} {shown}, not the {named} its key names")


def load_named(model: type[Model], body: bytes, relative: str, where: str) -> Model:
    """A record read at its key: the bytes its key names, of `model`'s format, and the record
    its key names."""
    named_by_content(body, relative, where)
    record = load_as(model, body, where)
    named_by_key(record, relative, where)
    return record


def read_as(store: ObjectStore, model: type[Model], relative: str) -> Model:
    """Read a record by its key (relative to the prefix), checked against its name and format;
    a missing one is an ArchiveError too."""
    where = store.where(relative)
    body = store.read(relative)
    if body is None:
        raise ArchiveError(f"{where}: missing")
    return load_named(model, body, relative, where)


CacheOrBoot = CacheVersion | CacheRecordV1 | BootRecordV1


def load_by_key(body: bytes, relative: str, where: str) -> CacheOrBoot:
    """A cache's or a boot's record, read as the format its key says it holds, and checked
    against its name."""
    key = parse_key(relative)
    if key is None or key.kind not in ("version", "legacy-cache", "boot"):
        raise ArchiveError(f"{where}: not the key of a cache's or a boot's record")
    return load_named(cast(type[CacheOrBoot], stored_as(key.kind)), body, relative, where)


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


Unread = dict[str, str]  # a record that could not be read (its s3:// URL, or its key) -> why


def readable(
    store: BlobStore, model: type[Model], prefix: str, kind: str
) -> tuple[dict[str, Model], Unread]:
    """key -> record, of the records of `kind` under `prefix` that read as `model`; and key ->
    why, of those that do not (damaged, hand-made, gone since the listing): one such record
    hides no other. A server that does not answer is no record's fault: it stops the read."""
    found: dict[str, Model] = {}
    unread: Unread = {}
    for item in store.list(prefix):
        key = parse_key(item.key)
        if key is None or key.kind != kind:
            continue  # not ours: left alone
        try:
            found[key.key] = read_as(store, model, key.key)
        except S3Unavailable:
            raise
        except ArchiveError as exc:  # its message names the record: callers name it once
            unread[key.key] = str(exc).removeprefix(f"{store.where(key.key)}: ")
    return found, unread


def publish_image(store: BlobStore, record: ImageRecordV1) -> str:
    """Write the image's record (once); its key under the prefix."""
    return create_record(store, "images", record.manifest_digest, record)


def pushed_images(store: BlobStore, manifest_digest: str) -> tuple[list[ImageRecordV1], Unread]:
    """Every image of the manifest pushed to a registry, as the archive records them, newest
    first; and the records that could not be read (s3:// URL -> why), left out: a damaged
    record stops no host's pull, and its image is never taken."""
    found, unread = readable(store, ImageRecordV1, records_of("images", manifest_digest), "image")
    newest = sorted(found.values(), key=lambda r: (r.pushed_at, r.reference), reverse=True)
    return newest, {store.where(key): why for key, why in unread.items()}


def write_pin(store: BlobStore, pin: PinV1) -> str:
    """Write the pin (once); its key under the prefix."""
    return create_record(store, "pins", pin.target, pin)


def pins_at(store: BlobStore, target: str | None = None) -> tuple[dict[str, PinV1], Unread]:
    """key -> pin, of one target or of all; and key -> why, of the pins that could not be
    read. Such a pin still pins the result its key names (pinned_by), as gc keeps it."""
    return readable(store, PinV1, records_of("pins", target) if target else "pins/", "pin")


def pinned_by(key: str) -> str:
    """The result a pin's key names (a pin that cannot be read means no less)."""
    parsed = parse_key(key)
    assert parsed is not None and parsed.kind == "pin", "pins_at lists pins' keys"
    return parsed.id


UNREAD_PIN = "a pin that cannot be read"


def remove_pins(store: BlobStore, target: str, reason: str | None) -> tuple[list[str], Unread]:
    """Delete the target's pins with that reason (every one when None): the reasons removed,
    and the pins that cannot be read and stay (key -> why). A pin that cannot be read has no
    reason to match: only unpinning the whole target removes it, by its key."""
    pins, unread = pins_at(store, target)
    gone = {key: pin.reason for key, pin in pins.items() if reason in (None, pin.reason)}
    if reason is None:
        gone |= {key: f"{UNREAD_PIN}: {store.where(key)}: {why}" for key, why in unread.items()}
        unread = {}
    store.delete(sorted(gone))
    return sorted(gone.values()), unread


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


# Written after a sweep's last look at the archive and before its first deletion, so no object
# goes that no record accounts for (a run killed in between lists keys still there; its
# completion writes its own record). gc never removes these, so `verify` can tell an object gc
# collected by rule from one that was lost. With `intent`, the same document under
# `gc-intents/`, written BEFORE the look and dropped when the sweep ends: what it may remove,
# for a host about to remove a cache to see (being_collected).
def record_removal(
    store: BlobStore,
    run_id: str,
    policy: str,
    keys: Iterable[str],
    rules: Mapping[str, str],
    at: str,
    *,
    intent: bool = False,
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
    return create_record(store, "gc-intents" if intent else "gc", run_id, record)


def drop_intents(store: BlobStore, run_id: str) -> None:
    """The sweep has ended: what it may remove is no longer in question."""
    store.delete([item.key for item in store.list(records_of("gc-intents", run_id))])


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


class GcRecords:
    """What gc's records at each location say a gc removed, read (`removals`) once per location
    and only once a record is found missing there: how verify, audit, restore and teardown tell
    a record a gc collected by rule from one that was lost."""

    def __init__(self) -> None:
        self.read: dict[str, dict[str, Removal]] = {}  # location -> key (relative) -> …

    def removal(
        self, store: BlobStore, relative: str, named_by: str | None = None
    ) -> Removal | None:
        """What a gc's record says of a key it removed at this location; None if it says
        nothing, or if `named_by`, a record that names the key, is there now: a gc removes a
        record before what it names, so what a record still there names was lost, whatever a
        gc's record says of it (one may lie, as one written by hand)."""
        removal = self.removed(store).get(relative)
        if removal is None or named_by is None:
            return removal
        return removal if store.head(store.key(named_by), checksum=False) is None else None

    def swept_since(self, store: BlobStore, relative: str) -> Removal | None:
        """A record read a moment ago, some object it names now gone: what gc's records say of
        the record once it is gone too (a sweep removed it, then what only it named); None
        while it is there, as what it names was then lost."""
        if store.head(store.key(relative), checksum=False) is not None:
            return None
        return self.removal(store, relative)

    def removed(self, store: BlobStore) -> dict[str, Removal]:
        """Every key gc's records at this location say a gc removed (relative) -> what they say."""
        url = store.location.url()
        if url not in self.read:
            try:
                self.read[url] = removals(store)
            except S3Unavailable:  # the environment, not the archive: exit 3
                raise
            except ArchiveError as exc:
                raise ArchiveError(f"missing, and gc's records cannot be read: {exc}") from exc
        return self.read[url]

    def of(self, store: BlobStore, target: str, kinds: Set[str]) -> dict[Key, Removal]:
        """The records of `target` (a cache, result or boot id) of these kinds that a gc removed,
        by their keys: found in gc's records, not by listing the whole archive."""
        removed = self.removed(store)
        keys = [parsed for key in sorted(removed) if (parsed := parse_key(key)) is not None]
        return {key: removed[key.key] for key in keys if key.id == target and key.kind in kinds}


def marked_results(store: BlobStore, cache_id: str) -> list[str]:
    """The ids of the results marked as standing on the cache (either release's markers). A
    marker whose name is no id of the layout (a newline, a `/` in it) is not ours: it names
    no result, and `results/<name>.json` would be read for it unchecked, that key no record's."""
    found: set[str] = set()
    for prefix in (cache_prefix(cache_id, "results/"), legacy_marker_prefix(cache_id)):
        found |= {
            key.other
            for item in store.list(prefix)
            if (key := parse_key(item.key)) is not None
            and key.kind in ("result-marker", "legacy-marker")
            and key.other is not None
        }
    return sorted(found)


def stood_on(store: BlobStore, cache_id: str) -> dict[str, str]:
    """The key of each record of the cache's versions that a result there (by its markers)
    names -> that result: a gc keeps what every result it keeps names, so one of these gone
    was lost, whatever a gc's record says of it (one may lie, as one written by hand)."""
    found: dict[str, str] = {}
    for result_id in marked_results(store, cache_id):
        current, _ = readable(store, ResultRecordV2, records_of("results", result_id), "result")
        legacy, _ = readable(store, ResultRecordV1, legacy_result_key(result_id), "legacy-result")
        documents: list[Record] = [*current.values(), *legacy.values()]
        for key in sorted({key for document in documents for key in names_of(document)}):
            parsed = parse_key(key)
            if parsed is not None and parsed.kind in CACHE_KINDS and parsed.id == cache_id:
                found.setdefault(key, result_id)
    return found


# A sweep deletes only within GC_DELETES_FOR of writing its intent (lifecycle.gc): an intent the
# server stored less than GC_ACTIVE ago may belong to a sweep that is deleting now (the margin
# between them is for skew between this host's clock and the server's); an older one, to a
# sweep that was stopped (its completion writes a new one before it looks again).
GC_DELETES_FOR = timedelta(minutes=10)
GC_ACTIVE = timedelta(minutes=15)
# Intents read (key -> record, or why it cannot be read): named by their bytes, read once
Intents = dict[str, GcRecordV1 | str]


@dataclass(frozen=True)
class Collecting:
    """What the gc intents stored within GC_ACTIVE say a sweep may be removing now."""

    listed: dict[str, Listing]  # a key (relative) an intent lists -> that intent's listing
    # An intent that cannot be read (a sweep's torn write, a newer format's, a crafted one):
    # its key names only its run, so it may list any key -> its listing, and why
    unread: dict[str, tuple[Listing, str]]


def active_until(intent: Listing) -> str:
    """When the intent's sweep, if one is deleting, has stopped: `HH:MM UTC`."""
    return f"{intent.modified + GC_ACTIVE:%H:%M} UTC"


@dataclass(frozen=True)
class Racing:
    """A key (relative) a sweep may be removing now, and the intent that says so."""

    key: str
    intent: Listing
    gone: bool  # removed already
    unread: str | None  # why the intent cannot be read, when it cannot

    def said(self, store: BlobStore) -> str:
        """`s3://…: a gc at this location may be removing it (its intent …)`, or, for an
        intent that cannot be read, `…: a gc intent at this location cannot be read: …`."""
        where = store.url(store.key(self.key))
        if self.unread is None:
            state = "removed it" if self.gone else "may be removing it"
            return f"{where}: a gc at this location {state} (its intent {self.intent.key})"
        state = "gone, and a" if self.gone else "a"
        return (
            f"{where}: {state} gc intent at this location cannot be read:"
            f" {store.where(self.intent.key)}: {visible(self.unread)}; if it is a sweep's, it"
            " may list this"
        )


def being_collected(store: BlobStore, read: Intents) -> Collecting:
    """What the intents stored within GC_ACTIVE, on the server's clock (this host's may run
    ahead), say a sweep may be removing now. Either a sweep wrote its intent before this read,
    or its last look comes after it and sees every record written before. An intent gone
    since the listing belongs to a sweep that ended; `read` keeps those read, for the next
    call. One that cannot be read is said as such, never an error: it stops no other."""
    listed = list(store.list("gc-intents/"))
    now = store.server_now()
    recent = {
        parsed.key: item
        for item in listed
        if (parsed := parse_key(item.key)) is not None
        and parsed.kind == "gc-intent"
        and now - item.modified < GC_ACTIVE
    }
    for key in recent.keys() - read.keys():
        try:
            body = store.read(key)
            if body is not None:  # None: dropped at its sweep's end
                read[key] = load_named(GcRecordV1, body, key, store.where(key))
        except S3Unavailable:  # the environment, not the intent
            raise
        except ArchiveError as exc:  # its message names the intent: said once, by the caller
            read[key] = str(exc).removeprefix(f"{store.where(key)}: ")
    return Collecting(
        listed={
            key: recent[gc_key]
            for gc_key in sorted(recent.keys() & read.keys())
            if not isinstance(intent := read[gc_key], str)
            for keys in intent.removed.values()
            for key in keys
        },
        unread={
            gc_key: (recent[gc_key], why)
            for gc_key in sorted(recent.keys() & read.keys())
            if isinstance(why := read[gc_key], str)
        },
    )


def racing(
    store: BlobStore, keys: Iterable[str], collecting: Collecting, *, unread_only: bool = False
) -> Racing | None:
    """The first of `keys` (relative) a sweep may be removing now: one an intent lists, or
    any while an intent cannot be read (it may list it); and stored before that intent, or
    gone: one stored since is not the one its sweep planned, which planned before its intent.
    With `unread_only`, only what the intents that cannot be read may concern."""
    newest = max(
        (item for item, _ in collecting.unread.values()), key=lambda i: i.modified, default=None
    )
    for key in sorted(keys):
        intents = [] if unread_only else [collecting.listed.get(key)]
        candidates = [intent for intent in [*intents, newest] if intent is not None]
        if not candidates:
            continue
        head = store.head(store.key(key), checksum=False)
        for intent in candidates:
            if head is None or head["LastModified"] < intent.modified:
                unread = collecting.unread.get(intent.key)
                return Racing(key, intent, head is None, unread[1] if unread else None)
    return None


def names_of(record: Record) -> set[str]:
    """The keys (relative) a record names: its blobs (a packed blob: its pack), and the
    records it stands on."""
    found = {
        pack_key(pack) if (pack := getattr(b, "pack", None)) else blob_key(b.sha256)
        for b in getattr(record, "blobs", [])
    }
    if isinstance(record, ResultRecordV2):
        found.add(record.boot.key)
        found |= {ref.record.key for ref in record.caches if ref.record is not None}
    elif isinstance(record, ResultRecordV1):
        found |= {legacy_cache_key(cache_id) for cache_id in record.caches}
    return found
