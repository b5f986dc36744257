"""Predictions, registered before any rung runs: immutable, timestamped, archived.

A ladder's predicted margins are what the measurements are read against ("the margins came in
20 to 40 under"), so they are fixed before the first boot of the night: written once to the
ledger (never updated), then to the archive as `nights/<night>/predictions.json`, put only if
no object is there yet (If-None-Match). Registering again (a resumed night) changes nothing;
a copy in S3 that differs from this host's is an error, not something to overwrite.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass

from lifecycle.archive.store import RECORD_MAX, ArchiveError, BlobStore
from lifecycle.ledger.nights import Prediction, add, predictions
from lifecycle.night.journal import NightJournal
from lifecycle.night.plan import Plan

FORMAT = "lifecycle-predictions/1"
REGISTERED = "predictions:registered"


@dataclass(frozen=True)
class Registered:
    """A night's predictions, where they are archived, and the sha256 of that record."""

    predictions: tuple[Prediction, ...]
    url: str | None
    sha256: str | None


def register(journal: NightJournal, plan: Plan, store: BlobStore | None) -> Registered:
    """Register the plan's predictions for this night (once), then archive them (once)."""
    ledger = journal.ledger
    found = predictions(ledger, journal.night.id)
    if not found:
        at = journal.stamp()
        found = [
            Prediction(journal.night.id, pin, ladder.argument, rung, margin, at)
            for ladder in plan.ladders
            for pin, rungs in ladder.predictions.items()
            for rung, margin in rungs.items()
        ]
        if not found:
            return Registered((), None, None)
        add(ledger, *found)
    body = record(journal, found)
    sha = hashlib.sha256(body).hexdigest()
    if store is None:
        return Registered(tuple(found), None, None)
    key = store.location.key("nights", journal.night.id, "predictions.json")
    if not store.put_document(key, body, only_new=True):
        there = io.BytesIO()
        store.download_sha256(key, there, cap=RECORD_MAX)  # a document, never held unbounded
        if there.getvalue() != body:
            raise ArchiveError(
                f"{store.url(key)} differs from the predictions this host registered for night"
                f" {journal.night.id}; predictions are never rewritten"
            )
    if not any(e.event == REGISTERED for e in journal.events()):
        journal.event(REGISTERED, json.dumps({"url": store.url(key), "sha256": sha}))
    return Registered(tuple(found), store.url(key), sha)


def record(journal: NightJournal, found: list[Prediction]) -> bytes:
    """The predictions as their archived record: canonical JSON, the same bytes every time."""
    document = {
        "format": FORMAT,
        "night": journal.night.id,
        "plan": journal.night.plan_name,
        "plan_digest": journal.night.plan_digest,
        "registered_at": found[0].registered_at,
        "predictions": [
            {"pin": p.pin, "argument": p.argument, "rung": p.rung, "margin_mib": p.margin_mib}
            for p in found
        ],
    }
    return (json.dumps(document, sort_keys=True, indent=1) + "\n").encode()
