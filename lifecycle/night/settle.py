"""A finished ladder's value, written into its manifest with the conditions it was measured in.

`tune` (and a night's ladders) write the highest rung that clears the floor cold and warm, as
`validated`, with `method`, `margin`, `measured_on`, `measure` (the ladder, to measure it
again) and `validity`. `tune --revalidate` asks another question of the same ladder: does the
value a port carried still clear on this release? Then the carried value becomes validated
as it is; if not, the highest value that clears is proposed, and nothing is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from lifecycle.manifest.model import TunedValue, Validity
from lifecycle.night.engine import Pin
from lifecycle.night.journal import NightJournal
from lifecycle.night.ladder import STATES, WRITTEN, PinLadderView
from lifecycle.night.plan import Ladder
from lifecycle.night.tuned_write import write_tuned

PROPOSED = "ladder:proposed"


@dataclass(frozen=True)
class Decision:
    """What a pin's ladder led to."""

    pin: str
    argument: str
    action: str  # written | proposed | none | pending
    value: float | None
    detail: str
    file: str | None = None


def settle(
    journal: NightJournal,
    ladder: Ladder,
    climbed: PinLadderView,
    pin: Pin,
    *,
    revalidate: bool,
    archive: str | None,
) -> Decision:
    """Write (or propose) the pin's value; once per pin and argument, however often it is asked."""
    name = ladder.argument
    if not climbed.complete:
        return Decision(pin.ref, name, "pending", None, "not every rung has run cold and warm")
    done = _journalled(journal, pin.ref, name)
    if done is not None:
        return done
    current = pin.loaded.manifest.tuned.get(name)
    target = climbed.chosen
    if revalidate and current is not None:
        carried = float(current.value) if isinstance(current.value, int | float) else None
        rung = climbed.rung(carried) if carried is not None else None
        if rung is None or not rung.clears:
            detail = (
                f"carried {current.value} does not clear {ladder.floor_mib:g} MiB cold and warm;"
                f" proposed {target:g}: {climbed.why}"
                if target is not None
                else f"carried {current.value} does not clear, and no rung does"
            )
            return _journal(journal, Decision(pin.ref, name, "proposed", target, detail))
        target = carried
    if target is None:
        return Decision(pin.ref, name, "none", None, climbed.why)
    value = validated(ladder, climbed, pin, target, journal, archive)
    write_tuned(pin.loaded.file, name, value)
    detail = f"{target:g} validated: {value.margin}"
    return _journal(
        journal, Decision(pin.ref, name, "written", target, detail, str(pin.loaded.file))
    )


def validated(
    ladder: Ladder,
    climbed: PinLadderView,
    pin: Pin,
    value: float,
    journal: NightJournal,
    archive: str | None,
) -> TunedValue:
    """The tuned value as the manifest records it: measured, and valid for what it saw."""
    rung = climbed.rung(value)
    assert rung is not None and rung.clears, "only a clearing rung is written"
    margins = {s: m.margin_mib for s in STATES if (m := rung.measured[s]).margin_mib is not None}
    engine = pin.loaded.manifest.engine
    rungs = ", ".join(f"{r:g}" for r in ladder.rungs)
    return TunedValue(
        value=value,
        status="validated",
        measured_on=(
            f"{engine.vllm_dist} {engine.vllm} + {engine.flashinfer_dist} {engine.flashinfer}"
            f" on {pin.tag}"
        ),
        method=(
            f"{ladder.argument} ladder ({rungs}) at the forced shape ({ladder.shape.what}), each"
            " rung cold and warm, no observing hook attached; the highest value whose margin"
            f" clears {ladder.floor_mib:g} MiB in both"
        ),
        margin=", ".join(f"{margins[s]:.1f} MiB {s}" for s in STATES)
        + f" at {ladder.shape.what} (floor {ladder.floor_mib:g} MiB)",
        measure=ladder.method(),
        validity=Validity(
            measured_at=journal.stamp(),
            night=journal.night.id,
            image_id=pin.image["id"],
            manifest_digest=pin.digest,
            cache_states=["cold", "warm"],
            observers=[],
            floor_mib=ladder.floor_mib,
            predicted_mib=rung.predicted_mib,
            measured_mib={"cold": margins["cold"], "warm": margins["warm"]},
            archive=archive,
        ),
    )


def _journalled(journal: NightJournal, pin: str, argument: str) -> Decision | None:
    for event in journal.events():
        if event.event in (WRITTEN, PROPOSED) and event.detail:
            detail = json.loads(event.detail)
            if (detail["pin"], detail["argument"]) == (pin, argument):
                return Decision(**detail)
    return None


def _journal(journal: NightJournal, decision: Decision) -> Decision:
    event = WRITTEN if decision.action == "written" else PROPOSED
    journal.event(event, json.dumps(decision.__dict__))
    return decision
