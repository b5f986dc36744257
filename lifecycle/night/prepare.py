"""Everything a night needs, found and checked before anything runs or production goes down.

Each pin's manifest loads and is built; each cell's boot profile is in its manifest and each
cache a check looks into is one its boots mount; each hook is there, and declares what the
plan relies on: a matrix cell's own hooks do not observe (an observer there would vote), an
instrumented cell has at least one that does, and the production hooks are what they say.
Any of these is one line and exit 2, before the first boot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lifecycle.boot.spec import pick_profile
from lifecycle.build.plan import image_tag
from lifecycle.errors import LifecycleError
from lifecycle.hooks import Hook, select
from lifecycle.manifest import LoadedManifest, find_manifest, load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.manifest.model import CACHE_FILE
from lifecycle.night.cells import Cell, cells
from lifecycle.night.engine import Pin
from lifecycle.night.plan import Plan
from lifecycle.night.production import ProductionHooks, production_hooks

Resolve = Callable[[str, LoadedManifest, str], Pin]  # an engine's: the pin with its image


@dataclass(frozen=True)
class Prepared:
    """A plan made ready: its cells in order, its pins, each cell's hooks, production's."""

    cells: tuple[Cell, ...]
    pins: dict[str, Pin]
    hooks: dict[str, tuple[Hook, ...]]  # cell id -> the hooks its boots attach
    production: ProductionHooks | None


def prepare(plan: Plan, manifests_dir: Path, project: Path, resolve: Resolve | None) -> Prepared:
    """Check the plan against the manifests and hooks; `resolve` finds each pin's image (None
    in a dry run: the image is named by its tag, not looked up)."""
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
    image = {"id": "(not looked up in a dry run)", "tags": [tag], "labels": {}}
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
                spec = CACHE_FILE.match(wanted)
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
