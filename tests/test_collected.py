"""What host B's routine `gc --remote` collected by rule, host A's audit, restore and teardown
call collected, by which run, host and rule, as `verify` does; what went with no gc record
of it is still missing. Two homes on one bucket, the demo engine and the real S3 server."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive.layout import blob_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import GcRecords, record_removal
from lifecycle.archive.store import BlobStore
from lifecycle.archive.verify import fetch_verified
from lifecycle.audit.verify import BlobChecker, archived_record
from lifecycle.ledger.archives import ArchiveRecord
from tests.archive_support import keys, read_json
from tests.test_gc import POLICY, _grow_and_boot, _json, _nights
from tests.trust_support import PREFIX, cli

pytestmark = [pytest.mark.docker, pytest.mark.s3]


@dataclass(frozen=True)
class Swept:
    """Two nights archived by host A, then host B's gc: night 0's result, its boot's record and
    the version of each cache it left are collected; night 1's result, pinned by B, is kept."""

    url: str
    boots: tuple[dict[str, Any], dict[str, Any]]
    results: tuple[dict[str, Any], dict[str, Any]]
    collected: str  # how verify begins its note: `collected by gc g-… on HOST at `


def _swept(project: Path, tmp_path: Path, s3_bucket: str) -> Swept:
    (b0, r0), (b1, r1) = _nights(project, 2)
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    assert cli(project, "pin", r1["id"], env=host_b).exit_code == 0  # for the team only
    swept = _json(project, "gc", "--remote", *POLICY, "--yes", env=host_b)
    run_id = swept["result"]["run_id"]
    url = f"s3://{s3_bucket}/{PREFIX}"
    return Swept(url, (b0, b1), (r0, r1), f"collected by gc {run_id} on {socket.gethostname()} at ")


def _lose(s3_client: Any, s3_bucket: str, prefix: str) -> None:
    """Delete by hand, with no gc record of it, every object under `prefix`: a real loss."""
    [key] = keys(s3_client, s3_bucket, f"{PREFIX}/{prefix}")
    s3_client.delete_object(Bucket=s3_bucket, Key=key)


def test_audit_result_from_the_archive_says_the_chain_ends_where_a_gc_collected_it(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    swept = _swept(archive_project, tmp_path, s3_bucket)
    collected, kept = (r["id"] for r in swept.results)
    text = cli(archive_project, "audit", "result", collected, "--from", swept.url)
    assert text.exit_code == 0, text.output  # as verify: collected by rule is no difference
    lines = text.stdout.splitlines()
    assert lines[0] == f"# audit of result {collected}, from {swept.url}"
    assert lines[1].startswith(f"result {collected}: {swept.url}/results/{collected}/"), lines
    assert f": {swept.collected}" in lines[1] and f"({' '.join(POLICY)}: a result " in lines[1]
    assert lines[1].endswith(": the chain ends there"), lines
    report = json.loads(
        cli(archive_project, "audit", "result", collected, "--from", swept.url, "--json").stdout
    )
    assert (report["format"], report["target"], report["kind"]) == (
        "lifecycle-audit-collected/1", collected, "result",
    )  # fmt: skip
    [(record, note)] = report["collected"].items()
    assert record.startswith(f"{swept.url}/results/{collected}/") and note.startswith(
        swept.collected
    )

    _lose(s3_client, s3_bucket, f"results/{kept}/")  # lost: no gc record names it
    lost = cli(archive_project, "audit", "result", kept, "--from", swept.url)
    assert lost.exit_code == 1 and "missing: no result" in lost.stderr, lost.output
    assert "collected" not in lost.output


def test_restore_of_a_tree_a_gc_collected_names_the_run_and_restores_nothing(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    swept = _swept(archive_project, tmp_path, s3_bucket)
    use = swept.boots[0]["caches"][0]
    cache_id, tree = use["cache_id"], use["tree_digest_after"]
    restored = cli(archive_project, "restore", f"{cache_id}@{tree[:12]}")
    assert restored.exit_code == 1 and restored.stdout == "", restored.output
    [line] = restored.stderr.splitlines()
    assert line.startswith(
        f"restore of {cache_id} from {swept.url} failed: nothing to restore: version"
        f" {tree[:12]} of cache {cache_id} was {swept.collected}"
    ), line
    assert f"({' '.join(POLICY)}: a version " in line

    newest = next(u for u in swept.boots[1]["caches"] if u["cache_id"] == cache_id)
    _lose(s3_client, s3_bucket, f"caches/{cache_id}/versions/{newest['tree_digest_after']}.")
    lost = cli(archive_project, "restore", f"{cache_id}@{newest['tree_digest_after'][:12]}")
    assert lost.exit_code == 1 and "no version" in lost.stderr and "archived at" in lost.stderr
    assert "collected" not in lost.output, lost.output


def test_teardown_keeps_a_cache_whose_evidence_a_gc_collected_and_says_so_not_missing(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    swept = _swept(archive_project, tmp_path, s3_bucket)
    done = cli(archive_project, "teardown", "--yes", "--json")
    assert done.exit_code == 0, done.output  # kept by policy, as a cache not archived is
    caches = json.loads(done.stdout)["plan"]["caches"]
    assert len(caches) == 4 and {c["action"] for c in caches} == {"keep"}, caches
    for cache in caches:
        why = "; ".join(cache["why"])
        assert (cache["archive_state"], cache["problem"]) == ("collected", False), cache
        assert "missing" not in why and swept.collected in why, why
        assert f"/results/{swept.results[0]['id']}/" in why  # the record of night 0's result
        assert why.endswith("(--archive archives it first)"), why

    kept = swept.results[1]["id"]
    _lose(s3_client, s3_bucket, f"results/{kept}/")  # lost: no gc record names it
    lost = cli(archive_project, "teardown", "--yes")
    assert lost.exit_code == 1, lost.output
    assert f"result {kept}: {swept.url}/results/{kept}/" in lost.stdout
    assert ".json: missing" in lost.stdout


EVERY = ("--older-than", "0s", "--grace", "0s")  # no version kept: every one of them goes


def test_audit_cache_from_the_archive_says_each_version_a_gc_collected_and_a_loss_missing(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    [(booted, _)] = _nights(archive_project, 1)
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    run_id = _json(archive_project, "gc", "--remote", *EVERY, "--yes", env=host_b)["result"][
        "run_id"
    ]
    url, cache_id = f"s3://{s3_bucket}/{PREFIX}", booted["caches"][0]["cache_id"]
    text = cli(archive_project, "audit", "cache", cache_id, "--from", url)
    assert text.exit_code == 0, text.output  # as verify and audit result --from say of it
    [title, *lines] = text.stdout.splitlines()
    assert title == f"# audit of cache {cache_id}, from {url}" and lines, text.stdout
    for line in lines:
        assert line.startswith(f"cache {cache_id}: {url}/caches/{cache_id}/versions/"), line
        assert f": collected by gc {run_id} on {socket.gethostname()} at " in line, line
        assert f"({' '.join(EVERY)}: a version the policy did not keep" in line, line
    report = _json(archive_project, "audit", "cache", cache_id, "--from", url)
    assert (report["format"], report["kind"]) == ("lifecycle-audit-collected/1", "cache")
    assert len(report["collected"]) == len(lines)

    # A later night archives a new version and a result on it; that version is then lost by
    # hand: every version is gone again, but one a result there stands on was no gc's to take.
    _grow_and_boot(archive_project, "n1")
    _lose(s3_client, s3_bucket, f"caches/{cache_id}/versions/")
    lost = cli(archive_project, "audit", "cache", cache_id, "--from", url)
    assert lost.exit_code == 1 and "missing" in lost.stderr, lost.output
    assert "collected" not in lost.output


def _store(s3_client: Any, s3_bucket: str) -> BlobStore:
    return BlobStore(s3_client, ArchiveLocation(s3_bucket, PREFIX))


def test_a_gc_record_that_lies_never_makes_a_loss_behind_a_record_still_there_collected(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    [(_, result)] = _nights(archive_project, 1)
    url, store = f"s3://{s3_bucket}/{PREFIX}", _store(s3_client, s3_bucket)
    [result_key] = keys(s3_client, s3_bucket, f"{PREFIX}/results/{result['id']}/")
    named = read_json(s3_client, s3_bucket, result_key)
    boot = named["boot"]["key"]  # the records the result's record names, there still
    [one, other, *_] = [ref for ref in named["caches"] if ref["record"]]
    version = one["record"]["key"]
    fingerprint = read_json(s3_client, s3_bucket, f"{PREFIX}/{other['record']['key']}")
    blob = blob_key(fingerprint["fingerprint"]["sha256"])  # named by the other version
    # A gc record written as gc writes one, well named, that says it removed all three. No gc
    # did (each is named by a record there, which a gc removes first); they are lost by hand.
    lie = {kind: f"{kind}: said by a record no gc wrote" for kind in ("boot", "version", "blob")}
    run_id = "g-20260101T000000-abcdef"
    at = "2026-01-01T00:00:00+00:00"
    record_removal(store, run_id, "--older-than 0s", [boot, version, blob], lie, at)
    for key in (boot, version, blob):
        s3_client.delete_object(Bucket=s3_bucket, Key=f"{PREFIX}/{key}")

    for source in ((), ("--from", url)):
        checked = cli(archive_project, "verify", result["id"], *source, "--json")
        assert checked.exit_code == 1, checked.output
        problems = json.loads(checked.stdout)["problems"]
        for key in (boot, version, blob):
            assert any(key in p and "missing" in p for p in problems), (key, problems)
        assert run_id not in checked.stdout
    cache_id, tree = one["cache_id"], one["tree_digest"]
    for target in (cache_id, f"{cache_id}@{tree[:12]}"):  # no version of it is there now
        checked = cli(archive_project, "verify", target, "--from", url)
        assert checked.exit_code == 1 and f"missing: result {result['id']} there" in (
            checked.stdout
        ), checked.output
        assert run_id not in checked.output
    audited = cli(archive_project, "audit", "cache", cache_id, "--from", url)
    assert audited.exit_code == 1 and f"{version}: missing: result " in audited.stderr
    restored = cli(archive_project, "restore", f"{cache_id}@{tree[:12]}")
    assert restored.exit_code == 1 and "no version" in restored.stderr, restored.output
    assert run_id not in audited.output + restored.output


class _SweptMeanwhile(BlobChecker):
    """A verify that has read a record, and host B's gc sweeps before it checks the blobs."""

    def __init__(self, sweep: Callable[[], None]) -> None:
        super().__init__()
        self.sweep = sweep

    def check(self, store: BlobStore, claims: Any) -> Any:
        self.sweep()
        return super().check(store, claims)


class _SweepsBeforeBlobs(BlobStore):
    """A teardown's check that has read a record, and host B's gc sweeps before the blobs."""

    sweep: Callable[[], None]

    def check_blobs(self, blobs: Any, workers: int) -> Any:
        self.sweep()
        return super().check_blobs(blobs, workers)


def _sweep_once(project: Path, tmp_path: Path) -> tuple[Callable[[], None], list[str]]:
    """Host B's gc, every version going, run at the first call; the run's id, once it ran."""
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    swept: list[str] = []

    def sweep() -> None:
        if not swept:
            done = _json(project, "gc", "--remote", *EVERY, "--yes", env=host_b)
            swept.append(done["result"]["run_id"])

    return sweep, swept


def test_a_blob_a_gc_removed_with_the_record_verify_had_just_read_is_collected_not_missing(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    [(booted, _)] = _nights(archive_project, 1)
    cache_id = booted["caches"][0]["cache_id"]
    [version] = keys(s3_client, s3_bucket, f"{PREFIX}/caches/{cache_id}/versions/")
    sweep, swept = _sweep_once(archive_project, tmp_path)
    store = _store(s3_client, s3_bucket)
    relative = store.relative(version)
    found = archived_record(store, relative, None, _SweptMeanwhile(sweep))
    assert swept and not keys(s3_client, s3_bucket, version), "the record went meanwhile"
    assert [f.problem for f in found if f.problem] == [], found
    [collected] = found
    assert (collected.subject, collected.status) == (store.where(relative), "collected")
    assert collected.note is not None and collected.note.startswith(f"collected by gc {swept[0]} ")


def test_teardowns_check_of_a_record_swept_with_its_blobs_meanwhile_says_collected(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    [(booted, _)] = _nights(archive_project, 1)
    use = booted["caches"][0]
    [version] = keys(s3_client, s3_bucket, f"{PREFIX}/caches/{use['cache_id']}/versions/")
    store = _SweepsBeforeBlobs(s3_client, ArchiveLocation(s3_bucket, PREFIX))
    store.sweep, swept = _sweep_once(archive_project, tmp_path)
    sha = version.rsplit(".", 2)[1]  # its key names the sha256 of its bytes
    url = f"s3://{s3_bucket}/{PREFIX}"
    archive = ArchiveRecord(use["cache_id"], url, version, sha, True, 0, 0, "", None)
    checked = fetch_verified(store, archive, gc=GcRecords())
    assert swept and not keys(s3_client, s3_bucket, version), "the record went meanwhile"
    assert checked.problems == (), checked.problems
    [collected] = checked.collected
    assert collected.startswith(f"s3://{s3_bucket}/{version}: collected by gc {swept[0]} ")
