"""`lifecycle pin` and `lifecycle unpin`: make caches GC roots that teardown always keeps.

A pin target is resolved to the caches behind it by `resolve_target`. Today a target is a
cache id; a result id will resolve to the caches its boot used, so that keeping a result
keeps what produced it, and its pins carry the result's id as their reason.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime

from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import pin, pins, unpin
from lifecycle.ledger.boots import CacheRecord, all_caches, cache_by_id

DEFAULT_REASON = "pinned by hand"


@dataclass(frozen=True)
class PinReport:
    """What a pin or unpin did to each cache the target resolved to."""

    target: str
    pinned: tuple[str, ...]  # caches now carrying the pin (pin) or that lost pins (unpin)
    skipped: tuple[str, ...]  # caches left alone, each with why
    reasons: dict[str, list[str]]  # cache id -> every pin reason it carries now


def resolve_target(ledger: Ledger, target: str) -> list[CacheRecord]:
    """The caches a pin target stands for: the cache itself when it is a cache id."""
    cache = cache_by_id(ledger, target)
    if cache is not None:
        return [cache]
    known = [c.id for c in all_caches(ledger)]
    close = difflib.get_close_matches(target, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else " (`lifecycle caches` lists them)"
    raise LifecycleError(f"unknown cache {target!r}{hint}")


def pin_target(ledger: Ledger, target: str, reason: str, now: datetime) -> PinReport:
    """Pin every cache behind `target` that is still on this host."""
    caches = resolve_target(ledger, target)
    live = [c for c in caches if c.state != "torn-down"]
    if not live:
        raise LifecycleError(f"{target}: already torn down; nothing on this host to keep")
    at = now.isoformat(timespec="seconds")
    for cache in live:
        pin(ledger, cache.id, reason, at)
    skipped = tuple(f"{c.id}: already torn down" for c in caches if c not in live)
    return _report(ledger, target, tuple(c.id for c in live), skipped)


def unpin_target(ledger: Ledger, target: str, reason: str | None) -> PinReport:
    """Remove the pin with `reason` (every pin when None) from the caches behind `target`."""
    caches = resolve_target(ledger, target)
    current = pins(ledger)
    if reason is not None and not any(reason in current.get(c.id, []) for c in caches):
        held = sorted({r for c in caches for r in current.get(c.id, [])})
        have = f"its pins: {'; '.join(held)}" if held else "it is not pinned"
        raise LifecycleError(f"{target} has no pin with reason {reason!r}; {have}")
    removed = tuple(c.id for c in caches if unpin(ledger, c.id, reason))
    skipped = tuple(f"{c.id}: was not pinned" for c in caches if c.id not in removed)
    return _report(ledger, target, removed, skipped)


def _report(
    ledger: Ledger, target: str, changed: tuple[str, ...], skipped: tuple[str, ...]
) -> PinReport:
    current = pins(ledger)
    ids = [*changed, *(s.split(":", 1)[0] for s in skipped)]
    return PinReport(target, changed, skipped, {i: current.get(i, []) for i in ids})
