"""`lifecycle verify` on real demo boots archived to the real S3 server: what differs is named."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lifecycle.fingerprint import Fingerprint
from tests.archive_support import keys, read_json
from tests.services import ArchiveTarget, boot_demo, run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, demo_images: None) -> Path:
    """The demo manifests, demo/0.2 built once for the module; each test has its own ledger."""
    repo = Path(__file__).resolve().parent.parent
    root = tmp_path_factory.mktemp("verify") / "project"
    for version in ("0.1", "0.2"):
        shutil.copytree(repo / f"manifests/demo/{version}", root / f"manifests/demo/{version}")
    (root / "hooks").mkdir()
    # Module fixtures run before the per-test home is set: build in a home of the module's own.
    home = {"LIFECYCLE_HOME": str(tmp_path_factory.mktemp("build-home"))}
    built = run_lifecycle(root, "build", "demo/0.2", env=home)
    assert built.exit_code == 0, built.output
    return root


def _night(project: Path, target: ArchiveTarget, *archive: str) -> tuple[str, dict[str, Any]]:
    """Boot cold, add a result, archive: the result id and the flashinfer cache's row."""
    booted = boot_demo(project, "--cold")
    added = run_lifecycle(
        project, "result", "add", booted["id"], "--name", "smoke", "--status", "pass", "--json"
    )
    assert added.exit_code == 0, added.output
    done = run_lifecycle(project, "archive", "--all", "--to", target.url, *archive)
    assert done.exit_code == 0, done.output
    rows = json.loads(run_lifecycle(project, "caches", "--json").stdout)["caches"]
    [cache] = [r for r in rows if r["cache_name"] == "flashinfer"]
    return json.loads(added.stdout)["id"], cache


def _verify(project: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = run_lifecycle(project, "verify", *args, "--json")
    assert result.exit_code in (0, 1), result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return result.exit_code, report


@pytest.mark.parametrize("where", ["blob", "pack"])
def test_a_flipped_byte_and_an_altered_blob_are_each_named(
    project: Path, archive_target: ArchiveTarget, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle.archive import packs

    if where == "blob":  # every cache file its own object
        monkeypatch.setattr(packs, "PACK_BLOB_MAX", -1)
    result_id, cache = _night(project, archive_target, "--with-content")
    for target in (result_id, cache["id"]):
        code, report = _verify(project, target)
        assert (code, report["ok"], report["problems"]) == (0, True, []), report
    checked = {c["subject"] for c in _verify(project, result_id)[1]["checked"]}
    assert any(c.startswith(f"{archive_target.url}/results/{result_id}/") for c in checked)
    assert any(c.startswith(f"{archive_target.url}/boots/") for c in checked)
    assert any(
        c.startswith(f"{archive_target.url}/caches/{cache['id']}/versions/") for c in checked
    )

    root = Path(cache["host_path"])
    files = [e for e in Fingerprint.from_json(Path(cache["scan_path"]).read_text()).entries]
    files = sorted((e for e in files if e.kind == "file" and e.size > 0), key=lambda e: -e.size)
    flipped, altered = files[0], next(e for e in files[1:] if e.sha256 != files[0].sha256)
    with (root / flipped.path).open("r+b") as handle:  # one byte, in the middle
        handle.seek(flipped.size // 2)
        byte = handle.read(1)
        handle.seek(flipped.size // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    assert altered.sha256 is not None
    key = f"{archive_target.prefix}/blobs/sha256/{altered.sha256[:2]}/{altered.sha256}"
    what = f"cache file {altered.path} of {cache['id']}"
    if where == "pack":  # the pack holding it: every small file of the cache is in one
        versions = f"{archive_target.prefix}/caches/{cache['id']}/versions/"
        [listed] = archive_target.client.list_objects_v2(
            Bucket=archive_target.bucket, Prefix=versions
        )["Contents"]
        body = archive_target.client.get_object(Bucket=archive_target.bucket, Key=listed["Key"])
        record = json.loads(body["Body"].read())
        [pack] = {b["pack"] for b in record["blobs"] if b["sha256"] == altered.sha256}
        key = f"{archive_target.prefix}/packs/sha256/{pack[:2]}/{pack}"
        what = "pack of cache files"
    # No checksum on this PUT: the server keeps whatever it is given, as after bit rot.
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=key, Body=b"tampered")

    for target in (result_id, cache["id"]):
        code, report = _verify(project, target)
        assert code == 1 and not report["ok"]
        assert len(report["problems"]) == 2, report["problems"]
        live, blob = sorted(report["problems"])  # "cache file …" sorts before "s3://…"
        assert live.startswith(f"cache file {root}/{flipped.path}: content differs: sha256 ")
        assert f"{flipped.sha256} recorded" in live
        assert blob.startswith(f"s3://{archive_target.bucket}/{key} ({what}): content has sha256 ")
    text = run_lifecycle(project, "verify", cache["id"])
    assert text.exit_code == 1 and "2 differences" in text.stdout.splitlines()[0]
    assert f"  DIFFERS cache file {root}/{flipped.path}: content differs" in text.stdout
    assert f"  DIFFERS s3://{archive_target.bucket}/{key} ({what.split(' of ')[0]}" in text.stdout


def test_after_teardown_the_archive_is_verified_and_an_altered_record_named(
    project: Path, archive_target: ArchiveTarget
) -> None:
    result_id, cache = _night(project, archive_target)
    down = run_lifecycle(project, "teardown", "--yes")
    assert down.exit_code == 0 and "removed 4 caches" in down.stdout, down.output
    code, report = _verify(project, result_id)
    assert code == 0, report["problems"]
    notes = {c["subject"]: c["note"] for c in report["checked"]}
    assert "not on this host" in str(notes[f"live cache {cache['id']}"])
    code, report = _verify(project, result_id, "--from", archive_target.url)
    assert code == 0 and report["source"] == archive_target.url, report["problems"]

    [key] = [k for k in archive_target.objects() if f"/results/{result_id}/" in k]
    body = archive_target.client.get_object(Bucket=archive_target.bucket, Key=key)["Body"].read()
    record = json.loads(body)
    record["result"]["status"] = "fail"  # rewritten after the fact, in place
    altered = json.dumps(record).encode()
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=key, Body=altered)
    url = f"s3://{archive_target.bucket}/{key}"
    found = hashlib.sha256(altered).hexdigest()
    code, report = _verify(project, result_id, "--from", archive_target.url)
    assert code == 1 and report["problems"] == [
        f"{url}: its bytes have sha256 {found}, not the one its key names"
    ]
    code, report = _verify(project, result_id)
    assert code == 1 and any(p.startswith(f"{url}: sha256 {found}") for p in report["problems"])

    ledger = Path(os.environ["LIFECYCLE_HOME"]) / "ledger.sqlite3"
    with sqlite3.connect(ledger) as conn:
        conn.execute("UPDATE results SET status = 'fail' WHERE id = ?", (result_id,))
    code, report = _verify(project, result_id)
    assert any(p.startswith(f"result {result_id}: its row has digest ") for p in report["problems"])


def test_an_unknown_target_is_a_usage_error(project: Path) -> None:
    boot_demo(project, "--cold")  # a ledger exists, without this target
    result = run_lifecycle(project, "verify", "r-nothing")
    assert result.exit_code == 2 and "add --from s3://" in result.stderr


def test_an_id_in_no_record_at_the_location_is_the_answer_no_of_each_verb_that_reads_it(
    tmp_path: Path, s3_bucket: str, s3_client: Any
) -> None:
    # verify --from said exit 2 (bad input), restore --from and audit --from exit 1 (the
    # answer is no), for the same question: is this well-formed id archived there? It is not
    # archived there (docs/exit-codes.md: 1), as each now says, in one line naming both.
    import subprocess
    import sys

    url = f"s3://{s3_bucket}/test"
    s3_client.put_object(Bucket=s3_bucket, Key="test/caches/other-0123456789ab/x", Body=b"")
    cache_id, result_id = "vllm-000000000000", "r-20261010T060000-abcdef"
    asked = [
        ("verify", "--from", url, cache_id),
        ("verify", "--from", url, result_id),
        ("restore", "--from", url, cache_id),
        ("audit", "cache", "--from", url, cache_id),
        ("audit", "result", "--from", url, result_id),
    ]
    for args in asked:
        done = subprocess.run(
            [sys.executable, "-m", "lifecycle", *args],
            env={**os.environ, "LIFECYCLE_HOME": str(tmp_path / "home")},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        line, target = done.stderr.strip(), args[-1]
        assert (done.returncode, done.stdout) == (1, ""), (args, done.returncode, done.stderr)
        assert "\n" not in line and "Traceback" not in line, (args, done.stderr)
        assert target in line and url in line, (args, line)


def test_a_tree_in_no_version_at_the_location_is_the_answer_no_of_each_verb_that_reads_it(
    tmp_path: Path, s3_bucket: str, s3_client: Any
) -> None:
    # `CACHE@TREE`, asked of a location: is that version archived there? For a cache it never
    # held, or one it holds in other versions only, it is not (exit 1), as `restore` said and
    # `verify --from` did not (exit 2). A prefix two versions share says too little: exit 2.
    import subprocess
    import sys

    url = f"s3://{s3_bucket}/test"
    held = "vllm-0123456789ab"
    for tree in ("0123abcd" + "1" * 56, "0123abcd" + "2" * 56):  # never read: no tree asked
        key = f"test/caches/{held}/versions/{tree}.{'e' * 64}.json"
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"")

    def asked(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "lifecycle", *args],
            env={**os.environ, "LIFECYCLE_HOME": str(tmp_path / "home")},
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.stdout == "" and "Traceback" not in done.stderr, (args, done.stderr)
        [line] = done.stderr.strip().splitlines()
        return done.returncode, line

    for cache_id in ("vllm-000000000000", held):
        for verb in ("verify", "restore"):
            code, line = asked(verb, "--from", url, f"{cache_id}@fedcba98")
            assert code == 1, (verb, cache_id, line)
            assert f"no version fedcba98 of cache {cache_id}" in line and url in line, line
    for verb in ("verify", "restore"):
        code, line = asked(verb, "--from", url, f"{held}@0123abcd")
        assert code == 2 and "names 2 versions" in line and "give more digits" in line, line


def test_a_damaged_superseded_version_is_history_and_cache_at_tree_checks_that_tree(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    url = f"s3://{s3_bucket}/test"
    first = boot_demo(archive_project, "--cold")
    assert run_lifecycle(archive_project, "archive", "--all", "--with-content").exit_code == 0
    second = boot_demo(archive_project, "--profile", "grows")  # a second tree of each cache
    assert run_lifecycle(archive_project, "archive", "--all", "--with-content").exit_code == 0
    [old] = [u for u in first["caches"] if u["cache_id"].startswith("flashinfer-")]
    [new] = [u for u in second["caches"] if u["cache_id"] == old["cache_id"]]
    cache_id, old_tree, new_tree = (
        old["cache_id"],
        old["tree_digest_after"],
        new["tree_digest_after"],
    )
    assert old_tree != new_tree
    [record] = keys(s3_client, s3_bucket, f"test/caches/{cache_id}/versions/{old_tree}.")
    # Bit rot in what only the superseded version names: its fingerprint.
    fingerprint = read_json(s3_client, s3_bucket, record)["fingerprint"]["sha256"]
    rotted = f"test/blobs/sha256/{fingerprint[:2]}/{fingerprint}"
    s3_client.put_object(Bucket=s3_bucket, Key=rotted, Body=b"rot")

    for source in ((), ("--from", url)):
        # What is needed now (the newest version) is intact: the old one is history.
        code, report = _verify(archive_project, cache_id, *source)
        assert (code, report["problems"]) == (0, []), report["problems"]
        assert f"s3://{s3_bucket}/{record}" in report["history"], report["history"]
        # The full history, or that tree by its digest, names the damage.
        for target in ((cache_id, "--all-versions"), (f"{cache_id}@{old_tree[:12]}",)):
            code, report = _verify(archive_project, *target, *source)
            assert code == 1 and any(
                p.startswith(f"s3://{s3_bucket}/{rotted} ") for p in report["problems"]
            )
        code, report = _verify(archive_project, f"{cache_id}@{new_tree}", *source)
        assert code == 0 and report["history"] == [], report
        checked = [c["subject"] for c in report["checked"] if "/versions/" in c["subject"]]
        assert checked and all(f"/versions/{new_tree}." in c for c in checked), checked
        # A tree no version has: not archived there (exit 1); unknown to the ledger (exit 2).
        unknown = run_lifecycle(archive_project, "verify", f"{cache_id}@0000000000", *source)
        assert unknown.exit_code == (1 if source else 2), unknown.output
        assert unknown.stderr == f"no version 0000000000 of cache {cache_id} " + (
            f"at {url}: none archived there, none collected by a gc\n"
            if source
            else f"in the ledger at {os.environ['LIFECYCLE_HOME']}\n"
        )
    text = run_lifecycle(archive_project, "verify", cache_id)
    assert text.exit_code == 0 and "in history, not checked" in text.stdout.splitlines()[0]
    assert f"  history s3://{s3_bucket}/{record}: history: superseded" in text.stdout
