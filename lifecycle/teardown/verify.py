"""Verify caches' archive records against S3 at the moment teardown asks.

Each archive is checked where it was written (its record's location), against the record
sha256 the ledger kept, with the records of the boots that used the cache there. A location
that does not answer is asked once, not once per cache, and every cache archived there is kept
with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import BlobStore, S3Unavailable
from lifecycle.archive.verify import VerifiedRecord, fetch_verified
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import ArchiveRecord, BootArchiveRow, boot_archive
from lifecycle.ledger.boots import cache_uses

# HeadBucket answers that mean "the server is there, these credentials may not list": the
# objects themselves are still checked one by one.
_ANSWERED = {"403", "AccessDenied"}


class ArchiveVerifier:
    """`verifier(archive)` -> the record now, with one problem per object that does not verify."""

    def __init__(
        self,
        client: Any | None,
        client_problem: str | None = None,
        boots_for: Callable[[ArchiveRecord], Sequence[BootArchiveRow]] = lambda archive: (),
    ) -> None:
        self._client = client
        self._client_problem = client_problem or "no S3 client"
        self._boots_for = boots_for
        self._reachable: dict[str, str | None] = {}  # location url -> why not, or None
        self.unreachable: dict[str, str] = {}  # location url -> why its server is out of reach

    def __call__(self, archive: ArchiveRecord) -> VerifiedRecord:
        location = ArchiveLocation.parse(archive.location)
        url = location.url()
        if self._client is None:
            return _unverified(f"cannot reach S3 to verify {url}: {self._client_problem}")
        unreachable = self.problem_with(location)
        if unreachable:
            return _unverified(unreachable)
        try:
            store = BlobStore(self._client, location)
            return fetch_verified(store, archive, self._boots_for(archive))
        except S3Unavailable as exc:  # the server went away since the probe: ask it no more
            self._reachable[url] = self.unreachable[url] = str(exc)
            return _unverified(str(exc))
        except LifecycleError as exc:  # the store's other one-line errors
            return _unverified(str(exc))
        except (BotoCoreError, ClientError) as exc:
            return _unverified(f"cannot verify s3://{location.bucket}/{archive.record_key}: {exc}")

    def problem_with(self, location: ArchiveLocation) -> str | None:
        """Why the location cannot be used now (asked once per run), or None."""
        if self._client is None:
            return f"cannot reach S3: {self._client_problem}"
        if location.url() not in self._reachable:
            self._reachable[location.url()] = self._probe(location)
        return self._reachable[location.url()]

    def _probe(self, location: ArchiveLocation) -> str | None:
        assert self._client is not None
        try:
            self._client.head_bucket(Bucket=location.bucket)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _ANSWERED:
                return None
            return f"S3 bucket of {location.url()} not usable: {exc}"
        except BotoCoreError as exc:
            why = BlobStore(self._client, location).error(exc, "")
            self.unreachable[location.url()] = str(why)
            return f"cannot reach S3 for {location.url()}: {why}"
        return None


def _unverified(problem: str) -> VerifiedRecord:
    return VerifiedRecord((problem,), None, answered=False)


def archived_boots(ledger: Ledger) -> Callable[[ArchiveRecord], list[BootArchiveRow]]:
    """For a cache's archive: the records, at the same location, of the boots that used it."""

    def boots_for(archive: ArchiveRecord) -> list[BootArchiveRow]:
        uses = [u for u in cache_uses(ledger) if u.cache_id == archive.cache_id]
        rows = [boot_archive(ledger, u.boot_id, archive.location) for u in uses]
        return [row for row in rows if row is not None]

    return boots_for
