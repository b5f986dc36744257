"""The S3 client's patience (lifecycle.archive.objects), against a loopback listener that accepts
and never answers, with a one-second time limit so that each attack costs seconds: an attempt
that ran out of time is not tried again, the requests after it are not sent, many threads
waiting at once wait once, and a long command asks again after a pause."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from urllib3.exceptions import ProtocolError

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import (
    ASK_AGAIN_AFTER_S,
    NotAskedAgain,
    ObjectStore,
    Patience,
    S3Unavailable,
    s3_client,
    waited_out,
)
from tests.silent_servers import SilentRelay, silent_listener

LIMIT_S = 1.0


@pytest.fixture
def silent() -> Any:
    with silent_listener() as listener:
        yield listener


def _client(silent: SilentRelay) -> Any:
    return s3_client(
        {
            "AWS_ENDPOINT_URL": silent.endpoint,
            "AWS_ACCESS_KEY_ID": "lifecycle-test",
            "AWS_SECRET_ACCESS_KEY": "lifecycle-test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "LIFECYCLE_S3_TIMEOUT": str(LIMIT_S),
        }
    )


def _timed(call: Any) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(BotoCoreError) as raised:
        call()
    return raised.value, time.monotonic() - started


def test_an_attempt_that_waited_out_is_not_tried_again_nor_are_the_requests_after_it(
    silent: SilentRelay,
) -> None:
    client = _client(silent)
    first, waited = _timed(lambda: client.list_objects_v2(Bucket="archive"))
    assert isinstance(first, ReadTimeoutError)
    assert LIMIT_S <= waited < 2 * LIMIT_S  # one attempt, not two
    connections = len(silent.held)
    second, waited = _timed(lambda: client.get_object(Bucket="archive", Key="k"))
    assert isinstance(second, NotAskedAgain) and waited < 0.2
    assert f"the S3 server {silent.endpoint} left a request unanswered for 1 s" in str(second)
    assert len(silent.held) == connections  # not sent


def test_many_threads_waiting_at_once_wait_once(silent: SilentRelay) -> None:
    # 32 threads with 4 reads each: every thread's own timeout, one after another, would be
    # 4 x 2 attempts x 1 s; the first read of each is in flight at once, the rest not sent.
    client = _client(silent)

    def four_reads(thread: int) -> list[str]:
        failures = []
        for n in range(4):
            try:
                client.get_object(Bucket="archive", Key=f"{thread}/{n}")
            except BotoCoreError as exc:
                failures.append(type(exc).__name__)
        return failures

    started = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        failures = [f for found in pool.map(four_reads, range(32)) for f in found]
    assert time.monotonic() - started < 2 * LIMIT_S + 1
    assert len(failures) == 128 and failures.count("NotAskedAgain") >= 96


def test_the_archive_calls_a_request_not_sent_the_server_unavailable(silent: SilentRelay) -> None:
    store = ObjectStore(_client(silent), ArchiveLocation("archive", "night"))
    for _ in range(2):  # the first waited out, the second not sent: both exit 3
        with pytest.raises(S3Unavailable, match=f"the S3 server {silent.endpoint} did not"):
            store.read("caches/x/versions/y.json")


def test_only_running_out_of_time_speaks_for_the_server() -> None:
    timed_out_sending = ConnectionClosedError(
        endpoint_url="http://s3", error=ProtocolError("Connection aborted.", TimeoutError())
    )
    reset = ConnectionClosedError(
        endpoint_url="http://s3", error=ProtocolError("Connection aborted.", ConnectionResetError())
    )
    assert waited_out(ReadTimeoutError(endpoint_url="http://s3", error="read timed out"))
    assert waited_out(timed_out_sending)
    assert not waited_out(reset)  # tried again, as botocore decides
    assert not waited_out(EndpointConnectionError(endpoint_url="http://s3"))
    assert not waited_out(None)


def test_a_long_command_asks_again_after_the_pause() -> None:
    now = [100.0]
    patience = Patience("http://s3", LIMIT_S, clock=lambda: now[0])
    timeout = ReadTimeoutError(endpoint_url="http://s3", error="read timed out")
    assert patience._needs_retry(caught_exception=timeout) is False
    assert patience.out()
    now[0] += ASK_AGAIN_AFTER_S
    assert not patience.out()
    patience._before_send()  # sent again
    reset = EndpointConnectionError(endpoint_url="http://s3")
    assert patience._needs_retry(caught_exception=reset) is None  # botocore's own retries
