"""This host's copies of an archive's records, so a team's thousands are read from S3 once.

A record never changes: its key names the sha256 of its bytes, so a copy whose bytes still hash
to its key is that record for ever (restic keeps its index the same way). What reads every
record of an archive again and again (a plan, `status`, `gc --remote`, `boots`, `caches` and
`results --from`) reads each from S3 once, then from `$LIFECYCLE_HOME/records/`. Nothing that
checks what the server holds now (verify, teardown's and bake's checks, restore) reads a copy.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path

from lifecycle.archive.layout import parse_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.home import Home

# The records; a blob or pack is named by its bytes too, but is read only to be checked.
_KINDS = frozenset({"version", "boot", "result", "image", "pin", "gc"})


class RecordCopies:
    """The copies of one archive location's records, under their keys."""

    def __init__(self, home: Home, location: ArchiveLocation) -> None:
        url = location.url().encode()
        self.root = home.root / "records" / hashlib.sha256(url).hexdigest()[:16]

    def read(self, relative: str, fetch: Callable[[], bytes | None]) -> bytes | None:
        """The record's bytes from its copy when the copy is whole, else `fetch`ed and kept."""
        key = parse_key(relative)
        if key is None or key.kind not in _KINDS or key.sha256 is None:
            return fetch()
        path = self.root / relative
        with suppress(OSError):
            copy = path.read_bytes()
            if hashlib.sha256(copy).hexdigest() == key.sha256:
                return copy
        body = fetch()
        if body is not None and hashlib.sha256(body).hexdigest() == key.sha256:
            with suppress(OSError):  # a copy saves a GET next time; without one, S3 it is
                _keep(path, body)
        return body

    def keep_only(self, listed: Iterable[str], under: str = "") -> None:
        """Forget the copies under `under` of records the archive no longer lists (a gc took
        them), so the copies never outgrow the archive."""
        keep, root = set(listed), str(self.root)
        for parent, _, names in os.walk(self.root / under, topdown=False):
            relative = parent[len(root) + 1 :]
            with suppress(OSError):  # a home this user cannot write keeps its copies
                for name in names:
                    if f"{relative}/{name}" not in keep:
                        (Path(parent) / name).unlink(missing_ok=True)
            with suppress(OSError):  # a dir left empty; one that is not stays
                Path(parent).rmdir()


def _keep(path: Path, body: bytes) -> None:
    """Write a copy under a temp name, then rename it: never seen half-written. Not synced: a
    copy a crash left short fails its digest and is read from S3 again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        temp.write_bytes(body)
        temp.replace(path)
    except OSError:
        temp.unlink(missing_ok=True)
        raise
