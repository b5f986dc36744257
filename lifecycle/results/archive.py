"""Results in the archive: a result's record (`lifecycle-result-record/2`) and its markers
written, read back and listed (the team's view), and one result archived now with whichever
of its caches must go first (`result add` with an archive location).

A record is written last, once its boot's record and each version behind it are at that
location, so the chain an audit follows from it is whole in S3.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import __version__
from lifecycle.archive.catalog import listed_keys
from lifecycle.archive.layout import (
    legacy_result_key,
    marker,
    marker_body,
    parse_key,
    record_key,
    records_of,
)
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.plans import BlobSource, RecordPlan, file_blob, render_record
from lifecycle.archive.record import (
    UNREAD_PIN,
    GcRecords,
    Removal,
    Unread,
    load_named,
    marked_results,
    pinned_by,
    pins_at,
    readable,
)
from lifecycle.archive.run import (
    ArchiveReport,
    SecretCarried,
    archive_boot,
    archive_caches,
    refuse_secrets_carried,
)
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.archive.transfer import Progress
from lifecycle.archive.verify import set_aside
from lifecycle.boot.baked import parse_baked
from lifecycle.errors import LifecycleError
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of, boot_archive, version_of
from lifecycle.ledger.boots import BootRecord, CacheUse, baked_uses, cache_by_id, cache_uses
from lifecycle.ledger.builds import bake_of_image
from lifecycle.ledger.results import (
    ResultArchiveRecord,
    ResultRecord,
    record_result_archive,
    result_archives,
    result_archives_on,
    result_by_id,
    unarchived_results,
)
from lifecycle.parallel import pool_map
from lifecycle.records import RESULT_FORMAT_2, ResultRecordV1, ResultRecordV2
from lifecycle.report import unread_lines
from lifecycle.results.model import canonical_result, find_boot, result_digest
from lifecycle.table import visible
from lifecycle.withheld import secrets_on_host

Say = Callable[[str], None]


def chain_gaps(ledger: Ledger, boot_id: str, url: str) -> dict[str, str]:
    """What is missing at `url` for a result of this boot to be archived, that archiving a
    cache would write: cache id -> why (the boot's record, or the tree the boot left)."""
    gaps = {}
    uses = cache_uses(ledger, boot_id=boot_id)
    for use in uses:
        cache = cache_by_id(ledger, use.cache_id)
        if cache is None or use.tree_digest_after is None:
            continue
        if version_of(ledger, use.cache_id, use.tree_digest_after, url) is None and (
            cache.tree_digest == use.tree_digest_after and cache.state != "torn-down"
        ):
            gaps[cache.id] = f"the tree boot {boot_id} left in cache {cache.id} is not at {url}"
    if boot_archive(ledger, boot_id, url) is None and not gaps:
        # Archiving any cache the boot used writes the boot's record.
        live = [u.cache_id for u in uses if _on_disk(ledger, u.cache_id)]
        gaps.update({cache_id: f"boot {boot_id} has no record at {url}" for cache_id in live[:1]})
        if not live:
            gaps[""] = f"boot {boot_id} has no record at {url}, and none of its caches is here"
    return gaps


def archive_result(
    ledger: Ledger,
    store: BlobStore,
    result: ResultRecord,
    say: Say,
    *,
    host: str,
    tool_version: str,
    secrets: Mapping[str, str],
) -> ResultArchiveRecord:
    """Upload the result's document, its markers, then its record; record it in the ledger.
    `result add` refused a secret's value known then; one known since is refused here."""
    boot = find_boot(ledger, result.boot_id)
    url = store.location.url()
    boot_row = boot_archive(ledger, boot.id, url)
    if boot_row is None:
        raise ArchiveError(f"boot {boot.id} has no record at {url}: archive its caches first")
    uses = cache_uses(ledger, boot_id=boot.id)
    sources: dict[str, BlobSource] = {}
    if result.document_path is not None:
        ref = file_blob(Path(result.document_path), f"document of {result.id}", sources)
        if ref["sha256"] != result.document_sha256:
            raise ArchiveError(f"{result.document_path}: changed since result {result.id} took it")
    canonical = canonical_result(result)
    refuse_secrets_carried(
        f"result {result.id}", RecordPlan(canonical, sources), secrets,
        withheld="its record is not sent (it stays recorded here)",
        way_out="rotate the secret, and the next archive sends it",
    )  # fmt: skip
    arches = {c.arch for u in uses if (c := cache_by_id(ledger, u.cache_id)) is not None}
    document = {
        "format": RESULT_FORMAT_2,
        "result_id": result.id,
        "result": canonical,
        "digest": result_digest(canonical),
        "boot": {"key": store.relative(boot_row.record_key), "sha256": boot_row.record_sha256},
        "manifest_name": boot.manifest_name,
        "manifest_digest": boot.manifest_digest,
        "arch": ", ".join(sorted(arches)) or "unknown",
        "caches": [_version_ref(ledger, store, use) for use in uses]
        + _baked_refs(ledger, store, boot),
        "host": host,
        "tool_version": tool_version,
    }
    for source in sources.values():
        with source.open() as handle:
            store.upload_blob(source.sha256, handle)
        problem = store.verify_blob(source.sha256, size=source.size)
        if problem:
            raise ArchiveError(f"not verified after upload: {problem} ({source.what})")
    for use in uses:
        said = marker_body(result.id)
        store.create(marker(use.cache_id, "results", result.id), said, "text/plain")
    relative, body = _same_record_there(store, result.id, document, say)
    if body is None:
        body = render_record(RecordPlan(document, sources), _stamp())
        relative = record_key("results", result.id, hashlib.sha256(body).hexdigest())
        load_result_record(body, relative, store.where(relative))  # must read back
        store.create(relative, body)
    archived_at = json.loads(body)["archived_at"]
    sha = hashlib.sha256(body).hexdigest()
    record = ResultArchiveRecord(result.id, url, store.key(relative), sha, archived_at)
    record_result_archive(ledger, record)
    return record


def archive_pending_results(
    ledger: Ledger,
    store: BlobStore,
    say: Say,
    *,
    host: str,
    tool_version: str,
    secrets: Mapping[str, str],
    again: Sequence[ResultRecord] = (),
) -> dict[str, tuple[str, ...]]:
    """Archive every result not yet here, and those `again` (their record here was lost),
    whose chain is whole here.

    Results whose caches were never archived here are left alone without a word (they may go
    elsewhere); one whose chain is not whole here yet is named with what it waits for.
    Returns result id -> the caches behind it, for each result archived. One holding a secret's
    value is not sent, nor does it stop the others: it is named in the SecretCarried raised
    once they went.
    """
    url = store.location.url()
    done: dict[str, tuple[str, ...]] = {}
    refused: list[str] = []
    for result in [*unarchived_results(ledger, url), *again]:
        if boot_archive(ledger, result.boot_id, url) is None and baked_uses(ledger, result.boot_id):
            continue  # a boot of a baked image: `result add` archives its record and its results
        caches = [u.cache_id for u in cache_uses(ledger, boot_id=result.boot_id)]
        archives = [archive_of(ledger, cache_id) for cache_id in caches]
        if any(a is None or a.location != url for a in archives):
            continue
        gaps = chain_gaps(ledger, result.boot_id, url)
        if gaps:
            first = next(iter(gaps.values()))
            say(f"result {result.id}: not archived yet: {first}; archive that cache again")
            continue
        try:
            record = archive_result(
                ledger, store, result, say, host=host, tool_version=tool_version, secrets=secrets
            )
        except SecretCarried as exc:
            refused.append(str(exc))
            continue
        say(f"result {result.id}: record {store.url(record.record_key)}")
        done[result.id] = tuple(sorted(caches))
    if refused:
        raise SecretCarried("; ".join(refused))
    return done


def record_problem(
    store: BlobStore, row: ResultArchiveRecord, gc: GcRecords | None = None
) -> str | Removal | None:
    """Why the result's record is not, at the store's location, the one this host wrote there
    (missing, other bytes than the ledger's sha256, not a result record); None when it is. One
    GET: the blobs it names are not asked for. With `gc`, a record gone that gc's records say
    a gc removed by rule is that Removal: collected, not missing."""
    relative = store.relative(row.record_key)
    where = store.where(relative)
    try:
        body = store.read(relative)
        if body is None:
            removal = gc.removal(store, relative) if gc is not None else None
            return removal or f"{where}: missing"
        found = hashlib.sha256(body).hexdigest()
        if found != row.record_sha256:
            return f"{where}: sha256 {found}, not the {row.record_sha256} recorded"
        load_result_record(body, relative, where)
    except S3Unavailable:  # the environment, not the record
        raise
    except ArchiveError as exc:
        return str(exc)
    return None


def lost_records(
    ledger: Ledger, store: BlobStore, cache_ids: Sequence[str], say: Say, *, workers: int = 8
) -> list[ResultRecord]:
    """The results standing on the caches whose record this host wrote at the store's location
    is lost (missing or damaged: one read each), to be written again. Damaged bytes are set
    aside first (docs/bucket.md): every record of a result is read when one is written or
    audited, so one that is not its name would stand in the way of both."""
    url = store.location.url()
    rows = {row.result_id: row for c in cache_ids for row in result_archives_on(ledger, c, url)}
    problems = pool_map(
        lambda row: record_problem(store, row), list(rows.values()), workers, "results"
    )
    lost = {row.result_id: p for row, p in zip(rows.values(), problems, strict=True) if p}
    named: dict[str, str] = {}  # key under the prefix -> the sha256 its name says
    for result_id, problem in lost.items():
        say(f"result {result_id}: its record is lost on the server: {problem}")
        key = parse_key(store.relative(rows[result_id].record_key))
        if key is not None and key.sha256 is not None:
            named[key.key] = key.sha256
    set_aside(store, named, workers)
    return [result for i in lost if (result := result_by_id(ledger, i)) is not None]


ALTERED = "the result is not the one its digest names (altered)"


def load_result_record(body: bytes, relative: str, where: str) -> ResultRecordV1 | ResultRecordV2:
    """A result record of either format, checked against its name and its format; refused when
    its result is not the one its digest names (altered)."""
    key = parse_key(relative)
    document: ResultRecordV1 | ResultRecordV2
    if key is not None and key.kind == "legacy-result":
        document = load_named(ResultRecordV1, body, relative, where)
    else:
        document = load_named(ResultRecordV2, body, relative, where)
    if altered(document):
        raise ArchiveError(f"{where}: {ALTERED}")
    return document


def altered(document: ResultRecordV1 | ResultRecordV2) -> bool:
    """Whether the record's result is not the one its digest names."""
    return result_digest(document.result) != document.digest


Document = ResultRecordV1 | ResultRecordV2
Found = tuple[str, Document]  # a result's record: its key, what it says


def read_result(store: BlobStore, result_id: str) -> tuple[str, Document, Unread]:
    """(key, record) of a result at this location, checked, and those of its records left out
    as they cannot be read (s3:// URL -> why); an ArchiveError when there is none, or when
    none of its records can be read (each named, with why)."""
    found, unread = archived_result(store, result_id)
    if found is None:
        raise no_result(store, result_id, unread)
    return *found, unread


def no_result(store: BlobStore, result_id: str, unread: Unread) -> ArchiveError:
    """Why a result has no record to read: none of them can be read, or none is there."""
    if unread:
        return unreadable_result(result_id, unread)
    where = store.where(records_of("results", result_id))
    return ArchiveError(
        f"{where}: missing: no result {result_id!r} archived at {store.location.url()}"
    )


def unreadable_result(result_id: str, unread: Unread) -> ArchiveError:
    """A result none of whose records can be read: that is the answer, in one line."""
    # A why may hold the record's own fields, which the bucket's writer chose.
    named = "; ".join(f"{visible(url)}: {visible(why)}" for url, why in unread.items())
    return ArchiveError(f"result {result_id}: its record cannot be read: {named}")


def archived_result(store: BlobStore, result_id: str) -> tuple[Found | None, Unread]:
    """The first written of a result's records that read (a run stopped after writing one may
    write a second, which says the same), else the previous release's `results/<result>.json`;
    None when none does. And those that cannot be read (s3:// URL -> why), left out: a damaged
    or hand-made record beside it hides no other, and its content is never taken."""
    found, unread = readable(store, ResultRecordV2, records_of("results", result_id), "result")
    for key, document in list(found.items()):
        if altered(document):
            unread[key] = ALTERED
            del found[key]
    where = {store.where(key): why for key, why in unread.items()}
    if found:
        return min(found.items(), key=lambda pair: (pair[1].archived_at, pair[0])), where
    legacy = legacy_result_key(result_id)
    body = store.read(legacy)
    if body is None:
        return None, where
    url = store.where(legacy)
    try:
        return (legacy, load_result_record(body, legacy, url)), where
    except ArchiveError as exc:  # its bytes, read: not the server
        return None, {**where, url: str(exc).removeprefix(f"{url}: ")}


def results_on_cache(store: BlobStore, cache_id: str) -> list[ResultRecordV1 | ResultRecordV2]:
    """The records of the results marked as standing on the cache (either release's markers),
    less those that cannot be read: a marker whose record was never written (that archive did
    not finish), or one unreadable or altered (`verify RESULT` names it)."""
    records = []
    for result_id in marked_results(store, cache_id):
        try:
            records.append(read_result(store, result_id)[1])
        except S3Unavailable:  # the environment, not the archive: exit 3
            raise
        except ArchiveError:
            continue
    return records


def with_results(
    ledger: Ledger,
    client: Any,
    location: ArchiveLocation,
    reports: list[ArchiveReport],
    progress: Progress | None,
    host_env: Mapping[str, str],
) -> list[ArchiveReport]:
    """After an archive of caches: archive every result whose caches' records there now list
    its boot (a result added after its caches were archived goes with the next archive), and
    say in each cache's report which of its results went."""
    if not reports or reports[0].dry_run:
        return reports
    store = BlobStore(client, location)
    say = progress or (lambda line: None)
    # A record of a result standing on these caches may be lost since it was written: it is
    # written again, as a boot's record is (teardown relies on each being there).
    again = lost_records(ledger, store, [r.cache_id for r in reports], say)
    done = archive_pending_results(
        ledger, store, say, host=socket.gethostname(), tool_version=__version__,
        secrets=secrets_on_host(ledger, host_env), again=again,
    )  # fmt: skip
    return [
        replace(r, results=tuple(sorted(i for i, behind in done.items() if r.cache_id in behind)))
        for r in reports
    ]


def publish_result(
    ledger: Ledger,
    home: Home,
    client: Any,
    location: ArchiveLocation,
    result: ResultRecord,
    *,
    host_env: Mapping[str, str],
    progress: Callable[[str], None],
) -> ResultArchiveRecord:
    """Archive the result (and first whichever of its caches need it, their scans knowing the
    secrets of `host_env`); its archive row."""
    store = BlobStore(client, location)
    url = location.url()
    try:
        boot = find_boot(ledger, result.boot_id)
        if baked_uses(ledger, boot.id) and boot_archive(ledger, boot.id, url) is None:
            # Its caches are its image's layers: no cache here writes its record.
            archive_boot(ledger, home, client, location, boot)
        stale = [c for c in chain_gaps(ledger, result.boot_id, url) if c]
        if stale:
            # Its sweep writes the result's record as soon as the last of them is archived.
            archived = archive_caches(
                ledger, home, client, location, stale, host_env=host_env, with_content=False,
                dry_run=False, progress=progress,
            )  # fmt: skip
            with_results(ledger, client, location, archived, progress, host_env)
        for done in result_archives(ledger, result.id):
            if done.location == url:
                return done
        gaps = chain_gaps(ledger, result.boot_id, url)
        if gaps:
            raise ArchiveError(next(iter(gaps.values())))
        return archive_result(
            ledger, store, result, progress, host=socket.gethostname(), tool_version=__version__,
            secrets=secrets_on_host(ledger, host_env),
        )  # fmt: skip
    except LifecycleError as exc:
        family = S3Unavailable if isinstance(exc, S3Unavailable) else ArchiveError
        raise family(
            f"result {result.id} is recorded, but not archived to {url}: {exc}"
            "; `lifecycle archive --all` archives it once that is fixed"
        ) from exc


@dataclass(frozen=True)
class ArchivedResult:
    """One result as the archive holds it."""

    result: dict[str, Any]  # the canonical result
    digest: str
    manifest_name: str
    arch: str
    host: str  # the host that archived it
    record: str  # s3:// URL of its record
    pins: tuple[str, ...]  # the team pins' reasons


def archived_results(store: BlobStore, *, workers: int = 8) -> tuple[list[ArchivedResult], Unread]:
    """Every result with a record in the archive that reads, newest first; and the records
    that cannot be read (s3:// URL -> why), left out: one damaged record hides no other."""
    ids = sorted({key.id for key in listed_keys(store, "results/")})
    pinned: dict[str, list[str]] = {}
    pins, unread_pins = pins_at(store)
    for pin in pins.values():
        pinned.setdefault(pin.target, []).append(pin.reason)
    for key, why in unread_pins.items():  # it still pins the result its key names, as gc keeps it
        pinned.setdefault(pinned_by(key), []).append(f"{UNREAD_PIN}: {store.where(key)}: {why}")

    def one(result_id: str) -> tuple[ArchivedResult | None, Unread]:
        found, unread = archived_result(store, result_id)
        if found is None:
            return None, unread
        relative, document = found
        if isinstance(document, ResultRecordV1):
            manifest, arch = document.boot.boot.manifest_name, "unknown"
        else:
            manifest, arch = document.manifest_name, document.arch
        return ArchivedResult(
            document.result, document.digest, manifest, arch, document.host,
            store.where(relative), tuple(sorted(pinned.get(result_id, []))),
        ), unread  # fmt: skip

    read = pool_map(one, ids, workers, "catalog")
    found = [result for result, _ in read if result is not None]
    unread = {url: why for _, left_out in read for url, why in left_out.items()}
    newest = sorted(found, key=lambda r: (r.result["created_at"], r.result["id"]), reverse=True)
    return newest, unread


def _version_ref(ledger: Ledger, store: BlobStore, use: CacheUse) -> dict[str, Any]:
    """The exact version of one cache a result stands on, at this store's location."""
    tree = use.tree_digest_after
    row = version_of(ledger, use.cache_id, tree, store.location.url()) if tree else None
    record = None
    if row is not None:
        record = {"key": store.relative(row.record_key), "sha256": row.record_sha256}
    return {"cache_id": use.cache_id, "tree_digest": tree, "record": record}


def _baked_refs(ledger: Ledger, store: BlobStore, boot: BootRecord) -> list[dict[str, Any]]:
    """The versions of the caches baked into the boot's image, as its bake names them: each
    with its record where it is at this store's location."""
    bake = bake_of_image(ledger, boot.image_id)
    baked = {c.cache_id: c for c in parse_baked(bake.caches if bake else None)}
    refs = []
    for use in baked_uses(ledger, boot.id):
        cache = baked.get(use.cache_id)
        record = None
        if cache is not None and cache.record["location"] == store.location.url():
            record = {"key": store.relative(cache.record["key"]), "sha256": cache.record["sha256"]}
        refs.append({"cache_id": use.cache_id, "tree_digest": use.tree_digest, "record": record})
    return refs


def _same_record_there(
    store: BlobStore, result_id: str, document: dict[str, Any], say: Say
) -> tuple[str, bytes | None]:
    """A record of this result already at the location that says what `document` says (a run
    stopped after writing it): (its key, its bytes); else ("", None). One that cannot be read
    (damaged, hand-made) is not that record: it is named and set aside or passed over
    (_unread_records), so archiving again writes the record anew instead of failing on the
    very damage it is to repair."""
    found, unread = readable(store, ResultRecordV2, records_of("results", result_id), "result")
    _unread_records(store, unread, say)
    # Its time and blobs are what differ between two runs: any will do, compared without them.
    stand_in = {"archived_at": document["result"]["created_at"], "blobs": []}
    wanted = ResultRecordV2.model_validate({**document, **stand_in}).model_dump(
        mode="json", exclude={"archived_at", "blobs"}
    )
    for key, existing in found.items():
        if existing.model_dump(mode="json", exclude={"archived_at", "blobs"}) == wanted:
            body = store.read(key)
            assert body is not None, "read a moment ago"
            return key, body
    return "", None


def _unread_records(store: BlobStore, unread: Unread, say: Say) -> None:
    """Set aside those of a result's records that cannot be read whose bytes are not the ones
    their key names (nothing relies on them, docs/bucket.md: an archive does the same with a
    version's record), else `verify --from` would find them for ever; pass over the rest
    (hand-made, named by their bytes: not this host's to delete). One line each."""
    named = {
        key: parsed.sha256
        for key in unread
        if (parsed := parse_key(key)) is not None and parsed.sha256 is not None
    }
    gone = set(set_aside(store, named, workers=8))
    for done, keys in (("set aside", gone), ("passed over", unread.keys() - gone)):
        for line in unread_lines({store.where(key): unread[key] for key in sorted(keys)}, done):
            say(line)


def _on_disk(ledger: Ledger, cache_id: str) -> bool:
    cache = cache_by_id(ledger, cache_id)
    return cache is not None and not cache.gone


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
