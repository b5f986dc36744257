"""An archive that heals, on the real server: damage to what an archive relies on (a blob, a
pack, a version's record, a boot's record or log) is found by the next archive and put right,
so teardown and verify pass after it; only bytes that are not their name are ever deleted,
and never ones another host put right meanwhile. Packs: tests/test_archive_packs.py."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from bench.archive import register_cache
from lifecycle.archive import verify
from lifecycle.archive.layout import blob_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.run import ArchiveReport, archive_caches
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.archive.verify import fetch_verified, inspect_record
from lifecycle.gc import take_snapshot
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of, boot_archive, versions_of
from lifecycle.teardown.survey import archived_boots
from tests.archive_support import boot_records, damage, newest_version
from tests.services import ArchiveTarget, boot_demo, run_lifecycle

CACHE = "heal-000000000001"
BOOT = f"boot-{CACHE}"  # the boot register_cache records


def _store(target: ArchiveTarget) -> BlobStore:
    return BlobStore(target.client, ArchiveLocation(target.bucket, target.prefix))


def _archive(home: Path, target: ArchiveTarget, *, dry_run: bool = False) -> ArchiveReport:
    ledger = Ledger.open(home)
    try:
        [report] = archive_caches(
            ledger, Home(home), target.client, ArchiveLocation(target.bucket, target.prefix),
            [CACHE], host_env={}, with_content=True, dry_run=dry_run, progress=None,
        )  # fmt: skip
    finally:
        ledger.close()
    return report


def _cache(tmp_path: Path, *, log: bytes | None = None) -> Path:
    """A small cache, registered with its boot (which kept `log` as its log, if given)."""
    tree = tmp_path / "cache"
    tree.mkdir()
    (tree / "kernel.so").write_bytes(os.urandom(3000))
    home = tmp_path / "home"
    register_cache(home, CACHE, tree)
    if log is not None:
        (tmp_path / "boot.log").write_bytes(log)
        ledger = Ledger.open(home)
        with ledger.transaction() as conn:
            conn.execute(
                "UPDATE boots SET log_path = ? WHERE id = ?", (str(tmp_path / "boot.log"), BOOT)
            )
        ledger.close()
    return home


@pytest.mark.s3
def test_only_bytes_that_are_not_their_name_are_set_aside_and_never_once_put_right(
    archive_target: ArchiveTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, client, bucket = _store(archive_target), archive_target.client, archive_target.bucket
    good = b"the bytes this blob is named by\n"
    sha = hashlib.sha256(good).hexdigest()
    relative, key = blob_key(sha), store.blob_key(sha)
    assert verify.set_aside(store, {relative: sha}, 2) == []  # not there: nothing to do
    store.upload_blob(sha, good)
    assert verify.set_aside(store, {relative: sha}, 2) == []  # intact: kept
    assert store.verify_blob(sha) is None
    client.put_object(Bucket=bucket, Key=key, Body=b"other bytes")
    assert verify.set_aside(store, {relative: sha}, 2) == [relative]
    assert store.head(key, checksum=False) is None

    # Another host sets it aside and sends it again between this look and this delete: the
    # delete is for the bytes looked at (If-Match), so the right ones stay.
    client.put_object(Bucket=bucket, Key=key, Body=b"other bytes")
    looked = store.judge

    def put_right_meanwhile(*args: Any, **kwargs: Any) -> str | None:
        problem = looked(*args, **kwargs)
        client.delete_object(Bucket=bucket, Key=key)
        store.upload_blob(sha, good)
        return problem

    monkeypatch.setattr(store, "judge", put_right_meanwhile)
    assert verify.set_aside(store, {relative: sha}, 2) == []
    assert store.verify_blob(sha) is None


@pytest.mark.s3
def test_a_damaged_boot_record_is_written_again_and_a_damaged_version_gives_way(
    archive_target: ArchiveTarget, tmp_path: Path
) -> None:
    home, store = _cache(tmp_path), _store(archive_target)
    first = _archive(home, archive_target)
    ledger = Ledger.open(home)
    booted = boot_archive(ledger, BOOT, archive_target.url)
    ledger.close()
    assert booted is not None
    for key in (first.record_key, booted.record_key):
        damage(archive_target.client, archive_target.bucket, key)
    before = archive_target.objects()
    dry = _archive(home, archive_target, dry_run=True)
    assert len(dry.repaired) == 2 and archive_target.objects() == before  # said, not done

    time.sleep(1)  # records are stamped to the second: a new one, not the same bytes again
    again = _archive(home, archive_target)
    assert again.record_written and again.record_key != first.record_key
    assert again.boots == (BOOT,)  # its record written again
    objects = archive_target.objects()
    assert first.record_key not in objects and booted.record_key not in objects  # set aside
    ledger = Ledger.open(home)
    try:
        # The ledger names no record that is not there: the version set aside is forgotten.
        assert [row.record_key for row in versions_of(ledger, CACHE)] == [again.record_key]
        archive = archive_of(ledger, CACHE)
        assert archive is not None
        checked = fetch_verified(store, archive, archived_boots(ledger)(archive))
        assert checked.problems == () and checked.document is not None
        assert checked.document.boot_ids == {BOOT}  # what teardown relies on
    finally:
        ledger.close()
    assert take_snapshot(store).unreadable == {}  # nothing left to stop a gc


@pytest.mark.s3
def test_a_damaged_boot_log_is_sent_again_or_named_when_this_host_lost_it(
    archive_target: ArchiveTarget, tmp_path: Path
) -> None:
    log = b"engine started\n" * 100
    home, store = _cache(tmp_path, log=log), _store(archive_target)
    first = _archive(home, archive_target)
    sha = hashlib.sha256(log).hexdigest()
    damage(archive_target.client, archive_target.bucket, store.blob_key(sha), truncate=15)
    again = _archive(home, archive_target)  # the boot was archived already: checked anyway
    assert again.repaired == (f"{store.url(store.blob_key(sha))}: 15 bytes on the server, not"
                              f" {len(log)}",)  # fmt: skip
    assert (again.record_key, again.boots, again.blobs_uploaded) == (first.record_key, (), 1)
    [record] = boot_records(archive_target.client, archive_target.bucket, archive_target.prefix,
                            BOOT)  # fmt: skip
    assert inspect_record(store, store.relative(record["object_key"]), None).lines() == []

    damage(archive_target.client, archive_target.bucket, store.blob_key(sha), truncate=15)
    (tmp_path / "boot.log").unlink()
    with pytest.raises(ArchiveError, match="this host no longer holds its bytes to send again"):
        _archive(home, archive_target)


@pytest.mark.docker
@pytest.mark.s3
def test_one_archive_heals_a_blob_a_pack_a_version_and_a_boot_log(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    target, store = archive_target, _store(archive_target)

    def cli(*args: str) -> Any:
        done = run_lifecycle(
            demo_project, *args, env={**target.env, "LIFECYCLE_ARCHIVE": target.url}
        )
        assert done.exit_code == 0, done.output
        return done

    booted = boot_demo(demo_project, "--cold")
    ids = sorted(use["cache_id"] for use in booted["caches"])
    cli("archive", "--all", "--with-content")
    versions = {}
    for cache_id in ids:
        record = newest_version(target.client, target.bucket, target.prefix, cache_id)
        assert record is not None
        versions[cache_id] = record
    [boot] = boot_records(target.client, target.bucket, target.prefix, booted["id"])
    pack_owner = next(c for c in ids if versions[c]["packs"])  # the demo's caches hold small files
    pack = versions[pack_owner]["packs"][0]["sha256"]
    blob_owner, record_owner = [c for c in ids if c != pack_owner][:2]
    blob = versions[blob_owner]["fingerprint"]["sha256"]  # named by that version alone
    damaged_record = versions[record_owner]["object_key"]
    damage(target.client, target.bucket, store.blob_key(boot["log"]["sha256"]), truncate=15)
    damage(target.client, target.bucket, store.blob_key(blob))
    damage(target.client, target.bucket, store.pack_key(pack))
    damage(target.client, target.bucket, damaged_record)

    healed = json.loads(cli("archive", "--all", "--with-content", "--json").stdout)
    reports = {report["cache_id"]: report for report in healed["caches"]}
    assert sum(len(report["repaired"]) for report in reports.values()) == 4
    # Put right where it is: the versions that named the blob and the pack stand again.
    for cache_id in (blob_owner, pack_owner):
        assert reports[cache_id]["record_key"] == versions[cache_id]["object_key"]
    # A new record of the same tree (written in the same second: the very bytes, same name).
    again = reports[record_owner]["record_key"]
    assert reports[record_owner]["record_written"]
    assert again == damaged_record or damaged_record not in target.objects()
    cli("gc", "--remote", "--from", target.url, "--dry-run")  # no record it cannot read

    down = cli("teardown", "--archive", "--yes")
    assert "removed 4 caches" in down.stdout, down.output
    for cache_id in ids:
        checked = json.loads(cli("verify", cache_id, "--json").stdout)
        assert checked["ok"], (cache_id, checked["problems"])
