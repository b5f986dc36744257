"""SIGKILL `restore CACHE` at random moments, while it fetches packs and big blobs, rebuilds the
tree beside its place and renames it in, and check after each kill that the cache's path holds
nothing or the whole archived tree, never part of it; and that a plain re-run restores it,
removes what the killed one left beside it, and leaves the ledger's row true. Then SIGKILL it
right after each of its ledger commits in turn, where a random kill seldom lands: the ledger
never says the cache is live without the version it came from.

The content is the engine's own (the `bulky` profile writes it during a boot). Only the
lifecycle process is killed, never its process group.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from lifecycle.fingerprint import scan
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of
from tests.trust_support import (
    boot,
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


def test_restore_killed_anywhere_leaves_no_partial_tree_and_reruns_clean(
    archive_project: Path,
) -> None:
    rng = random.Random(int(os.environ.get("LIFECYCLE_TEST_SEED", "20261204")))
    ids = cache_ids(boot(archive_project, "--cold", "--profile", "bulky"))
    archived = {cache_id: caches()[cache_id].tree_digest for cache_id in ids}
    gone = cli(archive_project, "teardown", "--archive", "--with-content", "--yes")
    assert gone.exit_code == 0, gone.output
    last = 2.0  # how long a whole restore lasts, learnt from runs that ended before their kill
    hit = 0
    landed = {"nothing made": 0, "half down, beside": 0, "in place": 0}
    for kill in range(max(KILLS, 2)):
        cache_id = ids[kill % len(ids)]
        target = Path(caches()[cache_id].host_path)
        began = time.monotonic()
        running = start(archive_project, "restore", cache_id)
        deadline = began + rng.uniform(0.2, 0.95 * last)
        while running.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if running.poll() is None:
            hit += 1
        else:
            last = max(0.3, time.monotonic() - began)
        running.send_signal(signal.SIGKILL)
        out, err = running.communicate(timeout=60)
        when = f"kill {kill} of restore {cache_id}: {out[-2000:]} {err[-2000:]}"
        if target.exists():
            assert scan(target).tree_digest == archived[cache_id], when
            landed["in place"] += 1
        elif caches()[cache_id].state != "torn-down":
            raise AssertionError(f"{when}: no dir, but the ledger says {caches()[cache_id]}")
        elif any(target.parent.glob(f".{target.name}.restore-*")):
            landed["half down, beside"] += 1
        else:
            landed["nothing made"] += 1

        again = process(archive_project, "restore", cache_id)
        assert again.returncode == 0, f"{when}\nre-run: {again.stdout} {again.stderr}"
        assert scan(target).tree_digest == archived[cache_id], when
        row = caches()[cache_id]
        assert (row.state, row.tree_digest) == ("live", archived[cache_id]), (when, row)
        left = sorted(p.name for p in target.parent.glob(f".{target.name}*"))
        assert left == [], (when, "left beside the cache", left)
        torn = cli(archive_project, "teardown", cache_id, "--yes")
        assert torn.exit_code == 0, (when, torn.output)
        assert not target.exists(), when
    assert hit >= max(KILLS, 2) // 2, f"only {hit} kills hit a live restore"
    print(f"kills inside a live restore: {hit}; what each left: {landed}")


def test_restore_killed_after_each_ledger_commit_leaves_the_ledger_true(
    archive_project: Path,
) -> None:
    # An older version of a cache this host archived since: its ledger names the newer one,
    # until the restore says the cache came from the older one.
    cache_id = cache_ids(boot(archive_project, "--cold"))[0]
    archived = cli(archive_project, "archive", "--all", "--with-content")
    assert archived.exit_code == 0, archived.output
    older = caches()[cache_id].tree_digest
    boot(archive_project, "--profile", "grows")
    gone = cli(archive_project, "teardown", "--archive", "--with-content", "--yes")
    assert gone.exit_code == 0, gone.output
    assert _newest_archived_tree(cache_id) != older
    target = Path(caches()[cache_id].host_path)
    for commit in range(1, 20):
        killed = killed_after_commit(archive_project, commit, "restore", f"{cache_id}@{older}")
        when = f"killed after commit {commit}: {killed.stdout} {killed.stderr}"
        row = caches()[cache_id]
        if row.state == "live":  # what teardown and the next archive's parent rely on
            assert _newest_archived_tree(cache_id) == row.tree_digest == older, (when, row)
        if target.exists():
            assert scan(target).tree_digest == older, when
        if killed.returncode == 0:
            break  # the restore made fewer commits: each boundary was tried
        assert killed.returncode == -signal.SIGKILL, when
        again = process(archive_project, "restore", f"{cache_id}@{older}")
        assert again.returncode == 0, f"{when}\nre-run: {again.stdout} {again.stderr}"
        assert _newest_archived_tree(cache_id) == caches()[cache_id].tree_digest == older, when
        torn = cli(archive_project, "teardown", cache_id, "--yes")  # removed at once
        assert torn.exit_code == 0 and not target.exists(), (when, torn.output)
    else:
        raise AssertionError("restore still killed after 19 commits")
    print(f"restore killed after each of its {commit - 1} ledger commits")


def _newest_archived_tree(cache_id: str) -> str | None:
    ledger = Ledger.open(home())
    try:
        newest = archive_of(ledger, cache_id)
    finally:
        ledger.close()
    return newest.tree_digest if newest else None
