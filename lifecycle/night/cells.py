"""The cells of a night, in the order that keeps warm cells warm (docs/night.md, "Cells").

Pin by pin: cold cells, warm ones, then the ladders' rungs cold, then warm. Only cold runs make
caches and a warm cell takes the newest good one of its pin's image, so every warm run of a
pin comes after the cold ones; when none is left, a warm-up boot comes first.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace

from lifecycle.manifest.model import Evidence
from lifecycle.night.plan import Check, Created, Gpu, Ladder, Plan

WARM_UP = "warm-up"  # the workload of a pin's warm-up boots: cell `PIN:warm-up:cold`


@dataclass(frozen=True)
class Rung:
    """The rung of a ladder a cell runs at."""

    argument: str
    value: float
    margin_metric: str
    floor_mib: float


@dataclass(frozen=True)
class Cell:
    """One cell of the night: what to boot, how, and what to check."""

    pin: str
    workload: str  # the profile's name, or `argument=value` for a rung
    state: str  # cold | warm
    boot_profile: str | None
    instrumented: bool = False
    repeats: int = 1
    args: tuple[str, ...] = ()  # the workload's, then each check's created conditions'
    hooks: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    timeout_s: float = 600.0
    rung: Rung | None = None
    created: tuple[str, ...] = ()  # what the checks create, for the report
    gpu: Gpu | None = None  # what a run needs on a cluster; None: any one GPU

    @property
    def id(self) -> str:
        """`PIN:WORKLOAD:STATE[:instrumented]`, e.g. `demo/0.2:batch:warm:instrumented`."""
        suffix = ":instrumented" if self.instrumented else ""
        return f"{self.pin}:{self.workload}:{self.state}{suffix}"

    def args_of_run(self, run: int) -> tuple[str, ...]:
        """The arguments of run number `run` (`{run}` replaced)."""
        return tuple(arg.replace("{run}", str(run)) for arg in self.args)


def cells(plan: Plan) -> list[Cell]:
    """Every cell of the plan, in the order they run."""
    ordered: list[Cell] = []
    for pin in plan.pins:
        for state in ("cold", "warm"):  # cold before warm, whatever order the plan lists them in
            if state in plan.cache_states:
                ordered += _matrix(plan, pin, state)
        for state in ("cold", "warm"):  # a ladder's rungs run in both, whatever the matrix does
            for ladder in plan.ladders:
                if pin in plan.ladder_pins(ladder):
                    ordered += [
                        _rung(ladder, pin, state, value, plan.gpu.get(pin))
                        for value in ladder.rungs
                    ]
    return ordered


def matching(all_cells: list[Cell], patterns: list[str]) -> list[Cell]:
    """The cells whose id matches one of the patterns (shell-style: `demo/0.2:batch:*`)."""
    return [c for c in all_cells if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]


def _matrix(plan: Plan, pin: str, state: str) -> list[Cell]:
    found = []
    for name, profile in plan.profiles.items():
        created = [c for check in profile.checks for c in check.creates]
        plain = Cell(
            pin=pin,
            workload=name,
            state=state,
            boot_profile=profile.boot_profile,
            repeats=profile.repeats or plan.repeats,
            args=(*profile.args, *(arg for condition in created for arg in condition.args)),
            hooks=tuple(profile.hooks),
            checks=tuple(profile.checks),
            timeout_s=profile.timeout_s,
            created=tuple(c.what for c in created),
            gpu=profile.gpu or plan.gpu.get(pin),
        )
        found.append(plain)
        if profile.instrumented is not None:
            hooks = (*profile.hooks, *profile.instrumented.hooks)
            repeats = profile.instrumented.repeats
            found.append(replace(plain, instrumented=True, repeats=repeats, hooks=hooks))
    return found


def _rung(ladder: Ladder, pin: str, state: str, value: float, gpu: Gpu | None) -> Cell:
    shape = ladder.shape
    check = Check(
        name=f"ladder-{ladder.argument}",
        creates=[Created(what=shape.what, args=list(shape.args))],
        path=shape.path,
        pass_when=Evidence(metrics=[f"{ladder.margin} >= {ladder.floor_mib:g}"]),
    )
    rung = Rung(ladder.argument, value, ladder.margin, ladder.floor_mib)
    return Cell(
        pin=pin,
        workload=f"{ladder.argument}={value:g}",
        state=state,
        boot_profile=shape.boot_profile,
        args=tuple(shape.args),
        checks=(check,),
        timeout_s=ladder.timeout_s,
        rung=rung,
        created=(shape.what,),
        gpu=gpu,
    )


def warm_up(cell: Cell) -> Cell:
    """The boot that makes good caches for a warm cell's pin when none is left: the pin's
    profile with nothing to serve, cold, nothing checked, on the cell's kind of GPU."""
    return Cell(cell.pin, WARM_UP, "cold", None, gpu=cell.gpu)


def is_warm_up(cell_id: str) -> bool:
    """Whether a journalled cell id is a pin's warm-up."""
    return cell_id.endswith(f":{WARM_UP}:cold")
