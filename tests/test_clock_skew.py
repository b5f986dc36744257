"""A host whose clock runs minutes ahead of the S3 server's, as one without NTP does: S3 takes
its requests (signed up to 15 minutes off), and lifecycle must not read the server's ages on
it. The process runs under libfaketime (the clock of the whole process, boto3's signing too),
against the real S3 server, dockerd and the demo engine."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.archive_support import keys, sweep_waiting
from tests.trust_support import PREFIX, cli, process

pytestmark = [pytest.mark.docker, pytest.mark.s3]

AHEAD_S = 880  # S3 refuses a request signed over 900 s off the server's clock


def _ahead(seconds: int = AHEAD_S) -> dict[str, str]:
    """The environment of a process whose clock runs `seconds` ahead of this one's."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail("libfaketime missing: .ci/setup installs faketime")
        pytest.skip("libfaketime is not installed (apt install faketime)")
    return {"LD_PRELOAD": str(found[0]), "FAKETIME": f"+{seconds}"}


def _json(project: Path, *args: str, env: dict[str, str | None] | None = None) -> Any:
    result = cli(project, *args, "--json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _stored_at(client: Any, bucket: str, key: str) -> datetime:
    """When the server stored an object, on its own clock."""
    modified: datetime = client.head_object(Bucket=bucket, Key=key)["LastModified"]
    return modified.astimezone(UTC)


def test_a_host_ahead_of_the_server_still_sees_a_sweep_deleting_what_its_archive_relies_on(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    """Host A's sweep wrote its intent and waits to delete the files host B's archive relies
    on. B's clock runs 14 min 40 s ahead: read on it, the intent was "stored over 15 minutes
    ago", a sweep that stopped, and B's teardown removed the cache A was about to take the
    files of. Read on the server's clock, the intent is recent: the cache stays."""
    _json(archive_project, "boot", "demo/0.2", "--cold")
    _json(archive_project, "archive", "--all", "--with-content")
    _json(archive_project, "teardown", "--yes")  # A's caches now only in the archive
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    gc = sweep_waiting(archive_project, s3_client, s3_bucket, 120)
    try:
        intent = keys(s3_client, s3_bucket, f"{PREFIX}/gc-intents/")[0]
        _json(archive_project, "boot", "demo/0.2", "--cold", env=host_b)
        _json(archive_project, "archive", "--all", "--with-content", env=host_b)
        # On B's clock the intent must look older than the 15 minutes a sweep may delete in.
        stored = _stored_at(s3_client, s3_bucket, intent)
        while (datetime.now(UTC) - stored).total_seconds() + AHEAD_S < 15 * 60 + 5:
            time.sleep(1)
        kept = process(archive_project, "teardown", "--yes", env={**host_b, **_ahead()})
        assert gc.poll() is None, "the sweep was still waiting to delete"
        assert kept.returncode != 0, kept.stdout + kept.stderr
        assert "a gc at this location may be removing it" in kept.stderr + kept.stdout
    finally:
        gc.kill()
        gc.communicate()
    live = _json(archive_project, "caches", env=host_b)["caches"]
    assert live and {c["state"] for c in live} == {"archived"}  # in place, not removed


def test_gc_on_a_host_ahead_of_the_server_keeps_what_the_server_stored_within_the_grace(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    """`--grace 10m` keeps every object the server stored in the last 10 minutes (an archive
    in flight has sent its blobs, not yet the record naming them). On a clock 14 min 40 s
    ahead, objects stored a minute ago were "25 minutes old": gc collected them."""
    _json(archive_project, "boot", "demo/0.2", "--cold")
    _json(archive_project, "archive", "--all", "--with-content")
    before = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    swept = process(
        archive_project, "gc", "--remote", "--older-than", "0s", "--grace", "10m", "--yes",
        "--json", env=_ahead(),
    )  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout)["plan"]["objects"] == [], swept.stdout
    after = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    assert before <= after, sorted(before - after)
