"""How long a command waits for the S3 server, and what it does once it has waited enough.

A request is tried twice, a pool waits once per thread, a loop once per record (`gc --remote`
waited 99 s on a server frozen after its listing), so one attempt that ran out of time speaks
for the server: it is not tried again, and for ASK_AGAIN_AFTER_S every new request fails at
once, unsent. The bound this gives: docs/time-limits.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    ConnectTimeoutError,
    ReadTimeoutError,
)

SLOW_AFTER_S = 5.0
ASK_AGAIN_AFTER_S = 60.0


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
        """Refuse to send while patience is out, and never retry an attempt that waited out
        (ahead of botocore's own retry handler: the first answer that is not None wins)."""
        client.meta.events.register("before-send.s3", self._before_send)
        client.meta.events.register_first("needs-retry.s3", self._needs_retry)

    def out(self) -> bool:
        """Whether requests are refused now."""
        return self.gave_up_at is not None and self.clock() - self.gave_up_at < ASK_AGAIN_AFTER_S

    def _before_send(self, **_: Any) -> None:
        if self.out():
            raise NotAskedAgain(endpoint_url=self.endpoint, limit=self.limit)

    def _needs_retry(self, caught_exception: BaseException | None = None, **_: Any) -> bool | None:
        if isinstance(caught_exception, NotAskedAgain):
            return False
        if waited_out(caught_exception):
            self.gave_up_at = self.clock()
            return False
        return None  # botocore's handler decides


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
