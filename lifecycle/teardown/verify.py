"""Verify caches' archive records against S3 at the moment teardown asks.

Each archive is checked where it was written (its record's location), against the record
sha256 the ledger kept. A location that does not answer is asked once, not once per cache,
and every cache archived there is kept with the reason.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.run import verify_archive
from lifecycle.archive.store import BlobStore
from lifecycle.errors import LifecycleError
from lifecycle.ledger.archives import ArchiveRecord

# HeadBucket answers that mean "the server is there, these credentials may not list": the
# objects themselves are still checked one by one.
_ANSWERED = {"403", "AccessDenied"}


class ArchiveVerifier:
    """`verifier(archive)` -> one problem per object that does not verify now; [] = verified."""

    def __init__(self, client: Any | None, client_problem: str | None = None) -> None:
        self._client = client
        self._client_problem = client_problem or "no S3 client"
        self._reachable: dict[str, str | None] = {}  # location url -> why not, or None

    def __call__(self, archive: ArchiveRecord) -> list[str]:
        location = ArchiveLocation.parse(archive.location)
        url = location.url()
        if self._client is None:
            return [f"cannot reach S3 to verify {url}: {self._client_problem}"]
        if url not in self._reachable:
            self._reachable[url] = self._probe(location)
        unreachable = self._reachable[url]
        if unreachable:
            return [unreachable]
        try:
            store = BlobStore(self._client, location)
            problems: list[str] = verify_archive(store, archive.cache_id, archive.record_sha256)
        except LifecycleError as exc:  # the store's one-line errors: server gone, access denied
            return [str(exc)]
        except (BotoCoreError, ClientError) as exc:
            return [f"cannot verify s3://{location.bucket}/{archive.record_key}: {exc}"]
        return problems

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
            return f"cannot reach S3 for {location.url()}: {exc}"
        return None
