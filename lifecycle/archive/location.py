"""Where the archive lives (`s3://BUCKET/PREFIX`) and the S3 client that reaches it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lifecycle.errors import LifecycleError

S3_CONNECT_TIMEOUT_S = 5.0
S3_READ_TIMEOUT_S = 20.0
MAX_PREFIX_BYTES = 512  # S3 keys are at most 1024 bytes; the rest is the archive's layout
_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
_IP_ADDRESS = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$")
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


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
    def parse(cls, url: str, where: str = "archive location") -> ArchiveLocation:
        """Parse `s3://BUCKET[/PREFIX]`; anything else is a usage error naming `where` the
        text was given (a flag, an environment variable)."""
        problem = location_problem(url)
        if problem:
            raise LifecycleError(f"{where} {url!r}: {problem}")
        bucket, _, prefix = url[5:].partition("/")
        return cls(bucket, prefix.strip("/"))


def location_problem(url: str) -> str | None:
    """Why `url` is not an archive location, or None."""
    if not url.startswith("s3://") or not url[5:].split("/", 1)[0]:
        return "expected s3://BUCKET[/PREFIX]"
    bucket, _, prefix = url[5:].partition("/")
    problem = bucket_problem(bucket)
    if problem:
        return f"bucket name {bucket!r} {problem} (S3's naming rules)"
    if len(prefix.encode()) > MAX_PREFIX_BYTES:
        return f"the prefix is longer than {MAX_PREFIX_BYTES} bytes"
    if any(ord(c) < 32 or ord(c) == 127 for c in prefix):
        return "the prefix holds a control character"
    return None


def bucket_problem(name: str) -> str | None:
    """Which of S3's rules for general purpose bucket names `name` breaks, or None.

    Checked when the location is given, so that a bad name is one line at once instead of
    the server's refusal after the ledger and the caches were read."""
    if not 3 <= len(name) <= 63:
        return f"has {len(name)} characters, not 3 to 63"
    wrong = sorted({c for c in name if c not in _BUCKET_CHARS})
    if wrong:
        return f"has {''.join(wrong)!r}: only lower-case letters, digits, '.' and '-'"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "must begin and end with a letter or a digit"
    if ".." in name:
        return "has two periods in a row"
    if _IP_ADDRESS.match(name):
        return "is formatted as an IP address"
    if name.startswith(_RESERVED_PREFIXES) or name.endswith(_RESERVED_SUFFIXES):
        return "starts or ends with a word S3 reserves (xn--, sthree-, -s3alias, ...)"
    return None


def endpoint_problem(url: str) -> str | None:
    """Why AWS_ENDPOINT_URL's value cannot be an S3 endpoint, or None."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port that is not a number in 0-65535
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected http(s)://HOST[:PORT]"
    if port == 0:
        return "port 0"
    return None


def s3_client(environ: Mapping[str, str], on_slow: Callable[[str], None] | None = None) -> Any:
    """A boto3 S3 client from the normal credential chain; AWS_ENDPOINT_URL for other servers.

    Time limits, so that a server that accepts connections and never answers fails a command
    within two timeouts: connect within 5 s, each response within LIFECYCLE_S3_TIMEOUT
    (default 20 s), two attempts per request, and none more for a while once one attempt ran
    out of time (lifecycle.archive.objects). `on_slow` is told when a request has waited
    SLOW_AFTER_S for its answer, so a long wait is never silent.
    """
    import boto3  # imported here: start-up of other verbs must not pay for boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    from lifecycle.archive.objects import Patience, tell_when_slow
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
    # First: a request refused unsent is not waited for, so it starts no slow-teller's timer.
    Patience(endpoint or client.meta.endpoint_url, config.read_timeout).watch(client)
    if on_slow is not None:
        tell_when_slow(client, on_slow, config.read_timeout)
    return client
