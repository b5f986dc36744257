"""This host's copies of the archive's records (lifecycle.archive.copies), with the demo engine
booted for real and the real S3 server: a listing (boots, results) or a plan reads each record
from S3 once; a copy that is not the record is read again; a record the archive no longer holds
is forgotten; and a copy never hides from `verify` what the server holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive.catalog import archived_boots
from lifecycle.archive.copies import RecordCopies
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import BlobStore
from lifecycle.gc import take_snapshot
from lifecycle.home import Home
from lifecycle.results.archive import archived_results
from tests.archive_support import boot_records, damage, versions
from tests.trust_support import PREFIX, cli, home

pytestmark = [pytest.mark.docker, pytest.mark.s3]


def _json(project: Path, *args: str) -> Any:
    result = cli(project, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class Gets:
    """GetObject calls the client made since the last look."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        client.meta.events.register("before-call.s3.GetObject", self._seen)

    def _seen(self, **_: Any) -> None:
        self.count += 1

    def since(self) -> int:
        count, self.count = self.count, 0
        return count


def test_records_are_read_from_s3_once_and_a_copy_that_is_not_the_record_is_not_used(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    cold = _json(archive_project, "boot", "demo/0.2", "--cold")
    warm = _json(archive_project, "boot", "demo/0.2")
    _json(archive_project, "archive", "--all")
    url = f"s3://{s3_bucket}/{PREFIX}"
    location = ArchiveLocation.parse(url)
    copies = RecordCopies(Home(home()), location)
    store = BlobStore(s3_client, location, copies)
    gets = Gets(s3_client)

    # The first listing reads from S3 and keeps a copy of each record; the next reads none.
    listed = _json(archive_project, "boots", "--from", url)["boots"]
    assert {b["id"] for b in listed} == {cold["id"], warm["id"]}
    kept = sorted(p.relative_to(copies.root).as_posix() for p in copies.root.rglob("*.json"))
    assert len(kept) == 2 and all(key.startswith("boots/") for key in kept), kept
    assert {b.boot.id for b in archived_boots(store)[0]} == {cold["id"], warm["id"]}
    assert gets.since() == 0
    add = ("result", "add", warm["id"], "--name", "smoke", "--status", "pass")
    result = _json(archive_project, *add)  # archived at once (LIFECYCLE_ARCHIVE)
    listed = _json(archive_project, "results", "--from", url)["results"]
    assert [r["id"] for r in listed] == [result["id"]]
    gets.since()
    assert [r.result["id"] for r in archived_results(store)[0]] == [result["id"]]
    assert gets.since() == 0
    snapshot = take_snapshot(store)  # what a plan and gc read: every record (versions too)
    read_once = gets.since()
    assert read_once == len(snapshot.records) - 3 > 0  # all but the boots' and result's copies
    assert take_snapshot(store).records.keys() == snapshot.records.keys()
    assert gets.since() == 0

    # A copy that is not the record (cut short, or edited on this host) is read from S3 again.
    (record,) = boot_records(s3_client, s3_bucket, PREFIX, warm["id"])
    copy = copies.root / store.relative(record["object_key"])
    copy.write_bytes(copy.read_bytes()[:100])
    gets.since()  # the test's own read of the record
    again = {b.boot.id: b for b in archived_boots(store)[0]}
    assert gets.since() == 1
    assert again[warm["id"]].boot.outcome == "ok"
    assert json.loads(copy.read_bytes())["boot"]["id"] == warm["id"]  # whole again

    # A record the archive no longer holds (a gc took it) is no longer listed, nor kept here.
    (gone,) = boot_records(s3_client, s3_bucket, PREFIX, cold["id"])
    s3_client.delete_object(Bucket=s3_bucket, Key=gone["object_key"])
    assert [b.boot.id for b in archived_boots(store)[0]] == [warm["id"]]
    assert not (copies.root / store.relative(gone["object_key"])).exists()
    assert not (copies.root / "boots" / cold["id"]).exists()

    # What the server holds is what verify judges, whatever copy this host keeps.
    cache_id = _json(archive_project, "caches")["caches"][0]["id"]
    (version,) = versions(s3_client, s3_bucket, PREFIX, cache_id)
    assert (copies.root / store.relative(version["object_key"])).is_file()
    damage(s3_client, s3_bucket, version["object_key"])
    checked = cli(archive_project, "verify", cache_id, "--json")
    assert checked.exit_code == 1, checked.output
    problems = " ".join(json.loads(checked.stdout)["problems"])
    assert "sha256" in problems, problems
    # A listing reads the copy: the record it names is the one its key names.
    caches = _json(archive_project, "caches", "--from", url)["caches"]
    assert cache_id in {c["id"] for c in caches}
