"""A ladder's outcome: each rung's margin cold and warm, against its prediction, and the value.

The value chosen is the highest rung whose measured margin clears the floor in both cache
states. A rung whose margin was not measured in a state (its shape was not forced, the engine
never got there) does not clear: a value is valid only for conditions it was measured in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lifecycle.night.cells import Cell
from lifecycle.night.engine import RunSummary
from lifecycle.night.plan import Ladder

STATES = ("cold", "warm")


@dataclass(frozen=True)
class Measured:
    """One rung in one cache state, as its run found it."""

    margin_mib: float | None  # None: not measured (the shape's path never ran)
    verdict: str  # the rung's check: pass (clears the floor), fail, inconclusive
    boot_id: str | None
    result_id: str | None


@dataclass(frozen=True)
class RungOutcome:
    """A rung of one pin: predicted, and measured cold and warm."""

    value: float
    predicted_mib: float | None
    measured: dict[str, Measured]  # by cache state; a state that has not run yet is absent

    def clears(self, floor_mib: float) -> bool:
        """Measured in both states, and at or above the floor in each."""
        return all(
            (m := self.measured.get(state)) is not None
            and m.margin_mib is not None
            and m.verdict != "inconclusive"
            and m.margin_mib >= floor_mib
            for state in STATES
        )


@dataclass(frozen=True)
class PinLadder:
    """One pin's climb of one ladder."""

    pin: str
    argument: str
    floor_mib: float
    rungs: tuple[RungOutcome, ...]
    chosen: float | None  # the highest rung clearing the floor cold and warm

    @property
    def complete(self) -> bool:
        """Every rung measured in both states."""
        return all(len(r.measured) == len(STATES) for r in self.rungs)

    def rung(self, value: float) -> RungOutcome | None:
        """The rung at `value`."""
        return next((r for r in self.rungs if r.value == value), None)

    def why(self) -> str:
        """The choice in one line, with the margins it rests on."""
        if self.chosen is None:
            return f"no rung clears {self.floor_mib:g} MiB cold and warm"
        chosen = self.rung(self.chosen)
        assert chosen is not None
        margins = ", ".join(
            f"{chosen.measured[s].margin_mib:.1f} MiB {s}" for s in STATES if s in chosen.measured
        )
        higher = [r for r in self.rungs if r.value > self.chosen]
        beyond = f"; {higher[0].value:g} does not" if higher else ""
        return f"{self.chosen:g} clears {self.floor_mib:g} MiB ({margins}){beyond}"


def climb(
    ladder: Ladder,
    pin: str,
    cells: list[Cell],
    runs: Mapping[tuple[str, int], RunSummary],
    predictions: Mapping[float, float],
) -> PinLadder:
    """The pin's rungs as the night's runs measured them (each rung cell runs once)."""
    outcomes = []
    for value in ladder.rungs:
        measured: dict[str, Measured] = {}
        for cell in cells:
            rung = cell.rung
            if cell.pin != pin or rung is None or rung.argument != ladder.argument:
                continue
            if rung.value != value or (run := runs.get((cell.id, 1))) is None:
                continue
            result = run.checks[0].result_id if run.checks else None
            measured[cell.state] = Measured(run.margin_mib, run.verdict, run.boot_id, result)
        outcomes.append(RungOutcome(value, predictions.get(value), measured))
    clearing = [r.value for r in outcomes if r.clears(ladder.floor_mib)]
    chosen = max(clearing) if clearing else None
    return PinLadder(pin, ladder.argument, ladder.floor_mib, tuple(outcomes), chosen)
