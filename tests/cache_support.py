"""For tests that shape a cache's files by hand between boots (a large file, a secret, a link):
a boot passes over a cache changed behind lifecycle's back, so such a test records the tree it
made as lifecycle's own, as an end-of-boot scan would have."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from lifecycle.fingerprint import scan
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import Scanned, cache_by_id, record_scan


def adopt(cache_id: str, home: Path | None = None) -> str:
    """Scan the cache as it is now and record that scan; its new tree digest."""
    ledger = Ledger.open(home or Path(os.environ["LIFECYCLE_HOME"]))
    cache = cache_by_id(ledger, cache_id)
    assert cache is not None, cache_id
    found = scan(Path(cache.host_path))
    now = datetime.now(UTC).isoformat(timespec="seconds")
    kept = ledger.keep_evidence(
        f"scans/{cache_id}", f"adopted-{now.replace(':', '')}.json", found.to_json().encode()
    )
    record_scan(
        ledger, cache_id, Scanned(found.tree_digest, found.files, found.bytes, str(kept), now)
    )
    return found.tree_digest
