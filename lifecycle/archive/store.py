"""The archive's blobs in S3 (`blobs/sha256/ab/<sha256>`): content-addressed, stored once however
many records hold them, each PUT streamed with its ChecksumSHA256 (one over 5 GiB in parts).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.layout import blob_key, pack_key, parse_key
from lifecycle.archive.objects import (
    READ_CHUNK,
    RECORD_MAX,
    ArchiveError,
    ObjectStore,
    S3Unavailable,
    b64_sha256,
    os_problem,
)
from lifecycle.parallel import pool_map

__all__ = [
    "READ_CHUNK",
    "RECORD_MAX",
    "ArchiveError",
    "BlobRef",
    "BlobStore",
    "S3Unavailable",
    "b64_sha256",
    "open_regular",
    "os_problem",
]

MULTIPART_OVER = 5 << 30  # S3's limit for one PUT
PART_SIZE = 16 << 20  # one part in memory per upload at a time
MAX_PARTS = 10_000  # S3's limit: a bigger blob gets bigger parts


Listed = tuple[int, str]  # what a LIST page says of an object: (size, ETag without quotes)
KeyOf = Callable[[str], str]  # sha256 -> the full key of the object it names


@dataclass(frozen=True)
class BlobRef:
    """A blob a record refers to: its name, its size, and the md5 its ETag should be."""

    sha256: str
    size: int
    md5: str | None = None


class BlobStore(ObjectStore):
    """Blobs (and, through ObjectStore, every other object) at one archive location."""

    def blob_key(self, sha256: str) -> str:
        """`PREFIX/blobs/sha256/ab/<sha256>`."""
        return self.key(blob_key(sha256))

    def upload_blob(self, sha256: str, source: bytes | BinaryIO) -> int:
        """PUT the blob unless one is there, streamed, with its ChecksumSHA256; bytes sent. A
        blob already there (another host's upload, or a retry of ours) is no error: the check
        after the upload reads what the server holds."""
        # Streamed: a 300 MiB PUT from an open file kept the process at its start-up RSS (54 MiB),
        # so memory is bounded by the pool's buffers, not by file sizes.
        if isinstance(source, bytes):
            self.put(self.blob_key(sha256), sha256, source, len(source))
            return len(source)
        size = os.fstat(source.fileno()).st_size
        if size > MULTIPART_OVER:  # over 5 GiB: in parts, each with its own ChecksumSHA256
            upload_multipart(self, self.blob_key(sha256), sha256, source, size)
        else:
            self.put(self.blob_key(sha256), sha256, source, size)
        return size

    def pack_key(self, sha256: str) -> str:
        """`PREFIX/packs/sha256/ab/<sha256>`."""
        return self.key(pack_key(sha256))

    def verify_blob(
        self, sha256: str, *, size: int | None = None, key_of: KeyOf | None = None
    ) -> str | None:
        """None if the server holds the blob (or, with `key_of=pack_key`, the pack) with that
        sha256; else one line naming its key."""
        key = (key_of or self.blob_key)(sha256)
        return self.judge(key, sha256, self.head(key, checksum=True), size=size)

    def judge(
        self, key: str, sha256: str, head: dict[str, Any] | None, *, size: int | None = None
    ) -> str | None:
        """None if the object whose HEAD (with its checksum) this is holds the bytes of that
        sha256; else one line naming its key."""
        # HEAD with ChecksumMode=ENABLED returns the ChecksumSHA256 the server checked at PUT
        # (SeaweedFS and AWS both do, confirmed against `weed mini`); an object stored without
        # one (another tool, an overwrite) is downloaded and hashed instead.
        if head is None:
            return f"{self.url(key)}: missing"
        if size is not None and head.get("ContentLength") != size:
            return f"{self.url(key)}: {head.get('ContentLength')} bytes on the server, not {size}"
        stored = head.get("ChecksumSHA256")
        if stored and "-" not in stored:
            if stored == b64_sha256(sha256):
                return None
            return f"{self.url(key)}: server checksum is not the sha256 its key names"
        found = self.download_sha256(key)
        if found is None:
            return f"{self.url(key)}: missing"
        return None if found == sha256 else f"{self.url(key)}: content has sha256 {found}"

    def survey(self, shas: Iterable[str]) -> dict[str, Listed | None]:
        """What LIST says of each blob: its (size, ETag md5), or None when it is proven absent.

        One listing of `blobs/`, from the first blob wanted, answers for a thousand blobs a
        page where a HEAD answers for one (measured on `weed mini`: 2000 keys listed in 0.16 s,
        557 HEADs/s on 8 threads); packs take a cache's small files, so that is a page or a few.
        A page costs a few dozen HEADs, so in a listing far bigger than what is wanted from it
        paging stops after 1 + wanted/20 pages, and a blob past what it covered is left out of
        the answer: ask it with `verify_blob`.
        """
        names = {f"{sha[:2]}/{sha}" for sha in shas}
        wanted = sorted(names)  # as their keys sort: shard, then name
        if not wanted:
            return {}
        prefix = self.location.key("blobs", "sha256") + "/"
        # Only size and ETag are kept of each wanted object: 20k full listing dicts (with
        # their datetimes) would cost ~10 MiB of the archive's memory budget.
        found: dict[str, Listed] = {}
        covered = ""  # every name up to this one has been listed
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket,
                Prefix=prefix,
                StartAfter=prefix + wanted[0][:-1],  # sorts just before the first wanted
                PaginationConfig={"PageSize": self.list_page},
            )
            for number, page in enumerate(pages, start=1):
                for item in page.get("Contents", []):
                    covered = item["Key"][len(prefix) :]
                    if covered in names:
                        found[covered] = (item["Size"], item.get("ETag", "").strip('"'))
                if not page.get("IsTruncated"):
                    covered = "~"  # sorts after every hex name: the whole range is listed
                if covered >= wanted[-1] or number > len(wanted) // 20:
                    break
        except (BotoCoreError, ClientError) as exc:
            raise self.error(exc, prefix) from exc
        return {name[3:]: found.get(name) for name in wanted if name <= covered}

    def check_blobs(
        self,
        blobs: Sequence[BlobRef],
        workers: int,
        listed: Mapping[str, Listed | None] | None = None,
        key_of: KeyOf | None = None,
    ) -> dict[str, str | None]:
        """sha256 → None when the server holds it intact, else a one-line problem naming its key.

        `listed` is a `survey` taken moments ago (one is taken when not given). A listed object
        whose size and ETag (the md5 S3 computes of a single PUT's bytes) match the record is
        verified by that stored digest; any other (unlisted, no md5 known, an overwrite,
        SSE-KMS ETags) goes through `verify_blob`. `key_of` (a pack's key) checks other
        content-addressed objects the same way.
        """
        key_of = key_of or self.blob_key
        if listed is None:
            listed = self.survey(ref.sha256 for ref in blobs)
        results: dict[str, str | None] = {}
        doubtful: list[BlobRef] = []
        for ref in blobs:
            if ref.sha256 not in listed:
                doubtful.append(ref)  # past what the listing covered
                continue
            item = listed[ref.sha256]
            key = key_of(ref.sha256)
            if item is None:
                results[ref.sha256] = f"{self.url(key)}: missing"
            elif item[0] != ref.size:
                results[ref.sha256] = (
                    f"{self.url(key)}: {item[0]} bytes on the server, not {ref.size}"
                )
            elif ref.md5 is not None and item[1] == ref.md5:
                results[ref.sha256] = None
            else:
                doubtful.append(ref)
        checked = pool_map(
            lambda ref: self.verify_blob(ref.sha256, size=ref.size, key_of=key_of),
            doubtful, workers, "verify",
        )  # fmt: skip
        results.update(zip((ref.sha256 for ref in doubtful), checked, strict=True))
        return results

    def absent_blobs(self, blobs: Sequence[BlobRef], workers: int) -> set[str]:
        """The blobs the server holds no object of at their size, by sha256: from the listing
        (a HEAD past it), no checksum read. For a look again at blobs verified moments ago."""
        listed = self.survey(ref.sha256 for ref in blobs)
        unlisted = [ref for ref in blobs if ref.sha256 not in listed]
        heads = pool_map(
            lambda ref: self.head(self.blob_key(ref.sha256), checksum=False),
            unlisted,
            workers,
            "look",
        )
        sizes = {sha: item[0] if item else None for sha, item in listed.items()}
        sizes |= {
            r.sha256: h["ContentLength"] if h else None
            for r, h in zip(unlisted, heads, strict=True)
        }
        return {ref.sha256 for ref in blobs if sizes[ref.sha256] != ref.size}

    def check_packs(self, sizes: Mapping[str, int], workers: int) -> dict[str, str | None]:
        """pack sha256 -> None when the server holds it intact, else a problem naming it. Each
        is asked by HEAD for the ChecksumSHA256 it was written with: packs are few."""
        refs = [BlobRef(sha, size) for sha, size in sizes.items()]
        return self.check_blobs(refs, workers, {}, key_of=self.pack_key) if refs else {}

    def list_packs(self) -> dict[str, Listed]:
        """Every pack at the location, by its sha256: (size, ETag). One LIST page per thousand
        packs (a thousand packs hold some 8 GB of small blobs)."""
        found: dict[str, Listed] = {}
        for item in self.list("packs/"):
            parsed = parse_key(item.key)
            if parsed is not None and parsed.kind == "pack" and parsed.sha256:
                found[parsed.sha256] = (item.size, item.etag)
        return found

    def put_document(
        self,
        key: str,
        body: bytes,
        *,
        content_type: str = "application/json",
        only_new: bool = False,
    ) -> bool:
        """Write a small document (a night's record, its report, its predictions) under `key`,
        a full key. With `only_new`, never over one already there (If-None-Match): False when
        one was."""
        sha256 = hashlib.sha256(body).hexdigest()
        return self.put(key, sha256, body, len(body), content_type, if_absent=only_new)

    def download_blob(self, sha256: str, sink: BinaryIO, *, cap: int | None = None) -> None:
        """Stream a blob (of at most `cap` bytes) into `sink`; raises unless its bytes have the
        sha256 it is named by."""
        key = self.blob_key(sha256)
        found = self.download_sha256(key, sink, cap=cap)
        if found is None:
            raise ArchiveError(f"{self.url(key)}: missing")
        if found != sha256:
            raise ArchiveError(f"{self.url(key)}: downloaded bytes have sha256 {found}")


def open_regular(path: Path) -> BinaryIO:
    """Open a regular file for reading; a symlink or FIFO in its place is refused, not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot open: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ArchiveError(f"{path}: not a regular file")
    return os.fdopen(fd, "rb")


# Each part carries its own ChecksumSHA256 and the whole sha256 is checked before completing, so
# an object named by a sha256 never appears with other bytes. Its ETag and stored checksum are
# then its parts', so `verify_blob` downloads and hashes it: paid only by files over 5 GiB.
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
