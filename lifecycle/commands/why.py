"""`lifecycle why BOOT [--against BOOT]`: why a boot was cold or only partly warm.

It compares the boot with the boot it should have matched (the one given, or the newest warm
boot of the same manifest and profile) and names each factor that changed, in the order a
cache is lost: lifecycle's cache key (manifest, base image, pins, GPU arch), the manifest,
vLLM's compile dir and the hashes it folds in, each env var of vLLM's env hash, the rest of
the env, and JIT output written outside the tracked caches.
"""

from __future__ import annotations

from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.why import Explanation, explain


def run(ctx: Context, request: verbs.Why) -> Explanation:
    """Explain one boot from this host's ledger and evidence."""
    boot_id, against = request.boot_id, request.against
    ctx.recorded(missing=f"no boot {boot_id!r} to explain")
    with ctx.ledger(create=False) as ledger:
        return explain(ledger, boot_id, against)
