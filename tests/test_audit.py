"""`lifecycle audit` end to end on the demo engine, real dockerd and the real S3 server.

One night, once per module: build, boot cold, boot warm, a result on each, archive, teardown,
then the whole LIFECYCLE_HOME deleted. What the ledger said before is compared with what the
archive alone says after.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lifecycle.audit.render import PREDICATE_TYPE, STATEMENT_TYPE
from lifecycle.results.model import canonical_bytes
from tests.services import run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]


@dataclass(frozen=True)
class Night:
    """What the ledger said before the teardown, and where the archive is."""

    project: Path
    home: Path  # deleted once the ledger's answers were taken
    url: str
    boots: dict[str, dict[str, Any]]  # cold / warm -> the boot report
    results: dict[str, dict[str, Any]]  # cold / warm -> `result add --json`
    chains: dict[str, str]  # cold / warm -> `audit result --json` from the ledger, verbatim
    cache_audits: dict[str, dict[str, Any]]  # cache id -> `audit cache --json` from the ledger
    provenance: dict[str, Any]  # the warm result's statement, from the ledger
    shown: dict[str, Any]  # `lifecycle show demo/0.2 --json`
    teardown: str


def _cli(night_env: dict[str, str | None], project: Path, *args: str) -> Any:
    result = run_lifecycle(project, *args, env=night_env)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def night(
    tmp_path_factory: pytest.TempPathFactory, demo_images: None, s3_client: Any
) -> Iterator[Night]:
    """The demo night, recorded, archived, torn down, its ledger deleted."""
    top = tmp_path_factory.mktemp("night")
    repo = Path(__file__).resolve().parent.parent
    project = top / "project"
    for version in ("0.1", "0.2"):
        shutil.copytree(repo / f"manifests/demo/{version}", project / f"manifests/demo/{version}")
    (project / "hooks").mkdir()
    bucket = f"lifecycle-test-{secrets.token_hex(6)}"
    s3_client.create_bucket(Bucket=bucket)
    home = top / "home"
    url = f"s3://{bucket}/night"
    env: dict[str, str | None] = {"LIFECYCLE_HOME": str(home), "LIFECYCLE_ARCHIVE": None}
    try:
        _cli(env, project, "build", "demo/0.2")
        boots = {
            "cold": json.loads(_cli(env, project, "boot", "demo/0.2", "--cold", "--json").stdout),
            "warm": json.loads(_cli(env, project, "boot", "demo/0.2", "--json").stdout),
        }
        results = {
            mode: json.loads(
                _cli(env, project, "result", "add", boots[mode]["id"], "--name", f"{mode}-smoke",
                     "--status", "pass", "--metric", f"boot={mode}", "--json").stdout
            )
            for mode in boots
        }  # fmt: skip
        _cli(env, project, "archive", "--all", "--to", url)
        chains = {
            mode: _cli(env, project, "audit", "result", r["id"], "--json").stdout
            for mode, r in results.items()
        }
        provenance_file = top / "provenance.json"
        warm_id = results["warm"]["id"]
        _cli(env, project, "audit", "result", warm_id, "--provenance", str(provenance_file))
        caches = [u["cache_id"] for u in boots["cold"]["caches"]]
        cache_audits = {
            c: json.loads(_cli(env, project, "audit", "cache", c, "--json").stdout) for c in caches
        }
        shown = json.loads(_cli(env, project, "show", "demo/0.2", "--json").stdout)
        teardown = _cli(env, project, "teardown", "--yes").stdout
        shutil.rmtree(home)
        yield Night(
            project, home, url, boots, results, chains, cache_audits,
            json.loads(provenance_file.read_text()), shown, teardown,
        )  # fmt: skip
    finally:
        for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                s3_client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        s3_client.delete_bucket(Bucket=bucket)


def _from_s3(night: Night, *args: str) -> Any:
    env: dict[str, str | None] = {"LIFECYCLE_HOME": str(night.home)}
    return run_lifecycle(night.project, *args, "--from", night.url, env=env)


def test_the_night_was_torn_down_and_its_ledger_deleted(night: Night) -> None:
    assert "removed 4 caches" in night.teardown
    assert not night.home.exists()


@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_audit_from_s3_alone_gives_the_chain_the_ledger_gave(night: Night, mode: str) -> None:
    result_id = night.results[mode]["id"]
    after = _from_s3(night, "audit", "result", result_id, "--json")
    assert after.exit_code == 0, after.output
    assert after.stdout == night.chains[mode]  # the same JSON, byte for byte
    assert not night.home.exists(), "auditing from S3 made no ledger"


def test_the_chain_runs_from_result_to_patches(night: Night) -> None:
    cold, warm = (json.loads(night.chains[m]) for m in ("cold", "warm"))
    boot = night.boots["warm"]
    assert warm["result"]["id"] == night.results["warm"]["id"]
    assert warm["result"]["metrics"] == {"boot": "warm"} and warm["result"]["status"] == "pass"
    assert warm["boot"]["id"] == boot["id"] and warm["boot"]["host"] == boot["host"]
    assert warm["boot"]["started_at"] == boot["started_at"] and warm["boot"]["profile"] == "serve"
    assert warm["boot"]["hooks"] == [] and warm["boot"]["instrumented"] is False
    assert {c["mode"] for c in cold["caches"]} == {"cold"}
    assert {c["mode"] for c in warm["caches"]} == {"warm"}
    after_cold = {c["id"]: c["tree_digest"] for c in cold["caches"]}
    for cache in warm["caches"]:
        assert cache["tree_digest_before"] == after_cold[cache["id"]]
        assert cache["archive"]["location"] == night.url
        # The exact version the result stood on: the record of that tree, named by its bytes.
        version = f"{night.url}/caches/{cache['id']}/versions/{cache['tree_digest']}."
        assert cache["archive"]["record"].startswith(version)
        assert cache["archive"]["record"].endswith(f".{cache['archive']['record_sha256']}.json")
        assert cache["archive"]["tree_digest"] == cache["tree_digest"]
    # The warm boot changed some caches (a JIT log grows on every boot) before the night was
    # archived: the trees the cold result stood on in those is gone, and its audit says so.
    assert warm["warnings"] == []
    changed = sorted(
        u["cache_id"] for u in boot["caches"] if u["files_added"] or u["files_changed"]
    )
    assert changed and [w.split(":")[0] for w in cold["warnings"]] == [
        f"cache {c}" for c in changed
    ]
    assert all(w.endswith("is not archived; it cannot be restored") for w in cold["warnings"])
    assert {c["id"]: c["archive"] for c in cold["caches"] if c["id"] in changed} == {
        c: None for c in changed
    }
    uses = {u["cache_id"]: u for u in boot["caches"]}
    assert {c["id"]: c["tree_digest"] for c in warm["caches"]} == {
        i: u["tree_digest_after"] for i, u in uses.items()
    }
    assert warm["image"]["id"] == boot["image_id"]
    assert warm["image"]["labels"]["lifecycle.manifest.digest"] == night.shown["digest"]
    assert warm["manifest"]["digest"] == night.shown["digest"] == boot["manifest_digest"]
    assert warm["manifest"]["pins"]["vllm"] == "0.2.0"
    tuned = warm["manifest"]["tuned"]["gpu_memory_utilization"]
    assert (tuned["status"], tuned["carried_from"]) == ("carried", "demo/0.1")  # as ported
    assert warm["patches"] == night.shown["patches"]


def test_the_text_chain_names_every_step(night: Night) -> None:
    text = _from_s3(night, "audit", "result", night.results["cold"]["id"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0] == f"# audit of result {night.results['cold']['id']}, from {night.url}"
    steps = [line.split(" ")[1] for line in lines if line.startswith("<- ")]
    assert steps == ["boot", "cache", "cache", "cache", "cache", "image", "manifest", "patch"]
    assert "tuned gpu_memory_utilization=0.92 (carried from demo/0.1)" in text.stdout


def test_audit_cache_from_s3_lists_every_boot_and_result(night: Night) -> None:
    for cache_id, before in night.cache_audits.items():
        after = _from_s3(night, "audit", "cache", cache_id, "--json")
        assert after.exit_code == 0, after.output
        report = json.loads(after.stdout)
        # Both boots and both results, each once (a demo boot takes about a second, so two may
        # share a timestamp: the order within one second is not asserted).
        modes = {b["id"]: b["mode"] for b in report["boots"]}
        assert modes == {night.boots[m]["id"]: m for m in ("cold", "warm")}
        assert sorted(r["id"] for r in report["results"]) == sorted(
            night.results[m]["id"] for m in ("cold", "warm")
        )
        assert report["boots"] == before["boots"] and report["results"] == before["results"]
        assert report["archive"] == before["archive"]
        assert report["versions"] == before["versions"] and len(report["versions"]) == 1
        assert before["cache"]["state"] == "archived" and report["cache"]["state"] is None


def test_audit_cache_from_s3_leaves_out_and_names_a_record_it_cannot_read(
    night: Night, s3_client: Any
) -> None:
    """One damaged version record or boot record of a cache made its whole audit fail: it is
    left out and named, and the audit answers from the rest; a cache none of whose versions
    can be read is that answer, in one line naming each."""
    cache_id = next(iter(night.cache_audits))
    before = night.cache_audits[cache_id]
    bucket, prefix = night.url.removeprefix("s3://").split("/", 1)
    tree = before["archive"]["tree_digest"]
    version = f"{prefix}/caches/{cache_id}/versions/{tree}.{'0' * 64}.json"
    boot = f"{prefix}/boots/{night.boots['cold']['id']}/{'0' * 64}.json"
    alone = f"{prefix}/caches/vllm-0123456789ab/versions/{tree}.{'0' * 64}.json"
    try:
        for key in (version, boot, alone):  # garbage, as a half-written object would be
            s3_client.put_object(Bucket=bucket, Key=key, Body=b"{half")
        after = _from_s3(night, "audit", "cache", cache_id, "--json")
        assert after.exit_code == 0, after.output
        report = json.loads(after.stdout)
        assert report["boots"] == before["boots"] and report["versions"] == before["versions"]
        unread = {f"s3://{bucket}/{key}" for key in (version, boot)}
        assert report["unreadable"].keys() == unread, report
        text = _from_s3(night, "audit", "cache", cache_id)
        assert text.exit_code == 0, text.output
        for url in unread:
            assert f"left out: cannot read {url}: " in text.stderr, text.stderr

        unreadable = _from_s3(night, "audit", "cache", "vllm-0123456789ab")
        assert unreadable.exit_code == 1, unreadable.output
        [line] = unreadable.stderr.strip().splitlines()
        said = f"cache vllm-0123456789ab: no version of it can be read: s3://{bucket}/{alone}: "
        assert said in line, line
    finally:
        s3_client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in (version, boot, alone)]}
        )


def test_provenance_is_an_in_toto_statement_whose_digests_are_the_ledgers(night: Night) -> None:
    statement = night.provenance
    chain = json.loads(night.chains["warm"])
    assert statement["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE
    [subject] = statement["subject"]
    result = night.results["warm"]
    assert subject["name"] == f"result/{result['id']}"
    canonical = {k: v for k, v in chain["result"].items() if k != "digest"}
    assert subject["digest"] == {"sha256": result["digest"]}
    assert hashlib.sha256(canonical_bytes(canonical)).hexdigest() == result["digest"]
    predicate = statement["predicate"]
    boot = night.boots["warm"]
    assert predicate["manifest"]["digest"] == {"sha256": boot["manifest_digest"]}
    assert predicate["image"]["digest"] == {"sha256": boot["image_id"].removeprefix("sha256:")}
    assert [(p["name"], p["digest"]["sha256"]) for p in predicate["patches"]] == [
        (p["file"], p["sha256"]) for p in night.shown["patches"]
    ]
    uses = {u["cache_id"]: u["tree_digest_after"] for u in boot["caches"]}
    assert {c["id"]: c["treeDigest"] for c in predicate["caches"]} == uses
    for cache in predicate["caches"]:
        assert cache["archive"]["digest"]["sha256"] == next(
            c["archive"]["record_sha256"] for c in chain["caches"] if c["id"] == cache["id"]
        )
    # The same statement from the archive alone.
    again = night.home.parent / "provenance-from-s3.json"
    written = _from_s3(night, "audit", "result", result["id"], "--provenance", str(again))
    assert written.exit_code == 0, written.output
    assert json.loads(again.read_text()) == statement
    # Written again over the statement it wrote: the routine. Over any other file: refused.
    written = _from_s3(night, "audit", "result", result["id"], "--provenance", str(again))
    assert written.exit_code == 0 and json.loads(again.read_text()) == statement
    # Named through a link: written where it points, the link kept.
    link = night.home.parent / "provenance-link.json"
    link.symlink_to(again)
    again.write_text(again.read_text().replace('"_type"', '"old": 1, "_type"', 1))
    written = _from_s3(night, "audit", "result", result["id"], "--provenance", str(link))
    assert written.exit_code == 0, written.output
    assert link.is_symlink() and json.loads(again.read_text()) == statement
    manifest = night.project / "manifests/demo/0.2/manifest.yaml"
    before = manifest.read_bytes()
    slip = _from_s3(night, "audit", "result", result["id"], "--provenance", str(manifest))
    assert slip.exit_code == 2, slip.output
    assert slip.stderr.strip() == (
        f"{manifest} exists and is not an in-toto Statement `audit --provenance` wrote: not"
        " replaced (remove it, or name another file)"
    )
    assert manifest.read_bytes() == before


def test_without_a_ledger_audit_says_where_else_to_look(night: Night) -> None:
    env: dict[str, str | None] = {"LIFECYCLE_HOME": str(night.home)}
    result = run_lifecycle(night.project, "audit", "result", "r-x", env=env)
    assert result.exit_code == 2 and "--from s3://" in result.stderr
    missing = _from_s3(night, "audit", "result", "r-20990101T000000-000000")
    assert missing.exit_code == 1
    assert f"{night.url}/results/r-20990101T000000-000000/: missing" in missing.stderr
    assert not night.home.exists()
