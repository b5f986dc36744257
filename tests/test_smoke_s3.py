"""Smoke tests: the archive's S3 client and blob store against the server, which verifies the
SHA-256 checksum of every PUT: the archive's integrity rests on that."""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import s3_client
from lifecycle.archive.store import ArchiveError, BlobStore, b64_sha256

pytestmark = pytest.mark.s3

BODY = b"lifecycle smoke object\n" * 100
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture
def store(s3_bucket: str) -> BlobStore:
    """The archive's blob store, through the client the archive itself makes."""
    return BlobStore(s3_client(os.environ), ArchiveLocation(s3_bucket, "smoke"))


def test_a_blob_goes_up_once_and_verifies_by_the_servers_checksum(
    store: BlobStore, s3_client: Any
) -> None:
    key = store.blob_key(SHA)
    assert store.put(key, SHA, BODY, len(BODY)) is True
    assert store.put(key, SHA, BODY, len(BODY)) is False  # If-None-Match: never written twice
    assert store.verify_blob(SHA, size=len(BODY)) is None
    assert store.download_sha256(store.blob_key(SHA)) == SHA
    # The server kept the checksum it checked the PUT against (what verify_blob relies on).
    head = s3_client.head_object(Bucket=store.location.bucket, Key=key, ChecksumMode="ENABLED")
    assert (
        head["ChecksumSHA256"] == b64_sha256(SHA) == base64.b64encode(bytes.fromhex(SHA)).decode()
    )


def test_bytes_that_are_not_the_ones_hashed_are_refused_and_not_stored(
    store: BlobStore, s3_client: Any
) -> None:
    other = hashlib.sha256(BODY + b"tampered").hexdigest()
    with pytest.raises(ArchiveError, match="not the ones hashed"):
        store.upload_blob(other, BODY)
    assert store.verify_blob(other) == f"{store.url(store.blob_key(other))}: missing"
    listing = s3_client.list_objects_v2(Bucket=store.location.bucket, Prefix="smoke/")
    assert "Contents" not in listing


def test_archive_client_sends_unsigned_payloads_the_server_still_checks(store: BlobStore) -> None:
    """The archive's client does not sign bodies; the signed ChecksumSHA256 still guards them."""
    sent: list[str] = []
    store.client.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: sent.append(request.headers["x-amz-content-sha256"].decode()),
    )
    store.upload_blob(SHA, BODY)
    assert sent == ["UNSIGNED-PAYLOAD"]
    with pytest.raises(ArchiveError, match="not the ones hashed"):
        store.upload_blob(hashlib.sha256(b"other").hexdigest(), BODY)
