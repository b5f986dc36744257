"""`lifecycle audit result|cache`: the chain behind a result, or everything on a cache.

Read from this host's ledger, or with `--from s3://BUCKET/PREFIX` from the archive alone (no
ledger is opened or made): the same JSON either way, for facts that were archived.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lifecycle.archive.store import BlobStore
from lifecycle.audit import from_ledger, from_s3
from lifecycle.audit.chain import build_cache_audit, build_chain
from lifecycle.audit.provenance import statement
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger


def audit_result(
    result_id: str, *, ledger: Ledger | None, store: BlobStore | None
) -> dict[str, Any]:
    """The chain of one result: from the archive when a store is given, else from the ledger."""
    if store is not None:
        return build_chain(from_s3.result_facts(store, result_id))
    assert ledger is not None, "audit reads the ledger or the archive"
    return build_chain(from_ledger.result_facts(ledger, result_id))


def audit_cache(cache_id: str, *, ledger: Ledger | None, store: BlobStore | None) -> dict[str, Any]:
    """A cache, its boots and its results: from the archive when a store is given."""
    if store is not None:
        return build_cache_audit(from_s3.cache_facts(store, cache_id))
    assert ledger is not None, "audit reads the ledger or the archive"
    return build_cache_audit(from_ledger.cache_facts(ledger, cache_id))


def check_output_file(path: Path, option: str) -> None:
    """Refuse, before any work, a file `option` could not write: its directory must exist."""
    if path.is_dir():
        raise LifecycleError(f"{option} {path}: is a directory")
    if not path.parent.is_dir():
        raise LifecycleError(f"{option} {path}: no such directory {path.parent}")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise LifecycleError(f"{option} {path}: {path.parent} is not writable")


def write_provenance(chain: dict[str, Any], path: Path) -> dict[str, Any]:
    """Write the chain's in-toto Statement v1 to `path` (replacing it whole); the statement."""
    document = statement(chain)
    temp = path.with_name(f".{path.name}.tmp")
    try:
        temp.write_text(json.dumps(document, indent=2) + "\n")
        temp.replace(path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise LifecycleError(f"--provenance {path}: {exc.strerror or exc}") from None
    return document
