"""What the archive holds, read straight from the server for the tests: versions of a cache,
records of a boot, and verification of one record by its key."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from lifecycle.archive.store import BlobStore
from lifecycle.archive.verify import inspect_record


def keys(client: Any, bucket: str, prefix: str) -> list[str]:
    """Every key under `prefix` (a full key prefix, ending in /)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def read_json(client: Any, bucket: str, key: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return document


def versions(client: Any, bucket: str, prefix: str, cache_id: str) -> list[dict[str, Any]]:
    """Every version record of a cache, oldest first, each with its `object_key` added."""
    found = [
        {**read_json(client, bucket, key), "object_key": key}
        for key in keys(client, bucket, f"{prefix}/caches/{cache_id}/versions/")
    ]
    return sorted(found, key=lambda record: (record["archived_at"], record["object_key"]))


def newest_version(client: Any, bucket: str, prefix: str, cache_id: str) -> dict[str, Any] | None:
    """The newest version record of a cache, or None when it has none."""
    found = versions(client, bucket, prefix, cache_id)
    return found[-1] if found else None


def boot_records(client: Any, bucket: str, prefix: str, boot_id: str) -> list[dict[str, Any]]:
    """Every record of a boot (one, unless a stopped run wrote a second), with its `object_key`."""
    return [
        {**read_json(client, bucket, key), "object_key": key}
        for key in keys(client, bucket, f"{prefix}/boots/{boot_id}/")
    ]


def verify_key(store: BlobStore, key: str, sha256: str | None = None) -> list[str]:
    """Problems with the record at a full key (against `sha256` if given) and its blobs."""
    return inspect_record(store, store.relative(key), sha256).lines()


def damage(client: Any, bucket: str, key: str, *, truncate: int | None = None) -> None:
    """Put other bytes in place of an object, without a checksum, as bit rot or a careless
    tool would: the same size with its first byte changed, or its first `truncate` bytes."""
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    other = body[:truncate] if truncate is not None else bytes([body[0] ^ 0x01]) + body[1:]
    client.put_object(Bucket=bucket, Key=key, Body=other)


def sweep_waiting(project: Path, client: Any, bucket: str, seconds: int) -> subprocess.Popen[str]:
    """`gc --remote` collecting everything, held `seconds` after its last look (its intent and
    record written, nothing deleted yet): returned once it looked."""
    from tests.night_support import wait_for
    from tests.trust_support import PREFIX, start

    gc = start(
        project, "gc", "--remote", "--older-than", "0s", "--grace", "0s", "--yes", "--json",
        env={"LIFECYCLE_TEST_DELAY": f"gc-looked={seconds}"},
    )  # fmt: skip

    # gc's record is written after its last look: what comes after this, before its first
    # deletion (it waits at gc-looked).
    def looked() -> bool:
        assert gc.poll() is None, gc.communicate()
        return bool(keys(client, bucket, f"{PREFIX}/gc/"))

    wait_for("gc to look", looked, 120)
    return gc
