"""Smoke tests: the S3 server verifies SHA-256 checksums, which archive integrity relies on."""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lifecycle.archive.location import s3_client

pytestmark = pytest.mark.s3

BODY = b"lifecycle smoke object\n" * 100


def _sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_put_and_get_with_sha256_checksum(s3_client: Any, s3_bucket: str) -> None:
    checksum = _sha256_b64(BODY)
    s3_client.put_object(
        Bucket=s3_bucket,
        Key="smoke/object",
        Body=BODY,
        ChecksumAlgorithm="SHA256",
        ChecksumSHA256=checksum,
    )
    got = s3_client.get_object(Bucket=s3_bucket, Key="smoke/object", ChecksumMode="ENABLED")
    assert got["Body"].read() == BODY
    assert got["ChecksumSHA256"] == checksum


def test_put_with_wrong_sha256_checksum_is_rejected(s3_client: Any, s3_bucket: str) -> None:
    with pytest.raises(ClientError) as raised:
        s3_client.put_object(
            Bucket=s3_bucket,
            Key="smoke/corrupt",
            Body=BODY,
            ChecksumAlgorithm="SHA256",
            ChecksumSHA256=_sha256_b64(BODY + b"tampered"),
        )
    error = raised.value.response
    assert error["Error"]["Code"] == "BadDigest"
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    # Nothing may be stored under the key when the digest did not match.
    assert "Contents" not in s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="smoke/corrupt")


def test_archive_client_sends_unsigned_payloads_the_server_still_checks(s3_bucket: str) -> None:
    """The archive's client does not sign bodies; the signed ChecksumSHA256 still guards them."""
    client = s3_client(os.environ)
    sent: list[str] = []
    client.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: sent.append(request.headers["x-amz-content-sha256"].decode()),
    )
    client.put_object(
        Bucket=s3_bucket, Key="smoke/unsigned", Body=BODY, ChecksumSHA256=_sha256_b64(BODY)
    )
    assert sent == ["UNSIGNED-PAYLOAD"]
    with pytest.raises(ClientError) as raised:
        client.put_object(
            Bucket=s3_bucket,
            Key="smoke/unsigned-corrupt",
            Body=BODY,
            ChecksumSHA256=_sha256_b64(BODY + b"tampered"),
        )
    assert raised.value.response["Error"]["Code"] == "BadDigest"
    assert "Contents" not in client.list_objects_v2(Bucket=s3_bucket, Prefix="smoke/unsigned-c")
