"""SIGKILL `teardown --archive` and `archive --all` at random moments until 20 kills have landed
inside a live run (at most 40 tries: a run may end before its kill), and check after each kill
that every cache dir that went has a verified record in S3 holding exactly the tree it had,
content included; then a plain re-run converges and every tree restores as it was.

Only the lifecycle process is killed, never its process group. Between kills, removed caches
are restored and some are changed, so that later kills land in uploads, verifications and
renames alike."""

from __future__ import annotations

import io
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import s3_client
from lifecycle.archive.store import BlobStore
from lifecycle.fingerprint import Fingerprint, scan
from tests.archive_support import verify_key
from tests.trust_support import (
    PREFIX,
    boot,
    cache_ids,
    caches,
    cli,
    journal,
    process,
    record,
    start,
)

pytestmark = [pytest.mark.docker, pytest.mark.s3]
LIVE_KILLS = 20  # kills that must land inside a live run, at least 8 of each kind
TRIES = 40
EVENTS: list[str] = []


def test_sigkill_loop_never_removes_a_dir_without_its_verified_record(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    rng = random.Random(int(os.environ.get("LIFECYCLE_TEST_SEED", "20261201")))
    ids = cache_ids(boot(archive_project, "--cold")) + cache_ids(boot(archive_project, "--cold"))
    bulky = Path(caches()[ids[0]].host_path) / "bulk"
    bulky.mkdir()
    for n in range(700):  # packed: kills land while packs are built and sent
        (bulky / f"k{n}.o").write_bytes(os.urandom(256))
    (Path(caches()[ids[1]].host_path) / "big.so").write_bytes(os.urandom(24 << 20))
    store = BlobStore(s3_client_for_env(), ArchiveLocation(s3_bucket, PREFIX))
    kinds = {"teardown": 0, "archive": 0}
    # How long a run of each kind lasts, learnt from runs that ended before their kill, so
    # that the kills keep landing inside runs as the work per run shrinks.
    lasts = {"teardown": 4.0, "archive": 4.0}
    kill = 0
    while sum(kinds.values()) < LIVE_KILLS or min(kinds.values()) < 8:
        # A run that ends before its kill is a try that tested nothing: under a loaded machine
        # a few do, so the loop counts the kills that landed, not the tries.
        assert kill < TRIES, f"after {TRIES} tries only {kinds} kills landed in a live run"
        expected = _trees_in_place()
        kind = "teardown" if kill % 2 == 0 else "archive"
        argv = (
            ["teardown", "--archive", "--with-content", "--yes"]
            if kind == "teardown"
            else ["archive", "--all", "--with-content"]
        )
        began = time.monotonic()
        running = start(archive_project, *argv)
        deadline = began + rng.uniform(0.2, 0.95 * lasts[kind])
        while running.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if running.poll() is None:
            kinds[kind] += 1
        else:
            lasts[kind] = max(0.4, time.monotonic() - began)
        running.send_signal(signal.SIGKILL)  # the process alone: its uploaders die by themselves
        out, err = running.communicate(timeout=60)
        EVENTS.append(f"kill {kill} ({kind}) out: {out[-3000:]} err: {err[-3000:]}")
        _check_removed_have_their_record(store, s3_client, s3_bucket, expected, kill)
        _refill(archive_project, rng)
        kill += 1
    print(f"kills inside a live run: {kinds} in {kill} tries")

    final = _trees_in_place()
    done = process(archive_project, "teardown", "--archive", "--with-content", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(c.state == "torn-down" for c in caches().values())
    _check_removed_have_their_record(store, s3_client, s3_bucket, final, kill)
    for cache_id, tree in final.items():
        restored = cli(archive_project, "restore", cache_id)
        assert restored.exit_code == 0, restored.output
        assert scan(Path(caches()[cache_id].host_path)).tree_digest == tree.tree_digest


def s3_client_for_env() -> Any:
    return s3_client(os.environ)


def _trees_in_place() -> dict[str, Fingerprint]:
    """cache id -> the fingerprint of its dir, for every cache whose dir is in place."""
    return {c.id: scan(Path(c.host_path)) for c in caches().values() if Path(c.host_path).is_dir()}


def _check_removed_have_their_record(
    store: BlobStore, client: Any, bucket: str, expected: dict[str, Fingerprint], kill: int
) -> None:
    for cache_id, tree in expected.items():
        cache = caches()[cache_id]
        if Path(cache.host_path).is_dir():
            continue  # still in place (or back from the trash)
        document = record(client, bucket, cache_id, tree.tree_digest) or record(
            client, bucket, cache_id
        )
        assert document is not None, (kill, cache_id, "removed without a record")
        if document["fingerprint"]["tree_digest"] != tree.tree_digest:
            sink = io.BytesIO()
            store.download_blob(document["fingerprint"]["sha256"], sink)
            archived = Fingerprint.from_json(sink.getvalue().decode())
            print("\n".join(EVENTS))
            raise AssertionError(
                f"kill {kill}: {cache_id} removed, no version holds its tree:"
                f" {tree.diff(archived)}; record of {document['archived_at']};"
                f" journal {[(s.run_id, s.step, s.detail) for s in journal(cache_id)]};"
                f" ledger {cache}"
            )
        assert document["with_content"], (kill, cache_id)
        assert verify_key(store, document["object_key"]) == [], (kill, cache_id)


def _refill(project: Path, rng: random.Random) -> None:
    """Bring back removed caches (so there is work to kill) and change a few that are in place."""
    every = caches()
    if sum(1 for c in every.values() if Path(c.host_path).is_dir()) <= 3:
        for cache in every.values():
            if cache.state == "torn-down":
                restored = cli(project, "restore", cache.id)
                assert restored.exit_code == 0, restored.output
                EVENTS.append(f"restored {cache.id}: {restored.output}")
    for cache in caches().values():
        if Path(cache.host_path).is_dir() and rng.random() < 0.3:
            late = Path(cache.host_path) / f"late-{rng.randrange(1 << 30)}.o"
            late.write_bytes(os.urandom(rng.randrange(1, 4096)))
            EVENTS.append(f"wrote {late}")
