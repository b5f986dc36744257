"""This host's record copies (lifecycle.archive.copies) on a home where they cannot be kept:
every read still answers, from S3 (here a counted fetch) each time, and nothing is raised."""

from __future__ import annotations

import hashlib
from pathlib import Path

from lifecycle.archive.copies import RecordCopies
from lifecycle.archive.location import ArchiveLocation
from lifecycle.home import Home


def test_a_home_that_cannot_keep_copies_reads_from_s3_each_time(tmp_path: Path) -> None:
    # Root writes through chmod, so the copies' dir is made impossible another way: a file
    # where the dir of every location's copies would be.
    (tmp_path / "records").write_text("not a dir")
    copies = RecordCopies(Home(tmp_path), ArchiveLocation.parse("s3://bucket/team"))
    body = b'{"format": "lifecycle-boot-record/1"}'
    key = f"boots/b-1/{hashlib.sha256(body).hexdigest()}.json"
    fetched: list[str] = []

    def fetch() -> bytes:
        fetched.append(key)
        return body

    assert copies.read(key, fetch) == body
    assert copies.read(key, fetch) == body
    assert len(fetched) == 2  # no copy kept, none pretended
    copies.keep_only([key])  # forgetting what it never kept is no error either

    (tmp_path / "records").unlink()  # writable again: the next read keeps its copy
    assert copies.read(key, fetch) == body and copies.read(key, fetch) == body
    assert len(fetched) == 3
