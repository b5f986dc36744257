"""HashingReader: the md5 an upload reports is of exactly the bytes it sent, after any rewind."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from lifecycle.archive.sources import BlobSource
from lifecycle.archive.store import ArchiveError
from lifecycle.archive.transfer import HashingReader, digest_all

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


def test_a_ticker_line_is_left_out_of_a_pipe_and_a_plain_line_is_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lifecycle.archive.transfer import Ticker
    from lifecycle.cli import _say

    _say(Ticker("c: uploaded 1.0 MiB of 2.0 MiB (1.0 MiB/s, 0:01 left)"))
    _say("c: verified")
    assert capsys.readouterr().err == "  | c: verified\n"
