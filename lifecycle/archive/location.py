"""Where the archive lives: `s3://BUCKET/PREFIX`, checked as S3 would check it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from lifecycle.errors import LifecycleError

MAX_PREFIX_BYTES = 512  # S3 keys are at most 1024 bytes; the rest is the archive's layout
_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")
_IP_ADDRESS = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")
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
    if _IP_ADDRESS.fullmatch(name):
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
