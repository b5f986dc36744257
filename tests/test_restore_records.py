"""`lifecycle restore` of crafted records: each refusal is one line, made before anything is
written (no dir under LIFECYCLE_HOME/caches, no cache row). The records are written to a real
S3 server by hand, as someone with write access to the bucket could."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import FORMAT
from lifecycle.archive.store import BlobStore
from lifecycle.fingerprint import FORMAT as FINGERPRINT_FORMAT
from lifecycle.fingerprint import Entry, tree_digest
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord
from lifecycle.ledger.rows import insert
from tests.services import ArchiveTarget, run_lifecycle

pytestmark = pytest.mark.s3

CACHE_ID = "vllm-0123456789ab"
CONTENT = b"compiled\n"  # the one file of every crafted tree, uploaded: a rebuild would succeed


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
    target: ArchiveTarget, cache_id: str, row: dict[str, Any], entries: list[Entry]
) -> None:
    """A record of `cache_id` with this cache row and a fingerprint of these entries."""
    store = BlobStore(target.client, ArchiveLocation(target.bucket, target.prefix))
    rows = [
        [e.path, e.kind, e.size, e.mode, e.sha256, e.link, e.mtime_ns, e.inode] for e in entries
    ]
    digest = tree_digest(entries)
    fingerprint = json.dumps(
        {"format": FINGERPRINT_FORMAT, "tree_digest": digest, "entries": rows}, sort_keys=True
    ).encode()
    sha = hashlib.sha256(fingerprint).hexdigest()
    store.put_blob(sha, fingerprint)
    store.put_blob(hashlib.sha256(CONTENT).hexdigest(), CONTENT)
    files = [e for e in entries if e.kind == "file"]
    fingerprint_blob = {"sha256": sha, "size": len(fingerprint), "tree_digest": digest}
    record = _complete(cache_id, row) | {
        "fingerprint": fingerprint_blob
        | {"files": len(files), "bytes": sum(e.size for e in files)},
        "blobs": [{"sha256": sha, "size": len(fingerprint)}],
    }
    store.put_record(cache_id, json.dumps(record).encode())


def _complete(cache_id: str, row: dict[str, Any]) -> dict[str, Any]:
    """Every field a record of its format has, but the fingerprint and the blobs: the crafted
    part of each test is exactly what it changes."""
    local = ("state", "in_use_by")
    return {
        "format": FORMAT, "cache_id": cache_id, "host": "h", "tool_version": "0",
        "archived_at": "2026-10-10T06:00:00+00:00", "with_content": True,
        "cache": {k: v for k, v in row.items() if k not in local},
        "content": {"files": 1, "bytes": len(CONTENT)}, "boots": [], "image": None,
        "manifest": None, "patches": [],
    }  # fmt: skip


def _restore(tmp_path: Path, target: ArchiveTarget, cache_id: str) -> Any:
    return run_lifecycle(tmp_path, "restore", cache_id, "--from", target.url, env=target.env)


def _entries(name: str) -> list[Entry]:
    sha = hashlib.sha256(CONTENT).hexdigest()
    return [
        Entry("a", "dir", 0, 0o755, None, None, 0, 1),
        Entry(f"a/{name}", "file", len(CONTENT), 0o644, sha, None, 0, 2),
    ]


def test_a_nul_in_an_archived_path_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    _publish(archive_target, CACHE_ID, asdict(_row(CACHE_ID, home)), _entries("x\0.so"))

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert "NUL byte" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (home / "caches").exists()
    with_rows = Ledger.open(home)
    assert with_rows.query("SELECT id FROM caches") == []
    with_rows.close()


def test_a_record_whose_row_names_another_cache_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    existing = "vllm-aaaaaaaaaaaa"
    ledger = Ledger.open(home)
    with ledger.transaction() as conn:
        insert(conn, "caches", _row(existing, home))
    ledger.close()
    # The record at caches/<CACHE_ID>.json carries the row of the cache this host already has.
    _publish(archive_target, CACHE_ID, asdict(_row(existing, home)), _entries("x.so"))

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert f"the record of {CACHE_ID} has the cache row of '{existing}'" in result.stderr
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_record_row_of_the_wrong_types_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    row = asdict(_row(CACHE_ID, home)) | {"files": {"a": 1}}
    _publish(archive_target, CACHE_ID, row, _entries("x.so"))

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert f"not a valid {FORMAT} record: cache.files: Input should be a valid integer" in (
        result.stderr
    )
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_mode_no_file_can_have_is_refused_before_anything_is_written(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    entries = [Entry("a", "dir", 0, 2**40, None, None, 0, 1)]
    _publish(archive_target, CACHE_ID, asdict(_row(CACHE_ID, home)), entries)

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert "archived fingerprint has mode" in result.stderr
    assert not (home / "caches" / CACHE_ID).exists()


def test_a_record_without_its_fingerprint_is_one_line(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    home = Path(os.environ["LIFECYCLE_HOME"])
    location = ArchiveLocation(archive_target.bucket, archive_target.prefix)
    store = BlobStore(archive_target.client, location)
    record = _complete(CACHE_ID, asdict(_row(CACHE_ID, home)))
    store.put_record(CACHE_ID, json.dumps(record | {"blobs": []}).encode())

    result = _restore(tmp_path, archive_target, CACHE_ID)

    assert result.exit_code == 1, result.output
    assert f"not a valid {FORMAT} record: fingerprint: Field required" in result.stderr
    assert len(result.stderr.splitlines()) == 1
