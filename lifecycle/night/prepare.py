"""A night made ready, and `night --dry-run`: everything checked before anything runs.

Manifests, boot profiles, the caches checks look into and each hook's declarations are checked
before the first boot or production going down: a problem is one line and exit 2. A dry run
lays the same preparation out and runs only a status hook that declares it only asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.boot.spec import pick_profile
from lifecycle.build.plan import image_tag
from lifecycle.errors import LifecycleError
from lifecycle.hooks import Hook, HookRunner, select
from lifecycle.ledger import Ledger
from lifecycle.manifest import LoadedManifest, find_manifest, load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.manifest.model import CACHE_FILE
from lifecycle.night.cells import Cell, cells
from lifecycle.night.engine import Pin
from lifecycle.night.journal import NightJournal
from lifecycle.night.plan import LoadedPlan, Plan
from lifecycle.night.production import ProductionHooks, production_hooks, status
from lifecycle.report import Report, fields_of
from lifecycle.table import lines_text

Resolve = Callable[[str, LoadedManifest, str], Pin]  # an engine's: the pin with its image


@dataclass(frozen=True)
class Prepared:
    """A plan made ready: its cells in order, its pins, each cell's hooks, production's."""

    cells: tuple[Cell, ...]
    pins: dict[str, Pin]
    hooks: dict[str, tuple[Hook, ...]]  # cell id -> the hooks its boots attach
    production: ProductionHooks | None


def prepare(plan: Plan, manifests_dir: Path, project: Path, resolve: Resolve | None) -> Prepared:
    """Check the plan against the manifests and hooks; `resolve` finds each pin's image (None:
    the image is named by its tag, not looked up, as in a dry run or before a night's journal
    says which pins boot again)."""
    ordered = cells(plan)
    pins = {}
    for ref in plan.pins:
        loaded = load_manifest(find_manifest(manifests_dir, ref))
        digest = manifest_digest(loaded)
        pins[ref] = resolve(ref, loaded, digest) if resolve else _unresolved(ref, loaded, digest)
    for cell in ordered:
        _check_cell(cell, pins[cell.pin].loaded)
    hooks = {cell.id: _hooks(project, cell) for cell in ordered}
    production = production_hooks(project, plan.production) if plan.production else None
    return Prepared(tuple(ordered), pins, hooks, production)


def _unresolved(ref: str, loaded: LoadedManifest, digest: str) -> Pin:
    tag = image_tag(loaded.manifest.name, loaded.manifest.engine.vllm, digest)
    image = {"id": "(not looked up)", "tags": [tag], "labels": {}}
    return Pin(ref, loaded, digest, image, tag)


def _check_cell(cell: Cell, loaded: LoadedManifest) -> None:
    manifest = loaded.manifest
    try:
        profile = pick_profile(manifest, cell.boot_profile)
    except LifecycleError as exc:
        raise LifecycleError(f"cell {cell.id}: {exc} ({loaded.file})") from None
    acceptance = manifest.profiles[profile].acceptance
    for check in cell.checks:
        if acceptance is not None and acceptance.name == check.name:
            raise LifecycleError(
                f"cell {cell.id}: check {check.name!r} has the name of the boot profile's own"
                " acceptance; a boot has one result of a name: rename the check"
            )
    caches = manifest.active_caches()
    for check in cell.checks:
        for evidence in (check.path, check.pass_when, check.fail_when):
            for wanted in evidence.files:
                spec = CACHE_FILE.fullmatch(wanted)
                if spec is not None and spec["cache"] not in caches:
                    raise LifecycleError(
                        f"cell {cell.id}: check {check.name} looks in cache {spec['cache']!r},"
                        f" which {loaded.file} does not mount (caches: {', '.join(caches)})"
                    )


def _hooks(project: Path, cell: Cell) -> tuple[Hook, ...]:
    hooks = tuple(select(project / "hooks", list(cell.hooks)))
    observing = [h.name for h in hooks if h.observing]
    if cell.instrumented and not observing:
        raise LifecycleError(
            f"cell {cell.id}: instrumented, but none of its hooks ({', '.join(cell.hooks)})"
            " declares `lifecycle: observing`; list the observer there"
        )
    if not cell.instrumented and observing:
        raise LifecycleError(
            f"cell {cell.id}: hook {observing[0]!r} observes the engine and would vote; attach"
            " it under the profile's `instrumented:`, where it is shown and never counted"
        )
    return hooks


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
        return lines_text(lines)  # what a production hook said, a plan's arguments


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
