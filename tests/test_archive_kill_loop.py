"""SIGKILL `archive --all --with-content` at random moments, while it packs small files, sends
big ones and writes its records, and check after each kill that the ledger says nothing the
server does not hold: every version and boot archive it records, and every record on the
server, names only objects there and intact. A plain re-run then exits 0 and every cache
verifies.

The content is the engine's own (the `bulky` profile writes it during boots), never a change
made behind lifecycle's back. Only the lifecycle process is killed, never its process group.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from lifecycle.archive.layout import parse_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import s3_client
from lifecycle.archive.store import BlobStore
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of, boot_archives, versions_of
from tests.archive_support import keys, verify_key
from tests.trust_support import (
    PREFIX,
    boot,
    boots,
    cache_ids,
    caches,
    cli,
    home,
    killed_after_commit,
    process,
    start,
)

pytestmark = [pytest.mark.docker, pytest.mark.s3]
KILLS = int(os.environ.get("LIFECYCLE_TEST_ROUNDS", "8"))
ARCHIVE = ("archive", "--all", "--with-content")
_SENDING = re.compile(r", [1-9][0-9]* to upload$")


def test_archive_killed_anywhere_records_only_what_the_server_holds(
    archive_project: Path, s3_bucket: str
) -> None:
    rng = random.Random(int(os.environ.get("LIFECYCLE_TEST_SEED", "20261204")))
    ids = cache_ids(boot(archive_project, "--cold", "--profile", "bulky"))
    store = BlobStore(s3_client(os.environ), ArchiveLocation(s3_bucket, PREFIX))
    hit = 0
    sent: list[int] = []  # objects each killed run left on the server
    before = 0
    for kill in range(max(KILLS, 2)):
        running = start(archive_project, *ARCHIVE)
        said: list[str] = []
        reader = threading.Thread(target=said.extend, args=(running.stderr,), daemon=True)
        reader.start()
        # Kill once it has begun sending (its line `…, N to upload` with N > 0 said), so the
        # kills land among uploads, verifications and records, not while it starts.
        while running.poll() is None and not any(_SENDING.search(line) for line in said):
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.8))
        hit += running.poll() is None
        running.send_signal(signal.SIGKILL)
        running.wait(timeout=60)
        reader.join(timeout=60)
        when = f"kill {kill}: {''.join(said)[-3000:]}"
        _check_recorded_is_held(store, ids, when)
        now = len(keys(store.client, s3_bucket, f"{PREFIX}/"))
        sent.append(now - before)
        before = now
        if kill % 2:  # the engine's own new content: more to send (else the tail of the last)
            boot(archive_project, "--profile", "bulky")
    assert hit >= max(KILLS, 2) // 2, f"only {hit} kills hit a live archive"
    print(f"kills inside a live archive: {hit}; objects each left on the server: {sent}")

    done = process(archive_project, *ARCHIVE)
    assert done.returncode == 0, done.stdout + done.stderr
    _check_recorded_is_held(store, ids, "after the re-run")
    for cache_id in ids:
        assert caches()[cache_id].state == "archived", caches()[cache_id]
        verified = cli(archive_project, "verify", cache_id)
        assert verified.exit_code == 0, verified.output


def test_archive_killed_after_each_ledger_commit_records_only_what_the_server_holds(
    archive_project: Path, s3_bucket: str
) -> None:
    ids = cache_ids(boot(archive_project, "--cold", "--profile", "bulky"))
    store = BlobStore(s3_client(os.environ), ArchiveLocation(s3_bucket, PREFIX))
    for commit in range(1, 40):
        boot(archive_project, "--profile", "grows")  # new content: a version, a pack to write
        killed = killed_after_commit(archive_project, commit, "archive", ids[0], "--with-content")
        when = f"killed after commit {commit}: {killed.stdout} {killed.stderr}"
        _check_recorded_is_held(store, ids, when)
        if killed.returncode == 0:
            break  # it made fewer commits: each boundary was tried
        assert killed.returncode == -signal.SIGKILL, when
    else:
        raise AssertionError("archive still killed after 39 commits")
    print(f"archive killed after each of its {commit - 1} ledger commits")
    done = process(archive_project, "archive", "--all", "--with-content")
    assert done.returncode == 0, done.stdout + done.stderr
    verified = cli(archive_project, "verify", ids[0])
    assert verified.exit_code == 0, verified.output


def _check_recorded_is_held(store: BlobStore, ids: list[str], when: str) -> None:
    """What the ledger records as archived, and every record on the server, is whole there."""
    ledger = Ledger.open(home())
    try:
        recorded = [(v.record_key, v.record_sha256) for c in ids for v in versions_of(ledger, c)]
        newest = [archive_of(ledger, c) for c in ids]
        recorded += [(a.record_key, a.record_sha256) for a in newest if a is not None]
        recorded += [
            (r.record_key, r.record_sha256) for b in boots() for r in boot_archives(ledger, b)
        ]
    finally:
        ledger.close()
    for key, sha in recorded:
        assert verify_key(store, key, sha) == [], (when, "the ledger records", key)
    on_server = keys(store.client, store.location.bucket, f"{PREFIX}/")
    for key in on_server:
        name = parse_key(store.relative(key))
        if name is not None and name.kind in ("version", "boot"):
            assert verify_key(store, key) == [], (when, "on the server", key)


def test_an_archive_killed_after_writing_its_version_leaves_the_tree_one_version(
    archive_project: Path, s3_bucket: str, tmp_path: Path
) -> None:
    """Killed after the version's record is on the server and before the ledger says so, the
    re-run takes that record as its own (it is this host's, of the same tree, whole): one
    record of the tree, the one the ledger names, and every reader of the archive sees one
    version of it."""
    cache_id = cache_ids(boot(archive_project, "--cold"))[0]
    store = BlobStore(s3_client(os.environ), ArchiveLocation(s3_bucket, PREFIX))
    for commit in range(1, 40):
        killed = killed_after_commit(archive_project, commit, "archive", cache_id, "--with-content")
        assert killed.returncode == -signal.SIGKILL, (commit, killed.stdout, killed.stderr)
        if _versions_on_server(store, cache_id) and not _versions_recorded(cache_id):
            break  # its record written, the ledger not told
    else:
        raise AssertionError("no kill fell between the version's record and its ledger row")
    [unrecorded] = _versions_on_server(store, cache_id)

    done = process(archive_project, "archive", cache_id, "--with-content", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    [report] = json.loads(done.stdout)["caches"]
    assert (report["record_key"], report["record_written"]) == (unrecorded, False), report
    assert report["blobs_uploaded"] == 0, report  # what it names is there: nothing sent again
    assert _versions_on_server(store, cache_id) == [unrecorded]
    assert _versions_recorded(cache_id) == [unrecorded, unrecorded]  # its version, its newest

    url = f"s3://{s3_bucket}/{PREFIX}"
    listed = json.loads(cli(archive_project, "caches", "--from", url, "--json").stdout)
    [cache] = [c for c in listed["caches"] if c["id"] == cache_id]
    assert [v["record"] for v in cache["versions"]] == [store.url(unrecorded)], cache
    audited = cli(archive_project, "audit", "cache", cache_id, "--from", url, "--json")
    assert len(json.loads(audited.stdout)["versions"]) == 1, audited.output
    tree = report["tree_digest"]
    into = str(tmp_path / "beside")
    beside = cli(archive_project, "restore", f"{cache_id}@{tree}", "--into", into, "--json")
    assert beside.exit_code == 0, beside.output
    assert json.loads(beside.stdout)["record"] == store.url(unrecorded), beside.output
    for args in (("verify", cache_id), ("verify", cache_id, "--from", url)):
        verified = cli(archive_project, *args)
        assert verified.exit_code == 0, verified.output


def _versions_on_server(store: BlobStore, cache_id: str) -> list[str]:
    return keys(store.client, store.location.bucket, f"{PREFIX}/caches/{cache_id}/versions/")


def _versions_recorded(cache_id: str) -> list[str]:
    """The ledger's version rows of the cache, then its newest archive's record."""
    ledger = Ledger.open(home())
    try:
        newest = archive_of(ledger, cache_id)
        rows = [v.record_key for v in versions_of(ledger, cache_id)]
        return rows + ([newest.record_key] if newest else [])
    finally:
        ledger.close()
