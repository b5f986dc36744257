"""What host B's routine `gc --remote` collected by rule, host A's audit, restore and teardown
call collected, by which run, host and rule, as `verify` does; what went with no gc record
of it is still missing. Two homes on one bucket, the demo engine and the real S3 server."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.archive_support import keys
from tests.test_gc import POLICY, _json, _nights
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
