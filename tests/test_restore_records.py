"""`lifecycle restore` of crafted records: each refusal is one line, made before anything is
written (no dir under LIFECYCLE_HOME/caches, no cache row). The records are written to a real
S3 server by hand, as someone with write access to the bucket could, in the current format (a
cache version, named by its bytes) and in the previous release's (one record per cache)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive.layout import legacy_cache_key, version_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import RECORD_MAX, BlobStore
from lifecycle.fingerprint import FORMAT as FINGERPRINT_FORMAT
from lifecycle.fingerprint import Entry, Fingerprint
from lifecycle.formats import CACHE_FORMAT, VERSION_FORMAT
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord
from lifecycle.ledger.core import insert
from tests.services import ArchiveTarget, run_lifecycle

pytestmark = pytest.mark.s3

CACHE_ID = "vllm-0123456789ab"
CONTENT = b"compiled\n"  # the one file of every crafted tree, uploaded: a rebuild would succeed


@pytest.fixture(params=[VERSION_FORMAT, CACHE_FORMAT])
def record_format(request: pytest.FixtureRequest) -> str:
    """Each test crafts its record in the current format and in the previous release's."""
    name: str = request.param
    return name


def _row(cache_id: str, home: Path) -> CacheRecord:
    return CacheRecord(
        id=cache_id,
        cache_key="k" * 16,
        cache_name="vllm",
        manifest_name="demo",
        manifest_digest="d" * 64,
        image_id="sha256:" + "e" * 64,
        arch="unknown",
        host_path=str(home / "caches" / cache_id),
        container_path="/var/cache/lifecycle/vllm",
        state="torn-down",
        in_use_by=None,
        created_at="2026-10-10T06:00:00+00:00",
    )


def _publish(
    target: ArchiveTarget,
    cache_id: str,
    row: dict[str, Any],
    entries: list[Entry],
    record_format: str,
) -> None:
    """A record of `cache_id` with this cache row and a fingerprint of these entries."""
    store = BlobStore(target.client, ArchiveLocation(target.bucket, target.prefix))
    rows = [
        [e.path, e.kind, e.size, e.mode, e.sha256, e.link, e.mtime_ns, e.inode] for e in entries
    ]
    digest = Fingerprint.of(entries).tree_digest
    fingerprint = json.dumps(
        {"format": FINGERPRINT_FORMAT, "tree_digest": digest, "entries": rows}, sort_keys=True
    ).encode()
    sha = hashlib.sha256(fingerprint).hexdigest()
    store.upload_blob(sha, fingerprint)
    store.upload_blob(hashlib.sha256(CONTENT).hexdigest(), CONTENT)
    files = [e for e in entries if e.kind == "file"]
    fingerprint_blob = {"sha256": sha, "size": len(fingerprint), "tree_digest": digest}
    record = _complete(cache_id, row, record_format, digest) | {
        "fingerprint": fingerprint_blob
        | {"files": len(files), "bytes": sum(e.size for e in files)},
        "blobs": [{"sha256": sha, "size": len(fingerprint)}],
    }
    _write(store, record, record_format)


def _write(store: BlobStore, record: dict[str, Any], record_format: str) -> None:
    """Put the record where its format lives: a version by its tree and bytes, or the
    previous release's one key per cache."""
    body = json.dumps(record).encode()
    if record_format == CACHE_FORMAT:
        store.create(legacy_cache_key(record["cache_id"]), body)
        return
    sha = hashlib.sha256(body).hexdigest()
    store.create(version_key(record["cache_id"], record["tree_digest"], sha), body)


def _complete(
    cache_id: str, row: dict[str, Any], record_format: str, tree: str = "0" * 64
) -> dict[str, Any]:
    """Every field a record of its format has, but the fingerprint and the blobs: the crafted
    part of each test is exactly what it changes."""
    local = ("state", "in_use_by")
    common = {
        "format": record_format, "cache_id": cache_id, "host": "h", "tool_version": "0",
        "archived_at": "2026-10-10T06:00:00+00:00", "with_content": True,
        "cache": {k: v for k, v in row.items() if k not in local},
        "content": {"files": 1, "bytes": len(CONTENT)},
    }  # fmt: skip
    if record_format == CACHE_FORMAT:
        return common | {"boots": [], "image": None, "manifest": None, "patches": []}
    return common | {"tree_digest": tree, "parent": None, "made_by": None, "key": None}


def _restore(tmp_path: Path, target: ArchiveTarget, cache_id: str) -> Any:
    return run_lifecycle(tmp_path, "restore", cache_id, "--from", target.url, env=target.env)


def _entries(name: str) -> list[Entry]:
    sha = hashlib.sha256(CONTENT).hexdigest()
    return [
        Entry("a", "dir", 0, 0o755, None, None, 0, 1),
        Entry(f"a/{name}", "file", len(CONTENT), 0o644, sha, None, 0, 2),
    ]


def test_a_nul_in_an_archived_path_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget, record_format: str
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    _publish(
        archive_target, CACHE_ID, asdict(_row(CACHE_ID, home)), _entries("x\0.so"), record_format
    )

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert "NUL byte" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (home / "caches").exists()
    with_rows = Ledger.open(home)
    assert with_rows.query("SELECT id FROM caches") == []
    with_rows.close()


def test_a_record_whose_row_names_another_cache_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget, record_format: str
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    existing = "vllm-aaaaaaaaaaaa"
    ledger = Ledger.open(home)
    with ledger.transaction() as conn:
        insert(conn, "caches", _row(existing, home))
    ledger.close()
    # The record at caches/<CACHE_ID>.json carries the row of the cache this host already has.
    _publish(
        archive_target, CACHE_ID, asdict(_row(existing, home)), _entries("x.so"), record_format
    )

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert f"the record of {CACHE_ID} has the cache row of '{existing}'" in result.stderr
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_record_row_of_the_wrong_types_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget, record_format: str
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    row = asdict(_row(CACHE_ID, home)) | {"files": {"a": 1}}
    _publish(archive_target, CACHE_ID, row, _entries("x.so"), record_format)

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert (
        f"not a valid {record_format} record: cache.files: Input should be a valid integer"
        in result.stderr
    )
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_mode_no_file_can_have_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget, record_format: str
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    entries = [Entry("a", "dir", 0, 2**40, None, None, 0, 1)]
    _publish(archive_target, CACHE_ID, asdict(_row(CACHE_ID, home)), entries, record_format)

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert "archived fingerprint has mode" in result.stderr
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_record_without_its_fingerprint_is_one_line(
    tmp_path: Path, archive_target: ArchiveTarget, record_format: str
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    location = ArchiveLocation(archive_target.bucket, archive_target.prefix)
    store = BlobStore(archive_target.client, location)
    record = _complete(CACHE_ID, asdict(_row(CACHE_ID, home)), record_format)
    _write(store, record | {"blobs": []}, record_format)

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert f"not a valid {record_format} record: fingerprint: Field required" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_version_whose_bytes_are_not_the_ones_its_key_names_is_refused(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    # Someone with write access replaced a version record in place: the key still names the
    # sha256 of the bytes it was written with, so a reader tells.
    home = Path(os.environ["LIFECYCLE_HOME"])
    _publish(
        archive_target, CACHE_ID, asdict(_row(CACHE_ID, home)), _entries("x.so"), VERSION_FORMAT
    )
    key = next(k for k in archive_target.objects() if "/versions/" in k)
    body = archive_target.client.get_object(Bucket=archive_target.bucket, Key=key)["Body"].read()
    altered = body.replace(b'"host": "h"', b'"host": "x"')
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=key, Body=altered)

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    found = hashlib.sha256(altered).hexdigest()
    assert f"its bytes have sha256 {found}, not the one its key names" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_version_whose_fingerprint_holds_another_tree_is_refused(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    location = ArchiveLocation(archive_target.bucket, archive_target.prefix)
    record = _complete(CACHE_ID, asdict(_row(CACHE_ID, home)), VERSION_FORMAT, "1" * 64)
    fingerprint = {"sha256": "2" * 64, "size": 1, "tree_digest": "3" * 64, "files": 0, "bytes": 0}
    _write(
        BlobStore(archive_target.client, location),
        record | {"fingerprint": fingerprint, "blobs": []},
        VERSION_FORMAT,
    )

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert "fingerprint.tree_digest is not the version's tree_digest" in result.stderr
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_record_larger_than_the_cap_is_one_line_naming_it_and_the_cap(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    relative = version_key(CACHE_ID, "0" * 64, "1" * 64)
    key = f"{archive_target.prefix}/{relative}"
    body = b" " * (RECORD_MAX + 1)  # JSON whitespace: only its size is wrong
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=key, Body=body)

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [
        f"restore of {CACHE_ID} from {archive_target.url} failed:"
        f" s3://{archive_target.bucket}/{key}: larger than 64 MiB, the most an object read whole"
        " (a record, a fingerprint) may hold; not read"
    ]
    assert not (home / "caches").exists()


def test_a_leftover_temp_name_that_is_a_link_is_unlinked_never_followed(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    # What a killed restore leaves beside the cache dir goes before the next one; a link of
    # that name (anyone who can write caches/ can make one) goes as a link: nothing under
    # its target is touched, its modes least of all.
    home = Path(os.environ["LIFECYCLE_HOME"])
    _publish(
        archive_target, CACHE_ID, asdict(_row(CACHE_ID, home)), _entries("x.so"), VERSION_FORMAT
    )
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub").chmod(0o755)
    (home / "caches").mkdir(parents=True)
    leftover = home / "caches" / f".{CACHE_ID}.restore-zzz"
    leftover.symlink_to(outside)

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((outside / "sub").stat().st_mode) == 0o755
    assert not os.path.lexists(leftover) and (outside / "sub").is_dir()
    assert (home / "caches" / CACHE_ID / "a" / "x.so").read_bytes() == CONTENT


def _damaged_copy(target: ArchiveTarget) -> str:
    """Beside the one version record, a truncated copy of it (damaged on the server), named by
    its own bytes as a reader checks them: the same tree. Its s3:// URL."""
    key = next(k for k in target.objects() if "/versions/" in k)
    body = target.client.get_object(Bucket=target.bucket, Key=key)["Body"].read()
    damaged = body[: len(body) // 2]
    tree = key.rsplit("/", 1)[1].split(".")[0]
    relative = version_key(CACHE_ID, tree, hashlib.sha256(damaged).hexdigest())
    target.client.put_object(Bucket=target.bucket, Key=f"{target.prefix}/{relative}", Body=damaged)
    return f"{target.url}/{relative}"


@pytest.mark.parametrize("at_tree", [False, True])
def test_a_damaged_record_of_the_same_tree_is_passed_over_and_named(
    tmp_path: Path, archive_target: ArchiveTarget, at_tree: bool
) -> None:
    # `restore --best` names the tree (CACHE@TREE); plain `restore CACHE` takes the newest.
    home = Path(os.environ["LIFECYCLE_HOME"])
    entries = _entries("x.so")
    _publish(archive_target, CACHE_ID, asdict(_row(CACHE_ID, home)), entries, VERSION_FORMAT)
    damaged = _damaged_copy(archive_target)
    tree = Fingerprint.of(entries).tree_digest
    target = f"{CACHE_ID}@{tree}" if at_tree else CACHE_ID

    result = run_lifecycle(
        tmp_path, "restore", target, "--from", archive_target.url, "--json", env=archive_target.env
    )

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tree_digest"] == tree
    notes = [line for line in result.stderr.splitlines() if not line.startswith("  | ")]
    [line] = notes  # progress aside, one line names the record passed over
    assert line.startswith(f"passed over: cannot read {damaged}: not a JSON record"), line
    assert json.loads(result.stdout)["unreadable"].keys() == {damaged}
    assert (home / "caches" / CACHE_ID / "a" / "x.so").read_bytes() == CONTENT
