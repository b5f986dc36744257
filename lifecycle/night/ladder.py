"""A ladder's predictions, registered before any rung runs, and its outcome against them.

Predictions are fixed before the night's first boot (ledger once, archive once), since the
measurements are read against them. The value chosen is the highest rung whose measured margin
clears the floor in both cache states; a rung not measured in a state does not clear: a value
is valid only for conditions it was measured in.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass

from lifecycle.archive.store import RECORD_MAX, ArchiveError, BlobStore
from lifecycle.ledger.nights import NightEvent, Prediction, add
from lifecycle.ledger.nights import predictions as registered_predictions
from lifecycle.night.cells import Cell
from lifecycle.night.engine import RunSummary
from lifecycle.night.journal import NightJournal
from lifecycle.night.plan import Frozen, Ladder, Plan

STATES = ("cold", "warm")
WRITTEN = "ladder:written"
PREDICTIONS_FORMAT = "lifecycle-predictions/1"
REGISTERED = "predictions:registered"


class MeasuredView(Frozen):
    """One rung in one cache state, as its run found it."""

    margin_mib: float | None  # None: not measured (the shape's path never ran)
    verdict: str  # the rung's check: pass (clears the floor), fail, inconclusive
    boot_id: str | None
    image_id: str | None = None  # the image that boot ran (None: its summary does not say)
    result_id: str | None
    under_prediction_mib: float | None  # predicted less measured


class RungView(Frozen):
    """A rung of one pin: predicted, and measured cold and warm."""

    value: float
    predicted_mib: float | None
    measured: dict[str, MeasuredView]  # by cache state; a state that has not run yet is absent
    clears: bool  # measured in both states, and at or above the floor in each


class PinLadderView(Frozen):
    """One pin's climb: its rungs, the value chosen, and where it was written."""

    pin: str
    rungs: list[RungView]
    chosen: float | None  # the highest rung clearing the floor cold and warm
    why: str  # the choice in one line, with the margins it rests on
    written: str | None = None

    @property
    def complete(self) -> bool:
        """Every rung measured in both states."""
        return all(len(r.measured) == len(STATES) for r in self.rungs)

    def rung(self, value: float) -> RungView | None:
        """The rung at `value`."""
        return next((r for r in self.rungs if r.value == value), None)


class LadderView(Frozen):
    """One ladder of the plan."""

    argument: str
    floor_mib: float
    shape: str
    margin: str
    pins: list[PinLadderView]


def climb(
    ladder: Ladder,
    pin: str,
    cells: list[Cell],
    runs: Mapping[tuple[str, int], RunSummary],
    predictions: Mapping[float, float],
    written: str | None = None,
) -> PinLadderView:
    """The pin's rungs as the night's runs measured them (each rung cell runs once)."""
    rungs = []
    for value in ladder.rungs:
        predicted = predictions.get(value)
        measured: dict[str, MeasuredView] = {}
        for cell in cells:
            rung = cell.rung
            if cell.pin != pin or rung is None or rung.argument != ladder.argument:
                continue
            if rung.value != value or (run := runs.get((cell.id, 1))) is None:
                continue
            under = None
            if predicted is not None and run.margin_mib is not None:
                under = round(predicted - run.margin_mib, 1)
            result = run.checks[0].result_id if run.checks else None
            measured[cell.state] = MeasuredView(
                margin_mib=run.margin_mib, verdict=run.verdict, boot_id=run.boot_id,
                image_id=run.image_id, result_id=result, under_prediction_mib=under,
            )  # fmt: skip
        clears = all(
            (m := measured.get(state)) is not None
            and m.margin_mib is not None
            and m.verdict != "inconclusive"
            and m.margin_mib >= ladder.floor_mib
            for state in STATES
        )
        rungs.append(
            RungView(value=value, predicted_mib=predicted, measured=measured, clears=clears)
        )
    clearing = [r for r in rungs if r.clears]
    chosen = max(clearing, key=lambda r: r.value) if clearing else None
    return PinLadderView(
        pin=pin, rungs=rungs, chosen=chosen.value if chosen else None,
        why=_why(rungs, chosen, ladder.floor_mib), written=written,
    )  # fmt: skip


def _why(rungs: list[RungView], chosen: RungView | None, floor_mib: float) -> str:
    if chosen is None:
        return f"no rung clears {floor_mib:g} MiB cold and warm"
    margins = ", ".join(
        f"{chosen.measured[s].margin_mib:.1f} MiB {s}" for s in STATES if s in chosen.measured
    )
    higher = [r for r in rungs if r.value > chosen.value]
    beyond = f"; {higher[0].value:g} does not" if higher else ""
    return f"{chosen.value:g} clears {floor_mib:g} MiB ({margins}){beyond}"


def ladder_views(
    plan: Plan,
    cells: list[Cell],
    runs: Mapping[tuple[str, int], RunSummary],
    events: list[NightEvent],
) -> list[LadderView]:
    """Each ladder, pin by pin: predicted and measured margins per rung, and the choice."""
    written = {}  # `pin:argument` -> where the ladder wrote its value, from the journal
    for event in events:
        if event.event == WRITTEN and event.detail:
            detail = json.loads(event.detail)
            written[f"{detail['pin']}:{detail['argument']}"] = detail["file"]
    return [
        LadderView(
            argument=ladder.argument,
            floor_mib=ladder.floor_mib,
            shape=ladder.shape.what,
            margin=ladder.margin,
            pins=[
                climb(
                    ladder,
                    pin,
                    cells,
                    runs,
                    ladder.predictions.get(pin, {}),
                    written.get(f"{pin}:{ladder.argument}"),
                )
                for pin in plan.ladder_pins(ladder)
            ],
        )
        for ladder in plan.ladders
    ]


@dataclass(frozen=True)
class Registered:
    """A night's predictions, where they are archived, and the sha256 of that record."""

    predictions: tuple[Prediction, ...]
    url: str | None
    sha256: str | None


def register(journal: NightJournal, plan: Plan, store: BlobStore | None) -> Registered:
    """Register the plan's predictions for this night (once), then archive them (once)."""
    ledger = journal.ledger
    found = registered_predictions(ledger, journal.night.id)
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
        "format": PREDICTIONS_FORMAT,
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
