"""Archive one result now (`lifecycle result add` with an archive location configured).

A result record in S3 is only worth having if the chain behind it can be followed from S3
alone, so each cache whose version after the result's boot is not there yet (never archived
since that boot) is archived first, exactly as `lifecycle archive CACHE` would (evidence;
content too where it was archived with content before), which writes the boot's record too.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lifecycle import __version__
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.run import ArchiveReport, archive_caches
from lifecycle.archive.store import ArchiveError, BlobStore, S3Unavailable
from lifecycle.archive.transfer import Progress
from lifecycle.errors import LifecycleError
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.results import ResultArchiveRecord, ResultRecord, result_archives
from lifecycle.results.archive import archive_pending_results, archive_result, chain_gaps


def with_results(
    ledger: Ledger,
    client: Any,
    location: ArchiveLocation,
    reports: list[ArchiveReport],
    progress: Progress | None,
) -> list[ArchiveReport]:
    """After an archive of caches: archive every result whose caches' records there now list
    its boot (a result added after its caches were archived goes with the next archive), and
    say in each cache's report which of its results went."""
    if not reports or reports[0].dry_run:
        return reports
    store = BlobStore(client, location)
    done = archive_pending_results(
        ledger, store, progress or (lambda line: None), host=socket.gethostname(),
        tool_version=__version__,
    )  # fmt: skip
    return [
        replace(r, results=tuple(sorted(i for i, behind in done.items() if r.cache_id in behind)))
        for r in reports
    ]


def publish_result(
    ledger: Ledger,
    home: Home,
    client: Any,
    location: ArchiveLocation,
    result: ResultRecord,
    *,
    progress: Callable[[str], None],
) -> ResultArchiveRecord:
    """Archive the result (and first whichever of its caches need it); its archive row."""
    store = BlobStore(client, location)
    url = location.url()
    try:
        stale = [c for c in chain_gaps(ledger, result.boot_id, url) if c]
        if stale:
            # Its sweep writes the result's record as soon as the last of them is archived.
            archived = archive_caches(
                ledger, home, client, location, stale, with_content=False, dry_run=False,
                progress=progress,
            )  # fmt: skip
            with_results(ledger, client, location, archived, progress)
        for done in result_archives(ledger, result.id):
            if done.location == url:
                return done
        gaps = chain_gaps(ledger, result.boot_id, url)
        if gaps:
            raise ArchiveError(next(iter(gaps.values())))
        return archive_result(
            ledger, store, result, host=socket.gethostname(), tool_version=__version__
        )
    except LifecycleError as exc:
        family = S3Unavailable if isinstance(exc, S3Unavailable) else ArchiveError
        raise family(
            f"result {result.id} is recorded, but not archived to {url}: {exc}"
            "; `lifecycle archive --all` archives it once that is fixed"
        ) from exc
