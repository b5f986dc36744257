"""`night --dry-run`: what a night would run, in which order, and what it would leave alone.

Nothing is booted, recorded or sent, and no hook that acts is run: the production hooks that
take production down and bring it up are named, not run. A production status hook, which
must declare that it only asks, is run, so the plan's picture of production is today's.
Against a ledger that holds this plan's unfinished night, the runs already done are counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.hooks import HookRunner
from lifecycle.ledger import Ledger
from lifecycle.night.journal import NightJournal
from lifecycle.night.plan import LoadedPlan
from lifecycle.night.prepare import prepare
from lifecycle.night.production import status
from lifecycle.report import Report, fields_of


@dataclass(frozen=True)
class PlannedCell:
    """A cell as the night would run it."""

    id: str
    runs: int
    done: int  # already done by the unfinished night this one would resume
    args: tuple[str, ...]
    hooks: tuple[str, ...]
    instrumented: bool
    image: str


@dataclass(frozen=True)
class PlannedHook:
    """A production hook, and whether a dry run ran it."""

    role: str  # down | up | status
    hook: str
    acts: bool
    ran: bool
    said: str | None = None


@dataclass(frozen=True)
class DryRun(Report):
    """The night a plan would make."""

    plan: str
    digest: str
    resumes: str | None  # the night it would resume
    cells: tuple[PlannedCell, ...]
    boots: int  # runs still to boot (warm-ups come on top when caches run out)
    production: tuple[PlannedHook, ...]
    predictions: int
    end: dict[str, bool]

    FORMAT: ClassVar[str] = "lifecycle-night-plan/1"

    def to_json(self) -> dict[str, Any]:
        return {"format": self.FORMAT, "plan": fields_of(self)}

    def text(self) -> str:
        """The dry run: cells in order, hooks that would and would not run."""
        resumes = f"; resumes night {self.resumes}" if self.resumes else ""
        lines = [
            f"night {self.plan} (sha256:{self.digest[:12]}): {self.boots} runs to boot{resumes}"
        ]
        for cell in self.cells:
            done = f", {cell.done} done" if cell.done else ""
            hooks = f" hooks {', '.join(cell.hooks)}" if cell.hooks else ""
            lines.append(f"  {cell.id}: {cell.runs} run(s){done}{hooks}  {' '.join(cell.args)}")
        for hook in self.production:
            if hook.ran:
                lines.append(
                    f"  production.{hook.role}: hooks/{hook.hook} (asks) said: {hook.said}"
                )
            else:
                lines.append(
                    f"  production.{hook.role}: hooks/{hook.hook} acts: not run in a dry run"
                )
        lines.append(f"  predictions: {self.predictions}; end: {self.end}")
        return "\n".join(lines) + "\n"


def dry_run(
    loaded: LoadedPlan,
    manifests_dir: Path,
    project: Path,
    ledger: Ledger | None,
    runner: HookRunner,
) -> DryRun:
    """The plan checked and laid out; only a status hook that asks is run."""
    plan = loaded.plan
    prepared = prepare(plan, manifests_dir, project, None)
    latest = NightJournal.latest(ledger, plan.name, lambda: "") if ledger else None
    resumes = latest if latest and latest.night.plan_digest == loaded.digest else None
    resumes = resumes if resumes and not resumes.finished else None
    done = resumes.runs() if resumes else {}
    cells = tuple(
        PlannedCell(
            id=cell.id,
            runs=cell.repeats,
            done=sum(1 for n in range(1, cell.repeats + 1) if (cell.id, n) in done),
            args=cell.args,
            hooks=cell.hooks,
            instrumented=cell.instrumented,
            image=prepared.pins[cell.pin].tag,
        )
        for cell in prepared.cells
    )
    hooks: list[PlannedHook] = []
    if prepared.production is not None:
        production = prepared.production
        hooks += [
            PlannedHook("down", production.down.name, production.down.acts, False),
            PlannedHook("up", production.up.name, production.up.acts, False),
        ]
        if production.status is not None:
            context = {"night_id": "(dry run)", "plan": plan.name, "host": "(dry run)"}
            said = status(production.status, context, runner, project)
            hooks.append(PlannedHook("status", production.status.name, False, True, said))
    predictions = sum(len(r) for ladder in plan.ladders for r in ladder.predictions.values())
    return DryRun(
        plan=plan.name,
        digest=loaded.digest,
        resumes=resumes.night.id if resumes else None,
        cells=cells,
        boots=sum(c.runs - c.done for c in cells),
        production=tuple(hooks),
        predictions=predictions,
        end={"archive": plan.end.archive, "teardown": plan.end.teardown},
    )
