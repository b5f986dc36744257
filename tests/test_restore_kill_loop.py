"""SIGKILL `restore CACHE` at random moments, while it fetches packs and big blobs, rebuilds the
tree beside its place and renames it in, and check after each kill that the cache's path holds
nothing or the whole archived tree, never part of it; and that a plain re-run restores it,
removes what the killed one left beside it, and leaves the ledger's row true.

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
from tests.trust_support import boot, cache_ids, caches, cli, process, start

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
