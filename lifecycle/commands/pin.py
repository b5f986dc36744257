"""`lifecycle pin` and `lifecycle unpin`: make caches GC roots that teardown always keeps.

A pin target is resolved to the caches behind it by `resolve_target`: a cache id is that
cache; a result id is every cache its boot used, so that keeping a result keeps what produced
it. A result's pins carry `result <id>` as their reason (`result <id>: TEXT` with --reason),
and `unpin RESULT` takes off exactly those, leaving any other pin on the same caches: a pin
made by hand may not have a reason of that shape, or it would be taken for the result's.

With an archive location set (--to, LIFECYCLE_ARCHIVE, `archive:` in lifecycle.yaml), a result
archived there is pinned there too, for the whole team (lifecycle.archive.record): `gc --remote`
keeps it and everything behind it, whichever host runs it. A result only the archive knows
(archived by another host) is pinned there alone.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import ClassVar

from lifecycle.archive.config import optional_location
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import (
    UNREAD_PIN,
    active_until,
    being_collected,
    names_of,
    racing,
    remove_pins,
    write_pin,
)
from lifecycle.archive.store import BlobStore
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import LifecycleError, did_you_mean
from lifecycle.ledger import Ledger
from lifecycle.ledger import removal as ledger_pins
from lifecycle.ledger.boots import CacheRecord, all_caches, cache_by_id, cache_uses
from lifecycle.ledger.results import ResultRecord, all_results, result_by_id
from lifecycle.records import PIN_FORMAT, PinV1
from lifecycle.report import Report
from lifecycle.results.archive import archived_result, unreadable_result
from lifecycle.results.model import RESULT_PIN, is_pin_of, pin_reason, pinned_result
from lifecycle.table import lines_text
from lifecycle.teardown.survey import is_gone

DEFAULT_REASON = "pinned by hand"


class ReservedReason(LifecycleError):
    """A hand-made pin may not read as a result's: gc, `results` and `unpin RESULT` would take
    it for one, and `unpin RESULT` would remove a pin it did not make (exit 2)."""


class NothingHere(LifecycleError):
    """This host has nothing of the target to (un)pin: it does not know it, it was torn down,
    or it carries no such pin. For a result the archive holds, its pin there is what counts."""


@dataclass(frozen=True)
class PinReport(Report):
    """What a pin or unpin did to each cache the target resolved to."""

    FORMAT: ClassVar[str] = "lifecycle-pin/1"
    action: str  # pin | unpin
    target: str
    pinned: tuple[str, ...]  # caches now carrying the pin (pin) or that lost pins (unpin)
    skipped: tuple[str, ...]  # caches left alone, each with why
    reasons: dict[str, list[str]]  # cache id -> every pin reason it carries now
    team: tuple[str, ...] = ()  # the result's pins in the archive written (pin) or removed
    not_here: str | None = None  # why nothing was pinned (unpinned) on this host, when so
    # The result's pins in the archive that cannot be read (s3:// URL -> why), which an unpin
    # with --reason cannot match: they stay, and still pin it
    unreadable: dict[str, str] = field(default_factory=dict)
    # What may undo the pin that cannot be told (a gc intent that cannot be read), on stderr
    warnings: tuple[str, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(f"warning: {warning}" for warning in self.warnings)

    def text(self) -> str:
        """A line per cache: pinned (with every reason), or unpinned (with what pins stay)."""
        lines = []
        for cache_id in self.pinned:
            held = self.reasons[cache_id]
            if self.action == "pin":
                lines.append(f"pinned {cache_id}: {'; '.join(held)}")
            else:
                lines.append(
                    f"unpinned {cache_id}" + (f"; still pinned: {'; '.join(held)}" if held else "")
                )
        lines += [f"skipped {skipped}" for skipped in self.skipped]
        verb = "pinned for the team at" if self.action == "pin" else "unpinned for the team:"
        lines += [f"{verb} {where}" for where in self.team]
        if self.not_here:
            done = "pinned" if self.action == "pin" else "unpinned"
            lines.append(f"nothing {done} on this host: {self.not_here}")
        lines += [
            f"still pinned for the team by {UNREAD_PIN}: {url}: {why}; `unpin {self.target}`"
            " with no --reason removes it"
            for url, why in self.unreadable.items()
        ]
        return lines_text(lines)  # a reason is a field: a teammate's, read from the bucket


def resolve_target(ledger: Ledger, target: str) -> list[CacheRecord]:
    """The caches a pin target stands for: the cache itself, or every cache behind a result."""
    cache = cache_by_id(ledger, target)
    if cache is not None:
        return [cache]
    result = result_by_id(ledger, target)
    if result is not None:
        found = [
            cache_by_id(ledger, u.cache_id) for u in cache_uses(ledger, boot_id=result.boot_id)
        ]
        return [c for c in found if c is not None]
    known = [c.id for c in all_caches(ledger)] + [r.id for r in all_results(ledger)]
    hint = did_you_mean(target, known, " (`lifecycle caches` lists them)")
    raise NothingHere(f"unknown cache or result {target!r}{hint}")


def pin(ctx: Context, request: verbs.Pin) -> PinReport:
    """`lifecycle pin`: on this host, and for a result in the archive too when one is set."""
    target = request.target
    where = optional_location(request.to, ctx.environ, ctx.project)
    why = request.reason or DEFAULT_REASON
    try:
        team, warnings = _team_pin(ctx, where, target, why)
    except PinTooLate as late:
        # The archive may lose the result: this host's caches behind it may be the last of
        # them, so they are pinned all the same, and the error says so.
        local = _here(ctx, lambda ledger: pin_target(ledger, target, why, ctx.now()))
        here = (
            f"nothing pinned on this host: {local}"
            if isinstance(local, str)
            else f"pinned on this host: {', '.join(local.pinned)}"
        )
        raise PinTooLate(f"{late}; {here}") from None
    if not team:
        with ctx.ledger(create=False, missing=f"unknown cache or result {target!r}") as ledger:
            return pin_target(ledger, target, why, ctx.now())
    local = _here(ctx, lambda ledger: pin_target(ledger, target, why, ctx.now()))
    if isinstance(local, str):
        return PinReport("pin", target, (), (), {}, team, not_here=local, warnings=warnings)
    return replace(local, team=team, warnings=warnings)


def _team_pin(
    ctx: Context, where: ArchiveLocation | None, target: str, reason: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Pin a result in the archive (when one is set and holds the result): where it went, and
    what may undo it that cannot be told."""
    if where is None or not target.startswith("r-"):
        return (), ()
    store = BlobStore(ctx.s3(), where)
    found, unread = archived_result(store, target)
    if found is None and unread:  # said, not skipped
        raise unreadable_result(target, unread)
    if found is None:
        return (), ()  # not archived there (yet): this host's pin is all there is
    pin = PinV1(
        format=PIN_FORMAT, target=target, reason=reason, host=socket.gethostname(),
        pinned_at=ctx.now().isoformat(timespec="seconds"),
    )  # fmt: skip
    written = store.where(write_pin(store, pin))
    relative, record = found
    warning = _not_being_collected(store, target, {relative} | names_of(record), written)
    return (written,), (warning,) if warning else ()


class PinTooLate(LifecycleError):
    """A gc sweep that looked at the archive before the pin was written may be deleting what
    the pin is for: it cannot spare it, so the pin says so instead of "pinned" (exit 1)."""

    exit_code = 1


def _not_being_collected(
    store: BlobStore, target: str, chain: set[str], written: str
) -> str | None:
    """Read after the pin is written: a sweep whose intent is not here yet looks at the
    archive after the pin, and spares all it holds (lifecycle.gc); one whose intent lists
    part of the result's chain may be deleting it now. One whose intent cannot be read may
    list any of it stored before its intent: said, as what the pin cannot tell (the pin
    stands, on this host too)."""
    collecting = being_collected(store, {})
    listed = sorted(chain & collecting.listed.keys())
    verify = f"`lifecycle verify {target} --from {store.location.url()}` after"
    if listed:
        key, intent = listed[0], collecting.listed[listed[0]]
        raise PinTooLate(
            f"result {target}: {store.where(key)}: a gc at this location may be removing it"
            f" (its intent {intent.key}); pinned for the team at {written}, too late to keep"
            f" it: {verify} {active_until(intent)} says what is left"
        )
    unsure = racing(store, chain, collecting, unread_only=True)
    if unsure is None:
        return None
    after = active_until(unsure.intent)
    return f"result {target}: {unsure.said(store)}: {verify} {after} says what is left"


def unpin(ctx: Context, request: verbs.Unpin) -> PinReport:
    """`lifecycle unpin`: on this host, and a result's pins in the archive when one is set."""
    target, reason = request.target, request.reason
    where = optional_location(request.to, ctx.environ, ctx.project)
    if where is None or not target.startswith("r-"):
        with ctx.ledger(create=False, missing=f"unknown cache or result {target!r}") as ledger:
            return unpin_target(ledger, target, reason)
    store = BlobStore(ctx.s3(), where)
    removed, kept = remove_pins(store, target, reason)
    unreadable = {store.where(key): why for key, why in kept.items()}
    local = _here(ctx, lambda ledger: unpin_target(ledger, target, reason))
    if not removed and isinstance(local, str):
        still = "".join(f"; still pinned by {UNREAD_PIN}: {u}: {w}" for u, w in unreadable.items())
        still += f"; `unpin {target}` with no --reason removes it" if kept else ""
        raise LifecycleError(f"{target} has no pin at {where.url()} nor on this host{still}")
    team = tuple(f"{where.url()}: {r}" for r in removed)
    if isinstance(local, str):
        return PinReport("unpin", target, (), (), {}, team, local, unreadable)
    return replace(local, team=team, unreadable=unreadable)


def _here(ctx: Context, act: Callable[[Ledger], PinReport]) -> PinReport | str:
    """The pin or unpin on this host, or why there was none: this host knows nothing of the
    result, or has nothing of it left to pin (its pin in the archive is what counts then)."""
    if not ctx.recorded():
        return "nothing is recorded on this host"
    with ctx.ledger(create=False) as ledger:
        try:
            return act(ledger)
        except NothingHere as exc:
            return str(exc)


def pin_target(ledger: Ledger, target: str, reason: str, now: datetime) -> PinReport:
    """Pin every cache behind `target` that is still on this host."""
    caches = resolve_target(ledger, target)
    result = _result(ledger, target)
    if result is not None:
        reason = pin_reason(result.id, None if reason == DEFAULT_REASON else reason)
    elif pinned_result(reason) is not None:
        raise ReservedReason(
            f"--reason {reason!r}: `{RESULT_PIN}<id>` marks a pin `pin RESULT` made (gc keeps"
            " that result, `unpin RESULT` takes it off); word it otherwise, or pin the result:"
            " `lifecycle pin RESULT --reason TEXT`"
        )
    live = [c for c in caches if c.state != "torn-down"]
    if not live:
        raise NothingHere(f"{target}: already torn down; nothing on this host to keep")
    # A dir gone behind the ledger's back: a pin would keep nothing, and would hold the cache
    # from being recorded gone (teardown keeps what is pinned), the ledger calling it live.
    there = [c for c in live if not is_gone(c)]
    if not there:
        dirs = f"its dir {live[0].host_path} is" if len(live) == 1 else "the dirs of its caches are"
        raise NothingHere(
            f"{target}: {dirs} gone; nothing on this host to keep (the next `lifecycle"
            " teardown` records it gone)"
        )
    at = now.isoformat(timespec="seconds")
    for cache in there:
        ledger_pins.pin(ledger, cache.id, reason, at)
    skipped = tuple(
        f"{c.id}: already torn down" if c not in live else f"{c.id}: its dir {c.host_path} is gone"
        for c in caches
        if c not in there
    )
    return _report(ledger, "pin", target, tuple(c.id for c in there), skipped)


def unpin_target(ledger: Ledger, target: str, reason: str | None) -> PinReport:
    """Remove the pin with `reason` (every pin when None) from the caches behind `target`;
    for a result, only the pins it put there."""
    caches = resolve_target(ledger, target)
    current = ledger_pins.pins(ledger)
    result = _result(ledger, target)
    wanted = _matcher(result, reason)
    held = sorted({r for c in caches for r in current.get(c.id, [])})
    if not any(wanted(r) for r in held) and (reason is not None or result is not None):
        have = f"its pins: {'; '.join(held)}" if held else "it is not pinned"
        what = pin_reason(result.id, reason) if result is not None else reason
        raise NothingHere(f"{target} has no pin with reason {what!r}; {have}")
    removed = []
    for cache in caches:
        gone = [r for r in current.get(cache.id, []) if wanted(r)]
        for one in gone:
            ledger_pins.unpin(ledger, cache.id, one)
        if gone:
            removed.append(cache.id)
    skipped = tuple(f"{c.id}: was not pinned" for c in caches if c.id not in removed)
    return _report(ledger, "unpin", target, tuple(removed), skipped)


def _matcher(result: ResultRecord | None, reason: str | None) -> Callable[[str], bool]:
    """Which pin reasons an unpin takes off."""
    if result is None:
        return lambda held: reason is None or held == reason
    mine = pin_reason(result.id, reason)
    return (
        (lambda held: held == mine) if reason is not None else (lambda held: is_pin_of(held, mine))
    )


def _result(ledger: Ledger, target: str) -> ResultRecord | None:
    # A cache id is looked up first, as `resolve_target` does: the two never collide
    # (`<cache name>-<12 hex>` and `r-<time>-<6 hex>`), but the order is the rule.
    return None if cache_by_id(ledger, target) is not None else result_by_id(ledger, target)


def _report(
    ledger: Ledger, action: str, target: str, changed: tuple[str, ...], skipped: tuple[str, ...]
) -> PinReport:
    current = ledger_pins.pins(ledger)
    ids = [*changed, *(s.split(":", 1)[0] for s in skipped)]
    return PinReport(action, target, changed, skipped, {i: current.get(i, []) for i in ids})
