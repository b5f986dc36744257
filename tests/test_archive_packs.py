"""Packs on the real server: a cache's small files go up as a few packs, a second cache names
the packs already there, an interrupted archive writes no record and its re-run sends only what
is missing, a damaged pack is named, and a restore (whole, or one file by one ranged GET)
checks every file's sha256."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.archive import register_cache as _register
from lifecycle.archive import packs
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.plans import BlobSource
from lifecycle.archive.record import names_of
from lifecycle.archive.restore import restore_cache, restore_file
from lifecycle.archive.run import ArchiveReport, archive_caches
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.archive.transfer import regions
from lifecycle.archive.verify import lying_packs
from lifecycle.fingerprint import scan
from lifecycle.formats import VERSION_FORMAT
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.records import CacheVersion
from tests.archive_support import verify_key
from tests.services import ArchiveTarget, run_lifecycle

pytestmark = pytest.mark.s3


def _tree(root: Path, small: int = 300) -> Path:
    """A cache-shaped tree: many small files in a few dirs, two large ones, a link."""
    for n in range(small):
        path = root / f"triton/{n % 7:02}/kernel-{n:03}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(200 + 37 * n))
    (root / "big.so").write_bytes(os.urandom(2 << 20))
    (root / "other.cubin").write_bytes(os.urandom((1 << 20) + 1))
    (root / "triton/same.json").write_bytes((root / "triton/00/kernel-000.json").read_bytes())
    (root / "link").symlink_to("big.so")
    return root


def _archive(home: Path, target: ArchiveTarget, cache_id: str) -> ArchiveReport:
    ledger = Ledger.open(home)
    try:
        location = ArchiveLocation(target.bucket, target.prefix)
        [report] = archive_caches(
            ledger, Home(home), target.client, location, [cache_id], host_env={},
            with_content=True, dry_run=False, progress=None,
        )  # fmt: skip
    finally:
        ledger.close()
    return report


def _version(target: ArchiveTarget, report: ArchiveReport) -> CacheVersion:
    body = target.client.get_object(Bucket=target.bucket, Key=report.record_key)["Body"].read()
    return CacheVersion.model_validate_json(body)


def _count_requests(client: Any) -> list[str]:
    """The operations `client` sends from now on."""
    sent: list[str] = []
    client.meta.events.register("before-send.s3", lambda **kw: sent.append(kw["request"].method))
    return sent


@pytest.fixture
def first(archive_target: ArchiveTarget, tmp_path: Path) -> tuple[Path, ArchiveReport]:
    """A cache-shaped tree, archived once with its content: the tree, the report."""
    tree = _tree(tmp_path / "cache")
    _register(tmp_path / "home", "packs-000000000001", tree)
    return tree, _archive(tmp_path / "home", archive_target, "packs-000000000001")


def test_small_files_go_in_packs_and_come_back_checked(
    archive_target: ArchiveTarget, tmp_path: Path, first: tuple[Path, ArchiveReport]
) -> None:
    tree, report = first
    record = _version(archive_target, report)
    assert record.format == VERSION_FORMAT and len(record.packs) == 1
    packed = [b for b in record.blobs if b.pack is not None]
    assert len(packed) == 300  # same.json is kernel-000's bytes: one blob
    assert {b.size for b in record.blobs if b.pack is None} >= {2 << 20, (1 << 20) + 1}
    objects = archive_target.objects()
    assert len([key for key in objects if "/packs/" in key]) == 1
    # Blobs: the two large files, the scan, and the boot's evidence; not one per small file.
    assert len([key for key in objects if "/blobs/" in key]) < 10
    store = BlobStore(archive_target.client, ArchiveLocation(archive_target.bucket,
                                                             archive_target.prefix))  # fmt: skip
    assert verify_key(store, report.record_key, report.record_sha256) == []
    assert {f"packs/sha256/{record.packs[0].sha256[:2]}/{record.packs[0].sha256}"} <= names_of(
        record
    )

    # A whole restore, elsewhere: every file, links too, same tree digest.
    other = Ledger.open(tmp_path / "other")
    sent = _count_requests(archive_target.client)
    location = ArchiveLocation(archive_target.bucket, archive_target.prefix)
    done = restore_cache(
        other, Home(tmp_path / "other"), archive_target.client, location, "packs-000000000001"
    )
    other.close()
    assert done.tree_digest == scan(tree).tree_digest and done.files == scan(tree).files
    assert sent.count("GET") < 20  # a few ranged GETs for the 300 small files
    # One file alone: the record, its fingerprint and one ranged GET of the pack.
    sent.clear()
    out = tmp_path / "one.json"
    with out.open("wb") as sink:
        one = restore_file(
            archive_target.client, location, "packs-000000000001", "triton/03/kernel-017.json", sink
        )
    assert out.read_bytes() == (tree / "triton/03/kernel-017.json").read_bytes()
    assert one.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert len(sent) <= 5, sent  # LIST versions, GET record, GET fingerprint, GET range


def test_a_second_cache_names_the_packs_already_there(
    archive_target: ArchiveTarget, tmp_path: Path, first: tuple[Path, ArchiveReport]
) -> None:
    tree, one = first
    for n in (3, 50, 51):
        (tree / f"triton/{n % 7:02}/kernel-{n:03}.json").write_bytes(os.urandom(99))
    _register(tmp_path / "home", "packs-000000000002", tree)
    second = _archive(tmp_path / "home", archive_target, "packs-000000000002")
    # The 3 changed files (one new pack) and the new scan; everything else named where it is.
    assert second.blobs_uploaded == 4 and second.bytes_uploaded < one.bytes_uploaded / 50
    old, new = _version(archive_target, one), _version(archive_target, second)
    assert {p.sha256 for p in old.packs} < {p.sha256 for p in new.packs}
    assert len(new.packs) == 2


def _pack_gets(client: Any) -> list[tuple[str, int]]:
    """(pack sha256, end of the range asked) of each ranged GET of a pack `client` sends from
    now on."""
    sent: list[tuple[str, int]] = []

    def seen(request: Any, **_: Any) -> None:
        asked = request.headers.get("Range")
        if request.method == "GET" and "/packs/" in request.url and asked:
            text = asked.decode() if isinstance(asked, bytes) else asked
            sent.append((request.url.rsplit("/", 1)[1], int(text.rsplit("-", 1)[1]) + 1))

    client.meta.events.register("before-send.s3", seen)
    return sent


def _blobs_fetched(target: ArchiveTarget, gets: list[tuple[str, int]]) -> list[str]:
    """The packs whose blobs were fetched: reading an index takes a pack's tail, to its last
    byte; a GET that stops short of it reads blobs."""
    sizes = {key.rsplit("/", 1)[1]: size for key, size in target.objects().items()}
    return [pack for pack, end in gets if end < sizes[pack]]


def _known_by(home: Path, pack: str) -> str | None:
    ledger = Ledger.open(home)
    rows = ledger.query("SELECT known_by FROM honest_packs WHERE sha256 = ?", (pack,))
    ledger.close()
    return rows[0][0] if rows else None


def test_a_pack_another_host_wrote_is_hashed_once_then_relied_on_without_a_fetch(
    archive_target: ArchiveTarget, tmp_path: Path, first: tuple[Path, ArchiveReport]
) -> None:
    tree, one = first
    [pack] = _version(archive_target, one).packs
    assert _known_by(tmp_path / "home", pack.sha256) == "written"
    gets = _pack_gets(archive_target.client)
    # Host B archives the same files as a cache of its own: it relies on A's pack once every
    # blob its index places is hashed (one ranged GET), and remembers it honest.
    host_b = tmp_path / "host-b"
    _register(host_b, "packs-000000000002", tree)
    second = _archive(host_b, archive_target, "packs-000000000002")
    assert pack.sha256 in {p.sha256 for p in _version(archive_target, second).packs}
    assert _blobs_fetched(archive_target, gets) == [pack.sha256]
    assert _known_by(host_b, pack.sha256) == "hashed"

    # The next boot's cache on either host, three files changed (packed anew by that host):
    # it relies on the same pack, and fetches nothing of it, not even its index (kept).
    for home, cache_id in (
        (host_b, "packs-000000000003"),
        (tmp_path / "home", "packs-000000000004"),
    ):
        for n in (3, 50, 51):
            (tree / f"triton/{n % 7:02}/kernel-{n:03}.json").write_bytes(os.urandom(99))
        gets.clear()
        _register(home, cache_id, tree)
        again = _archive(home, archive_target, cache_id)
        assert pack.sha256 in {p.sha256 for p in _version(archive_target, again).packs}
        assert _blobs_fetched(archive_target, gets) == []
        assert pack.sha256 not in {sha for sha, _ in gets}


def test_an_index_placing_a_blob_no_pack_holds_is_passed_over_unread(
    archive_target: ArchiveTarget,
) -> None:
    sent = _count_requests(archive_target.client)
    huge = {"b" * 64: packs.Placed("a" * 64, 0, packs.PACK_BLOB_MAX + 1)}
    assert list(lying_packs(_store(archive_target), {"a" * 64: huge}, 2)) == ["a" * 64]
    assert sent == []  # never read into memory


def test_an_interrupted_archive_writes_no_record_and_the_rerun_sends_only_the_rest(
    archive_target: ArchiveTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packs, "PACK_TARGET", 16 << 10)  # many packs
    monkeypatch.setattr("lifecycle.archive.transfer.PACKS_AT_ONCE", 1)
    tree = _tree(tmp_path / "cache")
    _register(tmp_path / "home", "packs-000000000001", tree)
    real_build, built = packs.build, []

    def failing_build(
        sources: list[BlobSource], buffer: bytearray
    ) -> tuple[memoryview, packs.Pack]:
        if len(built) == 5:
            raise ArchiveError("stopped here on purpose")
        built.append(sources)
        return real_build(sources, buffer)

    monkeypatch.setattr(packs, "build", failing_build)
    with pytest.raises(ArchiveError, match="stopped here on purpose"):
        _archive(tmp_path / "home", archive_target, "packs-000000000001")
    objects = archive_target.objects()
    assert not [key for key in objects if key.endswith(".json")]  # no record
    first_packs = {key.rsplit("/", 1)[1] for key in objects if "/packs/" in key}
    assert len(first_packs) == 5
    monkeypatch.setattr(packs, "build", real_build)
    again = _archive(tmp_path / "home", archive_target, "packs-000000000001")
    done = {s.sha256 for sources in built for s in sources}
    assert again.blobs_uploaded <= again.blobs - len(done)  # the packed ones not sent again
    record = _version(archive_target, again)
    assert first_packs < {p.sha256 for p in record.packs}
    store = BlobStore(archive_target.client, ArchiveLocation(archive_target.bucket,
                                                             archive_target.prefix))  # fmt: skip
    assert verify_key(store, again.record_key, again.record_sha256) == []


def test_a_damaged_pack_is_named(archive_target: ArchiveTarget, tmp_path: Path) -> None:
    tree = _tree(tmp_path / "cache", small=20)
    _register(tmp_path / "home", "packs-000000000001", tree)
    report = _archive(tmp_path / "home", archive_target, "packs-000000000001")
    [pack] = _version(archive_target, report).packs
    store = BlobStore(archive_target.client, ArchiveLocation(archive_target.bucket,
                                                             archive_target.prefix))  # fmt: skip
    archive_target.client.put_object(
        Bucket=archive_target.bucket, Key=store.pack_key(pack.sha256), Body=b"x" * pack.size
    )
    problems = verify_key(store, report.record_key, report.record_sha256)
    assert problems == [f"{store.url(store.pack_key(pack.sha256))}: content has sha256"
                        f" {hashlib.sha256(b'x' * pack.size).hexdigest()}"]  # fmt: skip


def _store(target: ArchiveTarget) -> BlobStore:
    return BlobStore(target.client, ArchiveLocation(target.bucket, target.prefix))


def _whole(target: ArchiveTarget, report: ArchiveReport) -> bool:
    store = _store(target)
    return verify_key(store, report.record_key, report.record_sha256) == []


def test_a_pack_with_wrong_bytes_fails_no_other_archive_and_is_built_again_byte_for_byte(
    archive_target: ArchiveTarget, tmp_path: Path
) -> None:
    home, store = tmp_path / "home", _store(archive_target)
    _register(home, "packs-000000000001", _tree(tmp_path / "one", small=20))
    first = _archive(home, archive_target, "packs-000000000001")
    [pack] = _version(archive_target, first).packs
    key = store.pack_key(pack.sha256)
    archive_target.client.put_object(  # no index at its end any more
        Bucket=archive_target.bucket, Key=key, Body=b"x" * pack.size
    )
    # Another host's archive reads every pack's index (this host keeps the index of the pack
    # it wrote, and finds the damage once a record relies on it: below).
    host_b = tmp_path / "host-b"
    _register(host_b, "packs-000000000002", _tree(tmp_path / "two", small=5))
    other = _archive(host_b, archive_target, "packs-000000000002")
    assert _whole(archive_target, other)
    assert other.repaired == (f"{store.url(key)}: content has sha256"
                              f" {hashlib.sha256(b'x' * pack.size).hexdigest()}",)  # fmt: skip
    assert store.head(key, checksum=False) is None  # set aside: its bytes were not its name

    again = _archive(home, archive_target, "packs-000000000001")
    # The version there names the pack's every byte: built again, the very pack it names.
    assert (again.record_key, again.record_written) == (first.record_key, False)
    assert again.blobs_uploaded == 20 and _whole(archive_target, first)


def test_a_damaged_pack_another_version_shares_is_set_aside_then_made_whole_by_its_own(
    archive_target: ArchiveTarget, tmp_path: Path
) -> None:
    home, store = tmp_path / "home", _store(archive_target)
    one = _tree(tmp_path / "one", small=20)
    _register(home, "packs-000000000001", one)
    first = _archive(home, archive_target, "packs-000000000001")
    two = tmp_path / "two"
    for n in range(5):  # five of the first cache's files, and new ones
        path = f"triton/{n % 7:02}/kernel-{n:03}.json"
        (two / path).parent.mkdir(parents=True, exist_ok=True)
        (two / path).write_bytes((one / path).read_bytes())
        (two / f"new-{n}.json").write_bytes(os.urandom(300))
    _register(home, "packs-000000000002", two)
    second = _archive(home, archive_target, "packs-000000000002")
    [shared] = _version(archive_target, first).packs
    assert shared.sha256 in {p.sha256 for p in _version(archive_target, second).packs}
    key = store.pack_key(shared.sha256)
    body = archive_target.client.get_object(Bucket=archive_target.bucket, Key=key)["Body"].read()
    flipped = body[:100] + bytes([body[100] ^ 1]) + body[101:]  # its index still reads
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=key, Body=flipped)

    # The second cache's version names only some of the pack: it cannot make it again, so
    # it packs its blobs anew in a new version, and sets the damaged pack aside.
    again = _archive(home, archive_target, "packs-000000000002")
    assert again.record_written and again.record_key != second.record_key
    assert _whole(archive_target, again) and store.head(key, checksum=False) is None
    # The first cache's version names all of it: built again, both earlier versions are whole.
    healed = _archive(home, archive_target, "packs-000000000001")
    assert (healed.record_key, healed.record_written) == (first.record_key, False)
    assert _whole(archive_target, first) and _whole(archive_target, second)


def test_adjacent_blobs_are_fetched_by_one_ranged_get() -> None:
    placed = {f"{n:064x}": packs.Placed("a" * 64, n * 100, 100) for n in range(50)}
    placed["f" * 64] = packs.Placed("a" * 64, 10 << 20, 10)  # far away: its own GET
    placed["e" * 64] = packs.Placed("b" * 64, 0, 10)  # another pack
    found = regions(placed)
    assert [(r.pack[0], r.start, r.size, len(r.blobs)) for r in found] == [
        ("a", 0, 5000, 50),
        ("a", 10 << 20, 10, 1),
        ("b", 0, 10, 1),
    ]


def test_a_file_over_the_single_put_cap_goes_up_in_parts(
    archive_target: ArchiveTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle.archive import store

    monkeypatch.setattr(store, "MULTIPART_OVER", 6 << 20)  # stands in for S3's 5 GiB
    monkeypatch.setattr(store, "PART_SIZE", 5 << 20)  # S3's smallest part
    tree = _tree(tmp_path / "cache", small=3)
    (tree / "huge.so").write_bytes(os.urandom(12 << 20))  # three parts
    _register(tmp_path / "home", "packs-000000000001", tree)
    report = _archive(tmp_path / "home", archive_target, "packs-000000000001")
    blobs = BlobStore(archive_target.client, ArchiveLocation(archive_target.bucket,
                                                             archive_target.prefix))  # fmt: skip
    sha = hashlib.sha256((tree / "huge.so").read_bytes()).hexdigest()
    head = archive_target.client.head_object(
        Bucket=archive_target.bucket, Key=blobs.blob_key(sha), ChecksumMode="ENABLED"
    )
    assert head["ContentLength"] == 12 << 20 and "-3" in head["ETag"]
    assert verify_key(blobs, report.record_key, report.record_sha256) == []
    # Bytes other than the blob's are never completed under its name.
    with pytest.raises(ArchiveError, match="are not blob"):
        store.upload_multipart(blobs, blobs.blob_key("0" * 64), "0" * 64,
                                   (tree / "huge.so").open("rb"), 12 << 20)  # fmt: skip
    assert blobs.head(blobs.blob_key("0" * 64), checksum=False) is None
    other = Ledger.open(tmp_path / "other")
    location = ArchiveLocation(archive_target.bucket, archive_target.prefix)
    done = restore_cache(
        other, Home(tmp_path / "other"), archive_target.client, location, "packs-000000000001"
    )
    other.close()
    assert done.tree_digest == scan(tree).tree_digest


def test_a_blob_a_gc_removes_before_the_records_is_sent_again_and_a_pack_refuses_the_version(
    archive_target: ArchiveTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a `gc --remote` on another host could do between an archive's survey and its
    # records: remove objects this archive just verified. The look once more after the
    # records (listing only) finds them: a blob is sent again, a pack refuses the version.
    from lifecycle.archive import run

    tree = _tree(tmp_path / "cache")
    _register(tmp_path / "home", "packs-000000000001", tree)
    store = BlobStore(archive_target.client, ArchiveLocation(archive_target.bucket,
                                                             archive_target.prefix))  # fmt: skip
    big = hashlib.sha256((tree / "big.so").read_bytes()).hexdigest()
    real_write = run._write_version
    removed: list[str] = []

    def gc_meanwhile(*args: Any) -> Any:
        if not removed:
            removed.append(store.blob_key(big))
            store.delete([store.relative(removed[0])])
        return real_write(*args)

    monkeypatch.setattr(run, "_write_version", gc_meanwhile)
    report = _archive(tmp_path / "home", archive_target, "packs-000000000001")
    assert removed and store.head(removed[0], checksum=False) is not None  # sent again
    assert verify_key(store, report.record_key, report.record_sha256) == []

    (tree / "new.json").write_bytes(os.urandom(999))  # a new tree: a new version, a new pack
    packs_before = set(store.list_packs())

    def pack_gone(*args: Any) -> Any:
        for sha in set(store.list_packs()) - packs_before:
            store.delete([store.relative(store.pack_key(sha))])
        return real_write(*args)

    monkeypatch.setattr(run, "_write_version", pack_gone)
    with pytest.raises(ArchiveError, match="went while this archive named it"):
        _archive(tmp_path / "home", archive_target, "packs-000000000001")
    ledger = Ledger.open(tmp_path / "home")
    [row] = [r for r in ledger.query("SELECT tree_digest FROM archives")]
    ledger.close()
    assert row[0] == report.tree_digest  # the ledger kept the version that verifies


def test_restore_file_writes_a_new_file_and_never_replaces_one(
    archive_target: ArchiveTarget, tmp_path: Path, first: tuple[Path, ArchiveReport]
) -> None:
    tree, _ = first
    (tmp_path / "manifests").mkdir()
    path = "triton/03/kernel-010.json"

    def restore(*args: str) -> Any:
        return run_lifecycle(
            tmp_path, "restore", "packs-000000000001", "--from", archive_target.url, *args,
            env={**archive_target.env, "LIFECYCLE_HOME": str(tmp_path / "home")},
        )  # fmt: skip

    out = tmp_path / "out.json"
    done = restore("--file", path, "--output", str(out), "--json")
    assert done.exit_code == 0, done.output
    assert out.read_bytes() == (tree / path).read_bytes()
    assert json.loads(done.stdout)["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()

    mine = tmp_path / "mine.json"
    mine.write_bytes(b"a file of the user's")
    refused = restore("--file", path, "--output", str(mine))
    assert refused.exit_code == 2 and "File exists" in refused.output, refused.output
    assert mine.read_bytes() == b"a file of the user's"  # never replaced

    absent = restore("--file", "triton/no-such.json", "--output", str(tmp_path / "none"))
    assert absent.exit_code == 1 and "is not a file of the archived tree" in absent.output
    assert not (tmp_path / "none").exists()
    assert restore("--file", path).exit_code == 2  # --file goes with --output
    assert sorted(p.name for p in tmp_path.iterdir() if ".restore-" in p.name) == []


def _kept(home: Path) -> dict[str, tuple[int, bytes]]:
    """The pack indexes the ledger at `home` keeps: sha256 -> (the pack's size, its text)."""
    ledger = Ledger.open(home)
    rows = ledger.query("SELECT sha256, size, body FROM pack_indexes")
    ledger.close()
    return {row["sha256"]: (row["size"], row["body"]) for row in rows}


def _index_reads(target: ArchiveTarget, gets: list[tuple[str, int]]) -> list[str]:
    """The packs whose index was read: a ranged GET to the pack's last byte."""
    sizes = {key.rsplit("/", 1)[1]: size for key, size in target.objects().items()}
    return sorted(pack for pack, end in gets if end == sizes.get(pack))


def _packs_written(home: Path, target: ArchiveTarget, cache_id: str, tree: Path) -> list[str]:
    """The packs named by the version an archive of `tree` as a new cache at `home` writes."""
    _register(home, cache_id, tree)
    return [p.sha256 for p in _version(target, _archive(home, target, cache_id)).packs]


def test_a_later_archive_reads_no_index_it_wrote_or_hashed_and_keeps_none_merely_read(
    archive_target: ArchiveTarget, tmp_path: Path
) -> None:
    host_a, host_b, store = tmp_path / "home", tmp_path / "host-b", _store(archive_target)
    one, shared = _tree(tmp_path / "one", small=20), _tree(tmp_path / "shared", small=20)
    [written] = _packs_written(host_a, archive_target, "packs-000000000001", one)
    # Host B writes two packs: one host A will rely on (hashing it first), one it never will.
    [hashed] = _packs_written(host_b, archive_target, "packs-000000000002", shared)
    other = _tree(tmp_path / "other", small=20)
    [unknown] = _packs_written(host_b, archive_target, "packs-000000000003", other)
    copy = shutil.copytree(shared, tmp_path / "copy", symlinks=True)
    assert hashed in _packs_written(host_a, archive_target, "packs-000000000004", copy)
    # Kept: the index of each pack host A wrote or hashed, as the pack's own tail reads;
    # not the one it only read (another host's pack, never checked: it may say anything).
    kept = _kept(host_a)
    assert sorted(kept) == sorted([written, hashed])
    for sha, (size, text) in kept.items():
        assert packs.parse_index(text, sha, size) == packs.read_index(store, sha, size)

    # The next archive (a new run: nothing of the last one in memory) reads only the index of
    # the pack host A does not know honest, again.
    gets = _pack_gets(archive_target.client)
    (copy / "triton/03/kernel-003.json").write_bytes(os.urandom(99))
    assert hashed in _packs_written(host_a, archive_target, "packs-000000000005", copy)
    assert _index_reads(archive_target, gets) == [unknown]
    assert unknown not in _kept(host_a)


def test_the_index_of_a_pack_a_remote_gc_collected_goes_at_the_next_listing(
    archive_target: ArchiveTarget, tmp_path: Path
) -> None:
    home, tree = tmp_path / "home", _tree(tmp_path / "cache", small=20)
    _register(home, "packs-000000000001", tree)
    [old] = _version(archive_target, _archive(home, archive_target, "packs-000000000001")).packs
    for path in (tree / "triton").rglob("*.json"):  # every small file anew: a new pack
        path.write_bytes(os.urandom(300))
    _archive(home, archive_target, "packs-000000000001")
    assert old.sha256 in _kept(home)
    (tmp_path / "manifests").mkdir()
    swept = run_lifecycle(
        tmp_path, "gc", "--remote", "--from", archive_target.url, "--keep-last", "1",
        "--older-than", "0s", "--grace", "0s", "--yes",
        env={**archive_target.env, "LIFECYCLE_HOME": str(home)},
    )  # fmt: skip
    assert swept.exit_code == 0, swept.output
    store = _store(archive_target)
    assert store.head(store.pack_key(old.sha256), checksum=False) is None  # collected

    (tree / "new.json").write_bytes(os.urandom(999))  # the next archive lists the packs
    _archive(home, archive_target, "packs-000000000001")
    assert old.sha256 not in _kept(home)
    ledger = Ledger.open(home)
    seen = ledger.query("SELECT sha256 FROM packs_seen WHERE sha256 = ?", (old.sha256,))
    ledger.close()
    assert seen == []
