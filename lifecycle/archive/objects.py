"""The archive's objects in S3, one at a time: created once (ChecksumSHA256 and `If-None-Match:
*`; a 412 is read back, the same bytes being success), read, listed, deleted by gc; and the
client that reaches them, with its patience: an attempt that ran out of time is not tried
again, and for ASK_AGAIN_AFTER_S no new request is sent. Why: docs/bucket.md,
docs/time-limits.md.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, BinaryIO

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    ReadTimeoutError,
)

from lifecycle.archive.copies import RecordCopies
from lifecycle.archive.location import ArchiveLocation, endpoint_problem
from lifecycle.errors import EXIT_ENVIRONMENT, AnswerNo, LifecycleError, not_yours
from lifecycle.table import visible

READ_CHUNK = 1 << 20
# The slowest a request's body may go out (bytes/s) before its attempt counts as waited out:
# a 64 MiB pack gets 256 s on top of the limit.
SLOWEST_SEND = 256 << 10
# Records and fingerprints are read whole into memory, so never past this. A cache version's
# record lists each file's blob (~240 bytes a file) as its fingerprint lists each entry (~180),
# so 64 MiB holds some 250,000 files, ten times the largest JIT cache measured (20,000): a
# bigger object is none lifecycle wrote, and is refused before it can take the host's memory.
RECORD_MAX = 64 << 20
_TIMEOUTS = ("ConnectTimeoutError", "ReadTimeoutError", "NotAskedAgain")
_CONNECTION_ERRORS = ("EndpointConnectionError", "ConnectionClosedError", "ProxyConnectionError")
_AUTH_CODES = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403")
_MISSING = ("404", "NoSuchKey", "NotFound")
_EXISTS = ("PreconditionFailed", "412")
_RACING = ("ConditionalRequestConflict", "409")  # AWS: another conditional PUT in flight
_UNSUPPORTED = ("NotImplemented", "501")
DELETE_BATCH = 1000  # keys per DeleteObjects request (S3's maximum)
S3_CONNECT_TIMEOUT_S = 5.0
S3_READ_TIMEOUT_S = 20.0
SLOW_AFTER_S = 5.0
ASK_AGAIN_AFTER_S = 60.0


class ArchiveError(AnswerNo):
    """An archive, verification or restore that could not complete; one line, exit 1."""

    def within(self, context: str) -> ArchiveError:
        """The same error, of the same family (so the same exit code), with its context first."""
        return type(self)(f"{context}: {self}")


class S3Unavailable(ArchiveError):
    """The S3 server did not answer in time, refused our credentials, or lacks the bucket."""

    exit_code = EXIT_ENVIRONMENT


@dataclass(frozen=True)
class Listing:
    """One object as a LIST page shows it."""

    key: str  # relative to the prefix
    size: int
    etag: str  # without quotes
    modified: datetime


def os_problem(exc: OSError) -> str:
    """An OSError in one line: `path: reason` when it names a file, else its own words."""
    if not exc.filename:
        return str(exc)
    return f"{exc.filename}: {exc.strerror}{not_yours(exc.filename, exc)}"


def b64_sha256(sha256: str) -> str:
    """The ChecksumSHA256 form of a hex digest: base64 of its 32 bytes."""
    return base64.b64encode(bytes.fromhex(sha256)).decode()


class ObjectStore:
    """Objects at one archive location, through one (thread-safe) boto3 client."""

    list_page = 1000  # keys per LIST page (S3's maximum)

    def __init__(
        self, client: Any, location: ArchiveLocation, copies: RecordCopies | None = None
    ) -> None:
        self.client = client
        self.location = location
        self.copies = copies  # for readers of every record: lifecycle.archive.copies
        self.endpoint = str(getattr(getattr(client, "meta", None), "endpoint_url", "") or "S3")
        self.conditional = True  # False once the server said it has no conditional writes
        # Each MiB of a streamed body is waited for this long (_chunks): the client's limit.
        config = getattr(getattr(client, "meta", None), "config", None)
        self._watchdog = _watchdog(float(getattr(config, "read_timeout", None) or 0))
        self._server_clock: tuple[datetime, float] | None = None  # (its Date, our monotonic)

    def key(self, relative: str) -> str:
        """The full key of a key of the layout (lifecycle.archive.layout)."""
        return self.location.key(relative)

    def relative(self, key: str) -> str:
        """A full key's part under the prefix."""
        return key[len(self.location.prefix) + 1 :] if self.location.prefix else key

    def url(self, key: str) -> str:
        """`s3://bucket/key` of a full key, for messages."""
        return f"s3://{self.location.bucket}/{key}"

    def where(self, relative: str) -> str:
        """`s3://bucket/prefix/relative`, for messages."""
        return self.url(self.key(relative))

    def create(self, relative: str, body: bytes, content_type: str = "application/json") -> bool:
        """Write an object that must not exist yet. True when this call wrote it, False when it
        was there already with these very bytes; there with other bytes is an ArchiveError."""
        sha256 = hashlib.sha256(body).hexdigest()
        key = self.key(relative)
        for _ in range(3):  # a 412 whose object is gone when read: a gc raced us; again
            if self.conditional and self._put_if_absent(key, sha256, body, content_type):
                return True
            existing = self.read(relative)
            if existing is not None:
                if existing != body:
                    raise ArchiveError(f"{self.url(key)}: already there with other bytes")
                return False
            if not self.conditional:
                self.put(key, sha256, body, len(body), content_type, if_absent=False)
                return True
        raise ArchiveError(f"{self.url(key)}: refused as present, yet not there when read")

    def _put_if_absent(self, key: str, sha256: str, body: bytes, content_type: str) -> bool:
        """True when written; False when the server says the key is taken (or a conditional
        write racing it: AWS's 409), or has no conditional writes (remembered)."""
        try:
            return self.put(key, sha256, body, len(body), content_type, if_absent=True)
        except ArchiveError as exc:
            code = _code(exc.__cause__) if isinstance(exc.__cause__, ClientError) else ""
            if code in _UNSUPPORTED:
                self.conditional = False  # look first, then write: the keys make it safe
                return False
            if code in _RACING:
                return False
            raise

    def put(
        self,
        key: str,
        sha256: str,
        body: bytes | Any,
        size: int,
        content_type: str = "application/octet-stream",
        *,
        if_absent: bool = True,
    ) -> bool:
        """PUT with its ChecksumSHA256 (and If-None-Match: *); False when the key was taken.

        A 412 for a blob or a record says only that an object is there: the caller checks its
        bytes (a blob by its checksum, a record read back)."""
        extra = {"IfNoneMatch": "*"} if if_absent and self.conditional else {}
        try:
            self.client.put_object(
                Bucket=self.location.bucket,
                Key=key,
                Body=body,
                ContentLength=size,
                ContentType=content_type,
                ChecksumSHA256=b64_sha256(sha256),
                **extra,
            )
        except (BotoCoreError, ClientError) as exc:
            if extra and _code(exc) in _EXISTS:
                return False
            raise self.error(exc, key) from exc
        return True

    def read(self, relative: str, cap: int = RECORD_MAX) -> bytes | None:
        """A record's bytes (at most `cap` of them), or None when it is absent."""

        def fetch() -> bytes | None:
            sink = io.BytesIO()
            found = self.download_sha256(self.key(relative), sink, cap=cap)
            return None if found is None else sink.getvalue()

        return fetch() if self.copies is None else self.copies.read(relative, fetch)

    def download_sha256(
        self, key: str, sink: BinaryIO | None = None, *, cap: int | None = None
    ) -> str | None:
        """sha256 of an object's bytes, streamed (into `sink` if given); None when it is absent.
        An object of more than `cap` bytes is an ArchiveError naming it and the cap."""
        digest, size = hashlib.sha256(), 0
        try:
            response = self.client.get_object(Bucket=self.location.bucket, Key=key)
            for chunk in self._chunks(response["Body"]):
                size += len(chunk)
                if cap is not None and max(size, response.get("ContentLength", 0)) > cap:
                    response["Body"].close()  # the rest is never read
                    raise ArchiveError(
                        f"{self.url(key)}: larger than {cap >> 20} MiB, the most an object"
                        " read whole (a record, a fingerprint) may hold; not read"
                    )
                digest.update(chunk)
                if sink is not None:
                    sink.write(chunk)
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) in _MISSING:
                return None
            raise self.error(exc, key) from exc
        return digest.hexdigest()

    def _chunks(self, body: Any) -> Iterator[bytes]:
        """A streamed body, READ_CHUNK at a time, each within the time limit: a server that
        sends a byte at a time never lets one read run out, so a chunk that takes longer is
        ended under its reader (its socket shut down: _cut): slower than 1 MiB per
        LIFECYCLE_S3_TIMEOUT, a server is taken for one that stopped."""
        while True:
            fired = threading.Event()
            watch = self._watchdog.arm(fired, body)
            try:
                chunk = body.read(READ_CHUNK)
            except (BotoCoreError, ValueError, OSError):  # what a read of a closed body meets
                if not fired.is_set():
                    raise
            finally:
                self._watchdog.disarm(watch)
            if fired.is_set():
                raise ReadTimeoutError(endpoint_url=self.endpoint)
            if not chunk:
                return
            yield chunk

    def read_range(self, key: str, start: int, length: int) -> Iterator[bytes]:
        """The bytes `start` to `start + length` of an object (a full key), as they arrive."""
        if length <= 0:
            return
        got = 0
        try:
            response = self.client.get_object(
                Bucket=self.location.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
            )
            for chunk in self._chunks(response["Body"]):
                got += len(chunk)
                if got > length:  # a server ignoring the range: refused before it is held
                    response["Body"].close()
                    raise ArchiveError(f"{self.url(key)}: more than the {length} bytes asked")
                yield chunk
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) in _MISSING:
                raise ArchiveError(f"{self.url(key)}: missing") from exc
            raise self.error(exc, key) from exc
        if got != length:
            raise ArchiveError(f"{self.url(key)}: {got} bytes at {start}, not {length}")

    def list(self, relative_prefix: str = "") -> Iterator[Listing]:
        """Every object under a prefix of the layout, in key order."""
        if relative_prefix:
            prefix = self.key(relative_prefix)
        else:
            prefix = f"{self.location.prefix}/" if self.location.prefix else ""
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket,
                Prefix=prefix,
                PaginationConfig={"PageSize": self.list_page},
            )
            for page in pages:
                self._heard(page)
                for item in page.get("Contents", []):
                    yield Listing(
                        self.relative(item["Key"]),
                        int(item["Size"]),
                        str(item.get("ETag", "")).strip('"'),
                        item["LastModified"],
                    )
        except (BotoCoreError, ClientError) as exc:
            raise self.error(exc, prefix) from exc

    def server_now(self) -> datetime:
        """The server's clock now: the Date of its last LIST answer, moved on by the time passed
        since. Ages of objects (their LastModified is the server's) are read on it, never on
        this host's clock: a host minutes ahead (S3 takes requests signed up to 15 minutes off)
        took a sweep's fresh intent for one long stopped, and objects stored within gc's grace
        for old. The header is to the second, so an age reads up to a second young: the safe
        side. This host's clock before any listing, or from a server that sends no Date."""
        if self._server_clock is None:
            return datetime.now(UTC)
        said, at = self._server_clock
        return said + timedelta(seconds=time.monotonic() - at)

    def _heard(self, answer: Mapping[str, Any]) -> None:
        date = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        with suppress(ValueError):  # no Date, or not one: the clock heard before stands
            self._server_clock = (parsedate_to_datetime(date), time.monotonic())

    def delete(self, relatives: Sequence[str]) -> None:
        """Delete these objects (an absent one is no error), a thousand per request."""
        for start in range(0, len(relatives), DELETE_BATCH):
            batch = [{"Key": self.key(r)} for r in relatives[start : start + DELETE_BATCH]]
            try:
                answer = self.client.delete_objects(
                    Bucket=self.location.bucket, Delete={"Objects": batch, "Quiet": True}
                )
            except (BotoCoreError, ClientError) as exc:
                raise self.error(exc, batch[0]["Key"]) from exc
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise ArchiveError(
                    f"{self.url(first.get('Key', '?'))}: not deleted:"
                    f" {first.get('Code')}: {first.get('Message')}"
                    + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
                )

    def delete_if_match(self, relative: str, etag: str) -> bool:
        """Delete an object only if it still has this ETag (the bytes the caller looked at):
        True when deleted, False when it is gone or holds other bytes now. A server without
        conditional deletes (501) gets a plain delete: the caller's look was a moment ago."""
        key = self.key(relative)
        try:
            self.client.delete_object(Bucket=self.location.bucket, Key=key, IfMatch=etag)
        except (BotoCoreError, ClientError) as exc:
            code = _code(exc)
            if code in _UNSUPPORTED:
                self.delete([relative])
                return True
            if code in (*_EXISTS, *_RACING, *_MISSING):
                return False
            raise self.error(exc, key) from exc
        return True

    def head(self, key: str, *, checksum: bool) -> dict[str, Any] | None:
        """HEAD of a full key (with its stored checksum if asked); None when it is absent."""
        extra = {"ChecksumMode": "ENABLED"} if checksum else {}
        try:
            head: dict[str, Any] = self.client.head_object(
                Bucket=self.location.bucket, Key=key, **extra
            )
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) in _MISSING:
                return None
            raise self.error(exc, key) from exc
        return head

    def error(self, exc: BaseException, key: str) -> ArchiveError:
        """One line a user can act on, naming the object, the server and what went wrong."""
        where = f"{self.url(key)} on {self.endpoint}"
        name = type(exc).__name__
        code = _code(exc)
        if name in _TIMEOUTS:
            if name == "NotAskedAgain":  # not sent: an earlier request waited out just now
                name = "an earlier request went unanswered"
            return S3Unavailable(
                f"the S3 server {self.endpoint} did not answer in time ({name}; see"
                " LIFECYCLE_S3_TIMEOUT)"
            )
        if name in _CONNECTION_ERRORS or "Connection" in name:
            return S3Unavailable(f"the S3 server {self.endpoint} is not answering ({name})")
        if name in ("NoCredentialsError", "PartialCredentialsError"):
            return S3Unavailable(f"no usable AWS credentials for {self.endpoint} ({exc})")
        if code == "NoSuchBucket":
            return S3Unavailable(
                f"bucket {self.location.bucket!r} does not exist on {self.endpoint}"
            )
        if code in _AUTH_CODES:
            return S3Unavailable(
                f"{where}: access denied ({code}); check the credentials and the bucket policy"
            )
        if server_failing(exc):  # not an answer about the object: never "differs" or "missing"
            return S3Unavailable(
                f"the S3 server {self.endpoint} is failing: {_said(exc)} (HTTP {_status(exc)})"
            )
        if code == "BadDigest":
            return ArchiveError(
                f"{where}: the bytes sent are not the ones hashed (changed or corrupted)"
            )
        return ArchiveError(f"{where}: {_said(exc)}")


def _code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def _status(exc: BaseException) -> int:
    if isinstance(exc, ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return 0


def server_failing(exc: BaseException) -> bool:
    """An answer of a server that is failing (5xx: SlowDown, InternalError, ServiceUnavailable),
    the environment's state like one that does not answer; 501 (a request it does not
    implement) is an answer."""
    return _status(exc) >= 500 and _code(exc) not in _UNSUPPORTED


def _said(exc: BaseException) -> str:
    """`Code: Message` of the server's answer (or the client's error), as one line: the server's
    words are outside text (a message may echo the key or a header it was sent), and a newline
    in them would start a line of stderr that passes for lifecycle's own."""
    message = str(exc)
    if isinstance(exc, ClientError):
        message = str(exc.response.get("Error", {}).get("Message", "")) or message
    return visible(f"{_code(exc) or type(exc).__name__}: {message}")


# A request not sent: the server left an earlier one without an answer a moment ago. A
# BotoCoreError, so that every caller of the client meets it where it meets botocore's own;
# made by type() because botocore has no type information (a class statement would subclass Any).
NotAskedAgain = type(
    "NotAskedAgain",
    (BotoCoreError,),
    {"fmt": "not asked: the S3 server {endpoint_url} left a request unanswered for {limit:g} s"},
)


def waited_out(exc: BaseException | None) -> bool:
    """Whether an attempt failed because the server took longer than the time limit: to
    connect, to answer, or to take the request's body (a send that timed out is reported
    as a connection closed, its cause a TimeoutError)."""
    if isinstance(exc, (ConnectTimeoutError, ReadTimeoutError)):
        return True
    if isinstance(exc, ConnectionClosedError):
        cause = exc.kwargs.get("error")
        return any(isinstance(arg, TimeoutError) for arg in getattr(cause, "args", ()))
    return False


# Why: a request is tried twice, a pool waits once per thread, a loop once per record
# (`gc --remote` waited 99 s on a server frozen after its listing).
class Patience:
    """One client's patience with its server, shared by every thread using the client."""

    def __init__(
        self, endpoint: str, limit: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.endpoint = endpoint
        self.limit = limit
        self.clock = clock
        # When an attempt last ran out of time. Written and read by any thread: a float is
        # replaced whole, and a race costs one request sent or refused a moment early.
        self.gave_up_at: float | None = None

    def watch(self, client: Any) -> None:
        """Refuse to send while patience is out, never retry an attempt that waited out
        (ahead of botocore's own retry handler: the first answer that is not None wins), and
        send each request with a limit on the whole answer (last: after the slow-teller)."""
        client.meta.events.register("before-send.s3", self._before_send)
        client.meta.events.register_first("needs-retry.s3", self._needs_retry)
        sender = client._endpoint.http_session  # what botocore sends with when no one else did
        client.meta.events.register_last("before-send.s3", partial(self._send_within, sender))

    def out(self) -> bool:
        """Whether requests are refused now."""
        return self.gave_up_at is not None and self.clock() - self.gave_up_at < ASK_AGAIN_AFTER_S

    def _before_send(self, **_: Any) -> None:
        if self.out():
            raise NotAskedAgain(endpoint_url=self.endpoint, limit=self.limit)

    def _send_within(self, sender: Any, request: Any, **_: Any) -> Any:
        """Send as botocore would, in a thread of its own, and wait for the whole answer (a
        streamed body's head) the limit, and for a body sent its size at SLOWEST_SEND: each
        read of it waits at most the limit, but a server that answers a byte at a time never
        lets one run out. Past that the attempt waited out, its thread left to its connection."""
        size = int(request.headers.get("Content-Length") or 0)
        answer: list[Any] = []
        thread = threading.Thread(target=_send, args=(sender, request, answer), daemon=True)
        thread.start()
        thread.join(self.limit + size / SLOWEST_SEND)
        if not answer:
            raise ReadTimeoutError(endpoint_url=self.endpoint)
        if isinstance(answer[0], BotoCoreError):
            raise answer[0]
        return answer[0]

    def _needs_retry(self, caught_exception: BaseException | None = None, **_: Any) -> bool | None:
        if isinstance(caught_exception, NotAskedAgain):
            return False
        if waited_out(caught_exception):
            self.gave_up_at = self.clock()
            return False
        return None  # botocore's handler decides


class _Watchdog:
    """One thread that ends the reads armed with it once they run `limit` seconds (a Timer a
    read made every small record's read 25-50 % slower: a thread started for each). Reads are
    armed with one limit, so in the order they are due."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._due: dict[int, tuple[float, threading.Event, Any]] = {}
        self._count = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, fired: threading.Event, body: Any) -> int:
        """Watch a read of `body` from now: past the limit, `fired` is set and it is cut."""
        with self._changed:
            token = next(self._count)
            self._due[token] = (time.monotonic() + self.limit, fired, body)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True, name="s3-reads")
                self._thread.start()
            elif len(self._due) == 1:
                self._changed.notify()  # it was waiting for a read to be armed
        return token

    def disarm(self, token: int) -> None:
        with self._changed:
            self._due.pop(token, None)

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                while self._due:
                    token, (due, fired, body) = next(iter(self._due.items()))
                    if due > now:
                        break
                    del self._due[token]
                    _cut(fired, body)
                self._changed.wait(due - now if self._due else None)


@functools.cache
def _watchdog(limit: float) -> _Watchdog:
    """The process's watchdog for reads of this limit (0: the default): every store shares it."""
    return _Watchdog(limit or S3_READ_TIMEOUT_S)


def _cut(fired: threading.Event, body: Any) -> None:
    """End a read that ran out of time: its socket shut down under it (closing the body would
    wait for the read, which holds the body's lock), so the read ends short and fails."""
    fired.set()
    stream = getattr(body, "_raw_stream", None)  # urllib3's response under botocore's body
    sock = getattr(getattr(stream, "connection", None), "sock", None)
    if sock is not None:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _send(sender: Any, request: Any, answer: list[Any]) -> None:
    # What the sender raises is botocore's (it wraps urllib3's and the socket's): handed over.
    try:
        answer.append(sender.send(request))
    except BotoCoreError as exc:
        answer.append(exc)


def no_continue_without_body(request: Any, **_: Any) -> None:
    """botocore asks an empty PUT to wait for `100 Continue` too. A Go server (SeaweedFS,
    MinIO) sends none for an empty body, only its final answer, after which botocore misreads
    the next answer on that pooled connection and waits out its whole limit (botocore issue
    3755): one empty evidence file failed an archive. HTTP says a request without a body must
    not ask for it anyway."""
    if request.headers.get("Content-Length") in ("0", b"0"):  # bytes once signed
        request.headers.pop("Expect", None)


def tell_when_slow(client: Any, on_slow: Callable[[str], None], limit: float) -> None:
    """One line per request that waits SLOW_AFTER_S for its answer (each attempt, each thread)."""
    where = client.meta.endpoint_url
    waiting = threading.local()

    def sent(event_name: str, **_: Any) -> None:
        operation = event_name.rpartition(".")[2]
        line = f"S3 at {where}: no answer to {operation} for {SLOW_AFTER_S:g} s"
        line += f" (gives up after {limit:g} s)"
        waiting.timer = threading.Timer(SLOW_AFTER_S, on_slow, (line,))
        waiting.timer.daemon = True
        waiting.timer.start()

    def answered(**_: Any) -> None:
        timer = getattr(waiting, "timer", None)
        if timer is not None:
            timer.cancel()

    client.meta.events.register("before-send.s3", sent)
    client.meta.events.register("needs-retry.s3", answered)


def s3_client(environ: Mapping[str, str], on_slow: Callable[[str], None] | None = None) -> Any:
    """A boto3 S3 client from the normal credential chain; AWS_ENDPOINT_URL for other servers.

    Time limits, so that a server that accepts connections and never answers fails a command
    within two timeouts: connect within 5 s, each response within LIFECYCLE_S3_TIMEOUT
    (default 20 s), two attempts per request, and none more for a while once one attempt ran
    out of time (`Patience`, above). `on_slow` is told when a request has waited
    SLOW_AFTER_S for its answer, so a long wait is never silent.
    """
    import boto3  # imported here: start-up of other verbs must not pay for boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    from lifecycle.dockerd import seconds_from

    endpoint = environ.get("AWS_ENDPOINT_URL")
    problem = endpoint_problem(endpoint) if endpoint else None
    if problem:
        raise LifecycleError(f"AWS_ENDPOINT_URL={endpoint!r}: {problem}")
    config = Config(
        s3={
            # Path-style for non-AWS endpoints: bucket host names do not resolve on 127.0.0.1.
            "addressing_style": "path" if endpoint else "auto",
            # Over plain http botocore would otherwise read and sha256 every body once more for
            # the signature. Every PUT here carries ChecksumSHA256, a signed header the server
            # checks the body against (BadDigest), which is what https already relies on.
            "payload_signing_enabled": False,
        },
        retries={"total_max_attempts": 2, "mode": "standard"},
        connect_timeout=S3_CONNECT_TIMEOUT_S,
        read_timeout=seconds_from(environ, "LIFECYCLE_S3_TIMEOUT", S3_READ_TIMEOUT_S),
        max_pool_connections=32,
    )
    # A session of its own: boto3's default session keeps the first credentials it found
    # for the whole process, and the environment given here must win.
    try:
        session = boto3.session.Session(
            aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=environ.get("AWS_SESSION_TOKEN"),
            region_name=environ.get("AWS_DEFAULT_REGION") or environ.get("AWS_REGION"),
            profile_name=environ.get("AWS_PROFILE"),
        )
        client = session.client("s3", endpoint_url=endpoint or None, config=config)
    except (BotoCoreError, ValueError) as exc:  # a profile, a region that cannot be
        raise LifecycleError(f"cannot make an S3 client: {exc}") from None
    client.meta.events.register("before-send.s3", no_continue_without_body)
    # First: a request refused unsent is not waited for, so it starts no slow-teller's timer.
    Patience(endpoint or client.meta.endpoint_url, config.read_timeout).watch(client)
    if on_slow is not None:
        tell_when_slow(client, on_slow, config.read_timeout)
    return client
