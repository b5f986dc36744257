"""The rules of `gc --remote`, on archives made of records in memory: what is kept and why, in
what order the rest goes. The real server, kills and races are in tests/test_gc.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lifecycle.archive.layout import (
    blob_key,
    marker,
    pack_key,
    parse_key,
    record_key,
    version_key,
)
from lifecycle.archive.objects import Listing
from lifecycle.gc import PHASES, Policy, Record, Snapshot, plan_gc
from lifecycle.ledger.boots import BootRecord, CacheUse
from lifecycle.records import (
    BlobEntry,
    BootRecordV1,
    CacheVersion,
    FingerprintBlob,
    PlacedBlob,
    RecordRef,
    ResultRecordV2,
    VersionRef,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=10)


class Archive:
    """An archive being made, object by object."""

    def __init__(self) -> None:
        self.objects: dict[str, Listing] = {}
        self.records: dict[str, Record] = {}

    def put(self, key: str, when: datetime = OLD, size: int = 10) -> str:
        self.objects[key] = Listing(key, size, "", when)
        return key

    def blob(self, name: str, when: datetime = OLD) -> BlobEntry:
        sha = _sha(name)
        self.put(blob_key(sha), when)
        return BlobEntry(sha256=sha, size=10)

    def version(self, cache: str, tree: str, at: datetime = OLD, *blobs: str) -> str:
        entries = [self.blob(f"fingerprint {cache} {tree}", at), *(self.blob(b, at) for b in blobs)]
        record = CacheVersion.model_construct(
            cache_id=cache,
            tree_digest=_sha(tree),
            archived_at=at.isoformat(),
            fingerprint=FingerprintBlob.model_construct(tree_digest=_sha(tree)),
            blobs=entries,
        )
        key = self.put(version_key(cache, _sha(tree), _sha(f"{cache}{tree}{at}{blobs}")), at)
        self.records[key] = record
        return key

    def boot(
        self, boot_id: str, uses: dict[str, tuple[str | None, str]], at: datetime = OLD
    ) -> str:
        row = BootRecord(
            boot_id, at.isoformat(), None, 0, "ok", None, "h", "serve", "demo", "d" * 64,
            "sha256:i", "t", None, "[]", False, "[]", None, None,
        )  # fmt: skip
        record = BootRecordV1.model_construct(
            boot_id=boot_id,
            boot=row,
            uses=[
                CacheUse(boot_id, cache, "warm", _sha(b) if b else None, _sha(a))
                for cache, (b, a) in uses.items()
            ],
            blobs=[self.blob(f"log of {boot_id}", at)],
        )
        key = self.put(record_key("boots", boot_id, _sha(boot_id)), at)
        self.records[key] = record
        for cache in uses:
            self.put(marker(cache, "boots", boot_id), at, 0)
        return key

    def result(
        self, result_id: str, boot: str, versions: dict[str, str], at: datetime = OLD
    ) -> str:
        refs = [
            VersionRef(
                cache_id=cache,
                tree_digest=self.records[key].tree_digest,
                record=RecordRef(key=key, sha256=_sha_of_key(key)),
            )
            for cache, key in versions.items()
        ]
        record = ResultRecordV2.model_construct(
            result_id=result_id,
            result={"created_at": at.isoformat()},
            boot=RecordRef(key=boot, sha256=_sha_of_key(boot)),
            caches=refs,
            blobs=[],
        )
        key = self.put(record_key("results", result_id, _sha(result_id)), at)
        self.records[key] = record
        for cache in versions:
            self.put(marker(cache, "results", result_id), at, 0)
        return key

    def snapshot(self) -> Snapshot:
        keys = {k: parsed for k in self.objects if (parsed := parse_key(k)) is not None}
        return Snapshot(dict(self.objects), keys, dict(self.records), {}, NOW)


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def _sha_of_key(key: str) -> str:
    parsed = parse_key(key)
    assert parsed is not None and parsed.sha256 is not None
    return parsed.sha256


def _removed(archive: Archive, policy: Policy, pinned: set[str] | None = None) -> set[str]:
    plan = plan_gc(archive.snapshot(), policy, pinned or set(), NOW)
    return {doomed.key for doomed in plan.remove}


def _night() -> tuple[Archive, dict[str, Any]]:
    """One cache, booted twice: t1 (old, a result r-1 on it), then t2 (new, r-2)."""
    night = Archive()
    v1 = night.version("vllm-a", "t1", OLD, "old.so", "shared.so")
    b1 = night.boot("b-1", {"vllm-a": (None, "t1")})
    r1 = night.result("r-1", b1, {"vllm-a": v1})
    v2 = night.version("vllm-a", "t2", NOW - timedelta(hours=3), "new.so", "shared.so")
    b2 = night.boot("b-2", {"vllm-a": ("t1", "t2")}, NOW - timedelta(hours=3))
    r2 = night.result("r-2", b2, {"vllm-a": v2}, NOW - timedelta(hours=3))
    return night, {"v1": v1, "b1": b1, "r1": r1, "v2": v2, "b2": b2, "r2": r2}


def test_without_a_policy_only_what_no_record_names_goes() -> None:
    night, _ = _night()
    orphan = night.blob("left by a stopped archive").sha256
    young = night.blob("being archived now", NOW - timedelta(minutes=5)).sha256
    stray = night.put(marker("vllm-a", "boots", "b-never-recorded"), OLD, 0)
    removed = _removed(night, Policy())
    assert removed == {blob_key(orphan), stray}
    assert blob_key(young) not in removed  # within the grace: its record may be coming


def test_keep_last_keeps_each_caches_newest_versions_and_every_result_with_its_tree() -> None:
    night, _ = _night()
    # With --keep-last alone results are kept, so the version r-1 stood on is kept too.
    assert _removed(night, Policy(keep_last=1)) == set()
    lonely = night.version("vllm-a", "t0", OLD - timedelta(days=1), "ancient.so")
    removed = _removed(night, Policy(keep_last=1))
    assert removed == {
        lonely,
        blob_key(_sha("ancient.so")),
        blob_key(_sha("fingerprint vllm-a t0")),
    }


def test_older_than_removes_old_unpinned_results_then_what_only_they_needed() -> None:
    night, keys = _night()
    removed = _removed(night, Policy(older_than=timedelta(days=1)))
    # r-1 is old and not pinned: it goes, then t1's version (nothing else keeps it) and b-1
    # (it left only t1), each with its markers and the blobs no kept record names.
    assert removed == {
        keys["r1"], marker("vllm-a", "results", "r-1"),
        keys["b1"], marker("vllm-a", "boots", "b-1"), blob_key(_sha("log of b-1")),
        keys["v1"], blob_key(_sha("old.so")), blob_key(_sha("fingerprint vllm-a t1")),
    }  # fmt: skip
    assert keys["b2"] not in removed  # named by r-2, though it started from t1
    assert blob_key(_sha("shared.so")) not in removed  # t2 needs it too


def test_a_pinned_result_keeps_everything_behind_it_whatever_the_policy() -> None:
    night, keys = _night()
    other_t1 = night.version("vllm-a", "t1", OLD + timedelta(hours=1), "old.so", "withfiles")
    policy = Policy(keep_last=1, older_than=timedelta(days=1))
    removed = _removed(night, policy, pinned={"r-1"})
    for kept in (keys["r1"], keys["b1"], keys["v1"], other_t1, blob_key(_sha("old.so"))):
        assert kept not in removed
    assert marker("vllm-a", "results", "r-1") not in removed
    plan = plan_gc(night.snapshot(), policy, {"r-1"}, NOW)
    assert plan.pinned == ("r-1",)


def test_what_refers_to_an_object_goes_before_it() -> None:
    night, keys = _night()
    plan = plan_gc(night.snapshot(), Policy(older_than=timedelta(hours=1)), set(), NOW)
    order = [doomed.key for doomed in plan.remove]
    assert order.index(keys["r1"]) < order.index(keys["v1"]) < order.index(blob_key(_sha("old.so")))
    assert [d.phase for d in plan.remove] == sorted(d.phase for d in plan.remove)
    assert set(PHASES) >= {d.kind for d in plan.remove}


def test_a_pack_stays_while_a_kept_record_names_a_blob_in_it() -> None:
    archive = Archive()
    shared, lonely, orphan = (_sha(name) for name in ("shared pack", "lonely pack", "orphan"))
    for sha in (shared, lonely, orphan):
        archive.put(pack_key(sha))

    def packed(cache: str, tree: str, at: datetime, pack: str) -> str:
        key = archive.version(cache, tree, at)
        record = archive.records[key]
        assert isinstance(record, CacheVersion)
        blob = PlacedBlob(sha256=_sha(f"small file of {tree}"), size=10, pack=pack, offset=0)
        archive.records[key] = record.model_copy(update={"blobs": [*record.blobs, blob]})
        return key

    packed("vllm-a", "t1", OLD - timedelta(days=2), lonely)
    packed("vllm-a", "t2", OLD - timedelta(days=1), shared)
    packed("vllm-b", "t3", OLD, shared)
    removed = _removed(archive, Policy(keep_last=1))
    assert pack_key(lonely) in removed and pack_key(orphan) in removed  # no kept record names it
    assert pack_key(shared) not in removed  # the kept t2 and t3 name a blob in it
    assert PHASES["pack"] > PHASES["version"]  # after every record that could name it


def test_the_last_look_spares_what_a_record_written_since_the_plan_holds_all_the_way_down() -> None:
    from lifecycle.gc import _spared  # the sweep's last look, on the archive as it is then

    night, keys = _night()
    plan = plan_gc(night.snapshot(), Policy(older_than=timedelta(days=1)), set(), NOW)
    pending = {doomed.key for doomed in plan.remove}
    assert {keys["r1"], keys["b1"], keys["v1"]} <= pending
    # Meanwhile a host records a result on b-1's run: its record names b-1 and t1's version,
    # and they name their log, fingerprint and files, which no other record names.
    r3 = night.result("r-3", keys["b1"], {"vllm-a": keys["v1"]}, NOW)
    spared = _spared(night.snapshot(), pending, set())
    for held in (
        keys["b1"], keys["v1"], marker("vllm-a", "boots", "b-1"),
        blob_key(_sha("log of b-1")), blob_key(_sha("old.so")),
        blob_key(_sha("fingerprint vllm-a t1")),
    ):  # fmt: skip
        assert held in spared, held
    assert keys["r1"] not in spared and r3 not in pending  # r-1 still goes; r-3 was never planned


_VERSION_MAY_KEEP = ("version", "boot", "boot-marker", "blob")  # and packs: none here


def _unread(archive: Archive, key: str) -> Snapshot:
    """The archive's snapshot with the record at `key` damaged: listed, not read."""
    snap = archive.snapshot()
    snap.records.pop(key, None)
    snap.unreadable[key] = "its bytes are not the sha256 its name says"
    return snap


def test_a_damaged_version_keeps_itself_every_boot_blob_and_pack_and_stops_nothing_else() -> None:
    night, keys = _night()
    policy = Policy(older_than=timedelta(days=1))
    whole = {d.key for d in plan_gc(night.snapshot(), policy, set(), NOW).remove}
    plan = plan_gc(_unread(night, keys["v1"]), policy, set(), NOW)
    removed = {doomed.key for doomed in plan.remove}
    # r-1 goes as before; t1's version, which may name any blob and keep any boot that touched
    # its tree, stays with every boot and blob.
    assert removed == {k for k in whole if parse_key(k).kind not in _VERSION_MAY_KEEP}  # type: ignore[union-attr]
    assert keys["r1"] in removed and not {keys["v1"], keys["b1"]} & removed
    assert plan.unread == {keys["v1"]: "its bytes are not the sha256 its name says"}


def test_a_damaged_result_keeps_every_boot_and_version_it_may_stand_on() -> None:
    night, keys = _night()
    removed = {
        d.key
        for d in plan_gc(
            _unread(night, keys["r1"]), Policy(older_than=timedelta(days=1)), set(), NOW
        ).remove
    }
    assert removed == set()  # r-1 held b-1 and t1; read, it would have gone with them


def test_a_damaged_pin_still_pins_the_result_its_key_names(tmp_path: Path) -> None:
    from lifecycle.gc import kept_unread, pinned_results
    from lifecycle.home import Home
    from lifecycle.ledger import Ledger

    night, keys = _night()
    pin = night.put(record_key("pins", "r-1", _sha("pin of r-1")))
    snap = _unread(night, pin)
    ledger = Ledger.open(Home(tmp_path))  # no pin on this host
    try:
        pinned = pinned_results(ledger, snap)
    finally:
        ledger.close()
    assert pinned == {"r-1"}
    removed = {
        d.key for d in plan_gc(snap, Policy(older_than=timedelta(days=1)), pinned, NOW).remove
    }
    assert keys["r1"] not in removed and keys["b1"] not in removed
    assert kept_unread(snap) == {pin: "a record gc cannot read"}  # a pin names no object


def test_the_last_look_spares_what_a_record_damaged_since_the_plan_may_name() -> None:
    from lifecycle.gc import kept_unread

    night, keys = _night()
    plan = plan_gc(night.snapshot(), Policy(older_than=timedelta(days=1)), set(), NOW)
    pending = {doomed.key for doomed in plan.remove}
    spared = kept_unread(_unread(night, keys["b2"]))  # b-2 stays; its record is damaged since
    assert blob_key(_sha("old.so")) in pending & spared.keys()
    assert keys["b2"] in spared and keys["r1"] not in spared
