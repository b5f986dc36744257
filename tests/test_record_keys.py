"""A record's key names what it is: a result's or a boot's id, a version's cache and tree. A
record whose own ids are not its key's is not that record, even when its key's sha256 is its
bytes' (another record's bytes copied under the key, by hand or by another tool): `audit`,
`verify` and `restore` refuse it, and the listings leave it out and name it, as they treat a
record whose bytes are not its name. The records are crafted on the real S3 server by hand, as
someone with write access to the bucket could."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.archive_support import keys, read_json
from tests.services import boot_demo, run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]

OTHER_TREE = "ab" * 32  # a tree no version holds


def _archived(project: Path) -> list[tuple[str, str]]:
    """A cold and a warm boot, a result of each, all archived with content: (boot, result)
    of each, oldest first."""
    made = []
    for mode in (("--cold",), ()):
        booted = boot_demo(project, *mode)
        added = run_lifecycle(
            project, "result", "add", booted["id"], "--name", "smoke", "--status", "pass", "--json"
        )
        assert added.exit_code == 0, added.output
        made.append((booted["id"], json.loads(added.stdout)["id"]))
    done = run_lifecycle(project, "archive", "--all", "--with-content")
    assert done.exit_code == 0, done.output
    return made


def _cache_id(client: Any, bucket: str, name: str) -> str:
    [found] = {k.split("/")[2] for k in keys(client, bucket, f"test/caches/{name}-")}
    return found


def _file_under(client: Any, bucket: str, key: str, other: str) -> str:
    """Put the record at `key` under `other` too (its bytes, so its sha256, unchanged): the URL
    of the copy."""
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=other, Body=body)
    return f"s3://{bucket}/{other}"


def _move_under(client: Any, bucket: str, kind: str, mine: str, theirs: str) -> str:
    """Replace the record of `mine` (a boot or a result) with `theirs`' bytes, under `mine`'s
    key: the URL of what is there now."""
    [own] = keys(client, bucket, f"test/{kind}/{mine}/")
    client.delete_object(Bucket=bucket, Key=own)
    [key] = keys(client, bucket, f"test/{kind}/{theirs}/")
    return _file_under(client, bucket, key, f"test/{kind}/{mine}/{key.rsplit('/', 1)[1]}")


def test_a_result_under_another_results_key_is_not_that_result(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    url = f"s3://{s3_bucket}/test"
    (_, mine), (_, theirs) = _archived(archive_project)
    crafted = _move_under(s3_client, s3_bucket, "results", mine, theirs)
    refused = f"{crafted}: holds result {theirs}, not the {mine} its key names"

    audit = run_lifecycle(archive_project, "audit", "result", mine, "--from", url, "--json")
    assert audit.exit_code == 1 and audit.stdout == "", audit.output
    assert refused in audit.stderr, audit.stderr
    verify = run_lifecycle(archive_project, "verify", mine, "--from", url, "--json")
    assert verify.exit_code == 1, verify.output
    assert refused in json.loads(verify.stdout)["problems"], verify.stdout


def test_a_result_record_holding_another_result_under_its_own_id_is_refused(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    """Another result's record with only its `result_id` changed to this one's (its result
    and digest, so not altered, and its chain), named by its new bytes: believed, `audit`
    answered for this result with the other's. It is not this result's record, as one filed
    under another's key is not."""
    url = f"s3://{s3_bucket}/test"
    (_, mine), (_, theirs) = _archived(archive_project)
    [own] = keys(s3_client, s3_bucket, f"test/results/{mine}/")
    [their_key] = keys(s3_client, s3_bucket, f"test/results/{theirs}/")
    body = json.dumps({**read_json(s3_client, s3_bucket, their_key), "result_id": mine}).encode()
    crafted = f"test/results/{mine}/{hashlib.sha256(body).hexdigest()}.json"
    s3_client.delete_object(Bucket=s3_bucket, Key=own)
    s3_client.put_object(Bucket=s3_bucket, Key=crafted, Body=body)
    refused = f"s3://{s3_bucket}/{crafted}: "

    audit = run_lifecycle(archive_project, "audit", "result", mine, "--from", url, "--json")
    assert audit.exit_code == 1 and audit.stdout == "", audit.output
    assert f"result {mine}: its record cannot be read: {refused}" in audit.stderr, audit.stderr
    assert f"result.id {theirs} is not the record's result_id {mine}" in audit.stderr, audit.stderr
    listed = run_lifecycle(archive_project, "results", "--from", url, "--json")
    assert listed.exit_code == 0, listed.output
    report = json.loads(listed.stdout)
    assert [row["id"] for row in report["results"]] == [theirs], report["results"]
    assert list(report["unreadable"]) == [refused.removesuffix(": ")], report["unreadable"]


def test_a_boot_under_another_boots_key_is_left_out_and_named(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    url = f"s3://{s3_bucket}/test"
    (mine, _), (theirs, _) = _archived(archive_project)
    crafted = _move_under(s3_client, s3_bucket, "boots", mine, theirs)

    listed = run_lifecycle(archive_project, "boots", "--from", url, "--json")
    assert listed.exit_code == 0, listed.output
    report = json.loads(listed.stdout)
    assert [row["id"] for row in report["boots"]] == [theirs], report["boots"]
    refused = f"holds boot {theirs}, not the {mine} its key names"
    assert report["unreadable"] == {crafted: refused}, report["unreadable"]
    assert f"\nleft out: cannot read {crafted}: {refused}\n" in f"\n{listed.stderr}", listed.stderr


def test_a_version_under_another_trees_key_is_neither_verified_nor_restored(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/test"
    _archived(archive_project)
    vllm = _cache_id(s3_client, s3_bucket, "vllm")
    versions = keys(s3_client, s3_bucket, f"test/caches/{vllm}/versions/")
    key = versions[-1]
    tree, sha, _ = key.rsplit("/", 1)[1].split(".")
    crafted = _file_under(
        s3_client, s3_bucket, key, f"test/caches/{vllm}/versions/{OTHER_TREE}.{sha}.json"
    )
    refused = f"{crafted}: holds tree {tree}, not the {OTHER_TREE} its key names"

    verify = run_lifecycle(
        archive_project, "verify", f"{vllm}@{OTHER_TREE[:8]}", "--from", url, "--json"
    )
    assert verify.exit_code == 1, verify.output
    assert refused in json.loads(verify.stdout)["problems"], verify.stdout

    elsewhere = tmp_path / "other-home"  # an empty home: nothing of the cache is live there
    restore = run_lifecycle(
        archive_project, "restore", f"{vllm}@{OTHER_TREE[:8]}", "--from", url,
        env={"LIFECYCLE_HOME": str(elsewhere)},
    )  # fmt: skip
    assert restore.exit_code == 1, restore.output
    assert refused in restore.stderr, restore.stderr
    assert not (elsewhere / "caches" / vllm).exists()


def test_another_caches_versions_under_this_caches_key_are_not_its_versions(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    url = f"s3://{s3_bucket}/test"
    _archived(archive_project)
    vllm, triton = (_cache_id(s3_client, s3_bucket, name) for name in ("vllm", "triton"))
    crafted = {
        _file_under(s3_client, s3_bucket, key, key.replace(f"/{vllm}/", f"/{triton}/"))
        for key in keys(s3_client, s3_bucket, f"test/caches/{vllm}/versions/")
    }

    verify = run_lifecycle(archive_project, "verify", triton, "--from", url, "--json")
    assert verify.exit_code == 1, verify.output
    problems = json.loads(verify.stdout)["problems"]
    for copy in crafted:
        assert f"{copy}: holds cache {vllm}, not the {triton} its key names" in problems, problems

    listed = run_lifecycle(archive_project, "caches", "--from", url, "--json")
    assert listed.exit_code == 0, listed.output
    report = json.loads(listed.stdout)
    ids = [row["id"] for row in report["caches"]]
    assert sorted(ids) == sorted(set(ids)) and {vllm, triton} <= set(ids), ids
    assert set(report["unreadable"]) == crafted, report["unreadable"]
