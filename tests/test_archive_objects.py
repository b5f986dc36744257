"""Objects are created once, never replaced: `If-None-Match: *` against the real S3 server, and
what `ObjectStore.create` does with every answer a server can give (a 412 from a racing host or
from its own retried PUT, a server without conditional writes)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import ArchiveError, ObjectStore, s3_client
from tests.services import ArchiveTarget

RACES = 60
WRITERS = 8


def _store(target: ArchiveTarget) -> ObjectStore:
    return ObjectStore(target.client, ArchiveLocation(target.bucket, target.prefix))


@pytest.mark.s3
def test_the_server_refuses_a_second_put_of_a_key(archive_target: ArchiveTarget) -> None:
    store = _store(archive_target)
    assert store.create("caches/x/boots/b-1", b"") is True
    key = store.key("caches/x/boots/b-1")
    with pytest.raises(ClientError) as refused:
        archive_target.client.put_object(
            Bucket=archive_target.bucket, Key=key, Body=b"other", IfNoneMatch="*"
        )
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert store.read("caches/x/boots/b-1") == b""  # the first write stands


@pytest.mark.s3
def test_of_hosts_creating_one_key_at_once_exactly_one_wins(archive_target: ArchiveTarget) -> None:
    # Threads with their own bodies race for each key, as two hosts' archives would; the
    # server must keep exactly one body and tell every other writer so.
    store = _store(archive_target)
    for race in range(RACES):
        relative = f"race/{race}"
        outcome: list[bool | str] = [False] * WRITERS

        def write(n: int, relative: str = relative, outcome: list[bool | str] = outcome) -> None:
            try:
                body = f"writer {n}".encode() * 100
                sha = hashlib.sha256(body).hexdigest()
                outcome[n] = store.put(store.key(relative), sha, body, len(body))
            except ArchiveError as exc:
                outcome[n] = str(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [n for n, won in enumerate(outcome) if won is True]
        assert len(winners) == 1, (race, outcome)
        assert outcome.count(False) == WRITERS - 1, (race, outcome)
        assert store.read(relative) == f"writer {winners[0]}".encode() * 100


@pytest.mark.s3
def test_create_takes_the_same_bytes_as_done_and_other_bytes_as_an_error(
    archive_target: ArchiveTarget,
) -> None:
    store = _store(archive_target)
    assert store.create("records/a.json", b'{"a": 1}') is True
    # Another host's record of the same content, or this host's retried PUT: done already.
    assert store.create("records/a.json", b'{"a": 1}') is False
    with pytest.raises(ArchiveError, match="already there with other bytes"):
        store.create("records/a.json", b'{"a": 2}')
    assert store.read("records/a.json") == b'{"a": 1}'


class _NoConditionals:
    """A client for a server without conditional writes: If-None-Match is a 501."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts = 0

    def put_object(self, *, Key: str, Body: bytes, **extra: Any) -> dict[str, Any]:
        if "IfNoneMatch" in extra:
            error = {"Error": {"Code": "NotImplemented", "Message": "no conditionals"}}
            raise ClientError(error, "PutObject")
        self.puts += 1
        self.objects[Key] = Body
        return {}

    def get_object(self, *, Key: str, **_: Any) -> dict[str, Any]:
        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": ""}}, "GetObject")
        return {"Body": _Body(self.objects[Key])}


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, size: int) -> bytes:
        chunk, self.data = self.data[:size], self.data[size:]
        return chunk

    def close(self) -> None:
        pass


def test_a_range_answered_with_more_bytes_than_asked_is_refused() -> None:
    client = _NoConditionals()  # it answers every GET with the whole object
    client.objects["p/packs/x"] = b"0123456789"
    store = ObjectStore(client, ArchiveLocation("bucket", "p"))
    with pytest.raises(ArchiveError, match="more than the 4 bytes asked"):
        b"".join(store.read_range("p/packs/x", 2, 4))


def test_a_server_without_conditional_writes_gets_a_look_then_a_plain_put() -> None:
    client = _NoConditionals()
    store = ObjectStore(client, ArchiveLocation("bucket", "p"))
    assert store.create("caches/c/versions/x.json", b"one") is True
    assert store.conditional is False  # asked once, remembered
    assert store.create("caches/c/versions/x.json", b"one") is False
    assert client.puts == 1  # the second saw the object and wrote nothing
    with pytest.raises(ArchiveError, match="other bytes"):
        store.create("caches/c/versions/x.json", b"two")
    assert client.objects == {"p/caches/c/versions/x.json": b"one"}


@pytest.mark.s3
def test_an_empty_object_does_not_stall_the_next_request(archive_target: ArchiveTarget) -> None:
    # botocore asks an empty PUT to wait for `100 Continue`; a Go server (SeaweedFS, MinIO)
    # sends none for an empty body, only its final answer, and botocore then read the next
    # request's answer on that pooled connection wrongly: it waited out its whole read limit,
    # and the archive failed as "did not answer in time". An empty evidence file is enough.
    environ = {**os.environ, **archive_target.env, "LIFECYCLE_S3_TIMEOUT": "5"}
    store = ObjectStore(s3_client(environ), ArchiveLocation(archive_target.bucket, "empty"))
    started = time.monotonic()
    for n in range(3):
        assert store.create(f"boots/b-{n}/empty.log", b"") is True
        assert store.create(f"boots/b-{n}/engine.log", b"a line\n") is True
    assert time.monotonic() - started < 5
    assert store.read("boots/b-2/engine.log") == b"a line\n"
