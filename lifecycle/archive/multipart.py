"""A blob too large for one PUT (S3 caps a PUT at 5 GiB), sent as a multipart upload.

Each part carries its own ChecksumSHA256, so the server refuses a part that is not what was
hashed; the whole blob's sha256 is checked before the upload is completed, so an object named
by a sha256 never appears with other bytes (an upload that fails is aborted, leaving nothing).
The object's ETag and stored checksum are then those of its parts, not of its bytes, so its
verification downloads and hashes it (`BlobStore.verify_blob`): a cost paid only by files over
5 GiB, which a JIT cache does not hold.
"""

from __future__ import annotations

import hashlib
from contextlib import suppress
from typing import Any, BinaryIO

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.objects import ArchiveError, ObjectStore, b64_sha256

PART_SIZE = 16 << 20  # one part in memory per upload at a time
MAX_PARTS = 10_000  # S3's limit: a bigger blob gets bigger parts


def upload_multipart(store: ObjectStore, key: str, sha256: str, body: BinaryIO, size: int) -> None:
    """Send `size` bytes of `body` to `key` in parts, completed only if their sha256 is
    `sha256`."""
    bucket, client = store.location.bucket, store.client
    part_size = max(PART_SIZE, -(-size // MAX_PARTS))
    try:
        started = client.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")
    except (BotoCoreError, ClientError) as exc:
        raise store.error(exc, key) from exc
    upload_id = started["UploadId"]
    try:
        parts: list[dict[str, Any]] = []
        whole = hashlib.sha256()
        while data := body.read(part_size):
            whole.update(data)
            digest = b64_sha256(hashlib.sha256(data).hexdigest())
            number = len(parts) + 1
            answer = client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data,
                ChecksumSHA256=digest,
            )  # fmt: skip
            parts.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumSHA256": digest})
        if whole.hexdigest() != sha256:
            raise ArchiveError(f"{store.url(key)}: the bytes read are not blob {sha256}")
        client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    except BaseException as exc:
        # The first problem is the one to tell; an unfinished upload holds no object.
        with suppress(BotoCoreError, ClientError):
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        if isinstance(exc, BotoCoreError | ClientError):
            raise store.error(exc, key) from exc
        raise
