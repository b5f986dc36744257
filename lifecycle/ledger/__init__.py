"""The local ledger: every build, boot and cache, recorded in SQLite under LIFECYCLE_HOME."""

from __future__ import annotations

from lifecycle.ledger.builds import BuildRecord
from lifecycle.ledger.core import (
    HomeUnusable,
    Ledger,
    NoLedger,
    default_home,
    has_ledger,
)
from lifecycle.ledger.schema import MIGRATIONS

__all__ = [
    "MIGRATIONS",
    "BuildRecord",
    "HomeUnusable",
    "Ledger",
    "NoLedger",
    "default_home",
    "has_ledger",
]
