"""Boots and teardowns racing for the same caches, 16 trials, with the test-only delay points
(LIFECYCLE_TEST_DELAY) widening a different window each time: a boot holding its caches before
or after its intent is recorded, a teardown holding a cache between its check and its rename,
or waiting between its plan and its first cache.

After every trial: neither process printed a traceback; the boot ended `ok` (the race may turn
a warm cache cold, never fail the boot); the teardown said yes or no (exit 0 or 1); the ledger
says `live` or `archived` only for dirs that are there, and no cache is held by a finished boot;
and every dir the teardown removed has a record in S3 holding the tree it had."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import s3_client
from lifecycle.archive.store import BlobStore
from lifecycle.fingerprint import scan
from tests.archive_support import verify_key
from tests.trust_support import PREFIX, boot, caches, cli, record, start

pytestmark = [pytest.mark.docker, pytest.mark.s3]
TRIALS = 8  # each of the 6 pairs of delay points at least once
BOOT_POINTS = ("boot-caches-picked", "boot-recorded")
TEARDOWN_POINTS = ("teardown-planned", "after-verified", "after-intent")


def test_boots_and_teardowns_never_take_the_same_cache(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    rng = random.Random(int(os.environ.get("LIFECYCLE_TEST_SEED", "31")))
    store = BlobStore(s3_client_for_env(), ArchiveLocation(s3_bucket, PREFIX))
    boot(archive_project, "--cold")
    outcomes: dict[str, int] = {}
    for trial in range(TRIALS):
        assert cli(archive_project, "archive", "--all").exit_code == 0
        trees = {c.id: scan(Path(c.host_path)).tree_digest for c in _in_place()}
        boot_delay = f"{BOOT_POINTS[trial % 2]}={rng.uniform(0.5, 2.5):.2f}"
        teardown_delay = f"{TEARDOWN_POINTS[trial % 3]}={rng.uniform(0.5, 2.5):.2f}"
        teardown = start(
            archive_project, "teardown", "--yes", env={"LIFECYCLE_TEST_DELAY": teardown_delay}
        )
        time.sleep(rng.uniform(0.0, 1.5))
        booting = start(
            archive_project, "boot", "demo/0.2", "--json",
            env={"LIFECYCLE_TEST_DELAY": boot_delay},
        )  # fmt: skip
        boot_out, boot_err = booting.communicate(timeout=180)
        down_out, down_err = teardown.communicate(timeout=180)
        what = f"trial {trial}: {boot_delay} / {teardown_delay}\n{boot_err}\n{down_out}{down_err}"
        assert "Traceback" not in boot_err + down_err, what
        assert booting.returncode == 0, what
        assert teardown.returncode in (0, 1), what
        report = json.loads(boot_out)
        assert report["outcome"] == "ok", what
        modes = {u["mode"] for u in report["caches"]}
        kind = "warm" if modes == {"warm"} else "cold" if modes == {"cold"} else "mixed"
        outcomes[kind] = outcomes.get(kind, 0) + 1
        for cache in caches().values():
            assert cache.in_use_by is None, (what, cache)
            if cache.state in ("live", "archived"):
                assert Path(cache.host_path).is_dir(), (what, cache)
        for cache_id, tree in trees.items():
            if not Path(caches()[cache_id].host_path).is_dir():
                document = record(s3_client, s3_bucket, cache_id, tree)
                assert document is not None, what
                assert verify_key(store, document["object_key"]) == [], what
    assert sum(outcomes.values()) == TRIALS, outcomes
    final = cli(archive_project, "teardown", "--archive", "--yes")
    assert final.exit_code == 0, final.output
    assert all(c.state == "torn-down" for c in caches().values())


def s3_client_for_env() -> Any:
    return s3_client(os.environ)


def _in_place() -> list[Any]:
    return [c for c in caches().values() if Path(c.host_path).is_dir()]
