"""Where the archive lives (`s3://BUCKET/PREFIX`) and the S3 client that reaches it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lifecycle.errors import LifecycleError

CONFIG_FILE = "lifecycle.yaml"
S3_CONNECT_TIMEOUT_S = 5.0
S3_READ_TIMEOUT_S = 20.0
SLOW_AFTER_S = 5.0


@dataclass(frozen=True)
class ArchiveLocation:
    """A bucket and a key prefix (no leading or trailing slash; may be empty)."""

    bucket: str
    prefix: str

    def url(self) -> str:
        """`s3://bucket/prefix`."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def key(self, *parts: str) -> str:
        """An object key under the prefix."""
        return "/".join(p for p in (self.prefix, *parts) if p)

    @classmethod
    def parse(cls, url: str) -> ArchiveLocation:
        """Parse `s3://BUCKET[/PREFIX]`; anything else is a usage error."""
        if not url.startswith("s3://") or not url[5:].split("/", 1)[0]:
            raise LifecycleError(f"archive location {url!r}: expected s3://BUCKET[/PREFIX]")
        bucket, _, prefix = url[5:].partition("/")
        return cls(bucket, prefix.strip("/"))


def resolve_location(
    flag: str | None, environ: Mapping[str, str], project_root: Path
) -> ArchiveLocation:
    """--to, else LIFECYCLE_ARCHIVE, else `archive:` in the project's lifecycle.yaml."""
    if flag:
        return ArchiveLocation.parse(flag)
    if environ.get("LIFECYCLE_ARCHIVE"):
        return ArchiveLocation.parse(environ["LIFECYCLE_ARCHIVE"])
    config = project_root / CONFIG_FILE
    if config.is_file():
        data = yaml.safe_load(config.read_text()) or {}
        if isinstance(data, dict) and isinstance(data.get("archive"), str):
            return ArchiveLocation.parse(data["archive"])
    raise LifecycleError(
        "no archive location: pass --to s3://BUCKET/PREFIX, set LIFECYCLE_ARCHIVE, "
        f"or write `archive: s3://BUCKET/PREFIX` in {config}"
    )


def s3_client(environ: Mapping[str, str], on_slow: Callable[[str], None] | None = None) -> Any:
    """A boto3 S3 client from the normal credential chain; AWS_ENDPOINT_URL for other servers.

    Time limits, so that a server that accepts connections and never answers fails a command
    in well under a minute: connect within 5 s, each response within LIFECYCLE_S3_TIMEOUT
    (default 20 s), two attempts per request. `on_slow` is told when a request has waited
    SLOW_AFTER_S for its answer, so a long wait is never silent.
    """
    import boto3  # imported here: start-up of other verbs must not pay for boto3
    from botocore.config import Config

    from lifecycle.dockerd import seconds_from

    endpoint = environ.get("AWS_ENDPOINT_URL")
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
    session = boto3.session.Session(
        aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=environ.get("AWS_SESSION_TOKEN"),
        region_name=environ.get("AWS_DEFAULT_REGION") or environ.get("AWS_REGION"),
        profile_name=environ.get("AWS_PROFILE"),
    )
    client = session.client("s3", endpoint_url=endpoint or None, config=config)
    if on_slow is not None:
        _tell_when_slow(client, on_slow, config.read_timeout)
    return client


def _tell_when_slow(client: Any, on_slow: Callable[[str], None], limit: float) -> None:
    """One line per request that waits SLOW_AFTER_S for its answer (each attempt, each thread)."""
    where = client.meta.endpoint_url
    waiting = threading.local()

    def sent(event_name: str, **_: Any) -> None:
        operation = event_name.rpartition(".")[2]
        line = f"S3 at {where}: no answer to {operation} for {SLOW_AFTER_S:g} s"
        line += f" (gives up after {limit:g} s, twice)"
        waiting.timer = threading.Timer(SLOW_AFTER_S, on_slow, (line,))
        waiting.timer.daemon = True
        waiting.timer.start()

    def answered(**_: Any) -> None:
        timer = getattr(waiting, "timer", None)
        if timer is not None:
            timer.cancel()

    client.meta.events.register("before-send.s3", sent)
    client.meta.events.register("needs-retry.s3", answered)
