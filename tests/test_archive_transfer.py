"""HashingReader: the md5 an upload reports is of exactly the bytes it sent, after any rewind;
forked uploaders: every blob reported once, a child's problem raised in its own words."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.sources import BlobSource
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.archive.transfer import HashingReader, digest_all
from lifecycle.archive.uploaders import forked_uploads

DATA = b"compiled graph bytes\n" * 5000


def _source(data: bytes, md5: str | None = None, path: Path | None = None) -> BlobSource:
    return BlobSource(
        hashlib.sha256(data).hexdigest(), len(data), "cache file a.so", md5, path=path
    )


def test_md5_is_of_the_last_complete_pass_after_a_rewind() -> None:
    reader = HashingReader(io.BytesIO(DATA))
    assert reader.read(1000) == DATA[:1000]  # a first attempt, cut short
    assert reader.tell() == 1000
    assert reader.seek(0) == 0  # the retry rewinds
    assert reader.tell() == 0
    while reader.read(4096):
        pass
    assert reader.md5_of(_source(DATA)) == hashlib.md5(DATA, usedforsecurity=False).hexdigest()


def test_bytes_other_than_the_scanned_ones_are_refused() -> None:
    short = HashingReader(io.BytesIO(DATA))
    short.read(len(DATA) - 1)
    with pytest.raises(ArchiveError, match=r"a\.so changed since its scan"):
        short.md5_of(_source(DATA))
    other = HashingReader(io.BytesIO(DATA.replace(b"graph", b"GRAPH")))
    other.read()
    with pytest.raises(ArchiveError, match="changed since its scan"):
        other.md5_of(_source(DATA))


def test_only_a_rewind_to_the_start_is_supported() -> None:
    reader = HashingReader(io.BytesIO(DATA))
    with pytest.raises(io.UnsupportedOperation):
        reader.seek(0, io.SEEK_END)
    with pytest.raises(io.UnsupportedOperation):
        reader.seek(10)


def test_digest_all_reads_only_blobs_without_an_md5(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(DATA)
    known = _source(b"elsewhere", md5="0" * 32, path=tmp_path / "missing")  # never opened
    fresh = _source(DATA, path=tmp_path / "a")
    md5s = digest_all({known.sha256: known, fresh.sha256: fresh}, workers=2)
    assert md5s == {
        known.sha256: "0" * 32,
        fresh.sha256: hashlib.md5(DATA, usedforsecurity=False).hexdigest(),
    }


class _FakeClient:
    def close(self) -> None:
        """What the forked uploader calls first: drop connections shared with the parent."""


def _blobs(count: int) -> list[BlobSource]:
    return [BlobSource(f"{n:064x}", n, f"cache file f{n}", data=b"x" * n) for n in range(count)]


def _store() -> BlobStore:
    return BlobStore(_FakeClient(), ArchiveLocation("bucket", "prefix"))


def test_forked_uploaders_report_every_blob_once() -> None:
    def upload(source: BlobSource) -> tuple[BlobSource, str]:
        return source, f"{os.getpid()}:{source.size}"

    sent = list(forked_uploads(_store(), _blobs(40), upload, processes=2, workers=4))
    assert sorted(size for _, size, _ in sent) == list(range(40))
    by_process = {md5.split(":")[0] for _, _, md5 in sent}
    assert len(by_process) == 2 and str(os.getpid()) in by_process  # here and in one child


def test_a_problem_in_a_forked_uploader_is_raised_with_its_words() -> None:
    def upload(source: BlobSource) -> tuple[BlobSource, str]:
        if source.size == 7:  # the child's share: positions 1, 3, 5, 7, ...
            raise ArchiveError("s3://bucket/prefix/blobs/x: access denied (AccessDenied)")
        return source, "0" * 32

    with pytest.raises(ArchiveError, match=r"^s3://bucket/prefix/blobs/x: access denied"):
        list(forked_uploads(_store(), _blobs(40), upload, processes=2, workers=2))
