"""Work that spans steps, above them all: a boot, then its profile's acceptance.

The boot is recorded, its caches scanned and their leases given back before the acceptance
starts, so the acceptance can neither hold a cache nor change what the boot recorded; what it
finds is a result of the boot (lifecycle.results), not part of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lifecycle.boot.run import BootRequest, Watch, boot
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord
from lifecycle.results.acceptance import accept


def boot_then_accept(
    client: Any, ledger: Ledger, request: BootRequest, host_env: Mapping[str, str], watch: Watch
) -> BootRecord:
    """Boot once; then, if the profile declares one, run its acceptance and record its result."""
    record = boot(client, ledger, request, host_env, watch)
    acceptance = request.loaded.manifest.profiles[record.profile].acceptance
    if acceptance is not None:
        result = accept(ledger, record, acceptance, request.loaded.file, host_env)
        flag = " [instrumented]" if result.instrumented else ""
        watch.on_line(f"acceptance {result.name}: {result.status}{flag}, result {result.id}")
    return record
