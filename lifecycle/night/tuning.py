"""`lifecycle tune`: a ladder on one release, as a night of rungs.

    schema_version: 1                       # a ladder file: `lifecycle tune VERSION FILE`
    argument: gpu_memory_utilization
    rungs: [0.90, 0.91, 0.92]
    shape: {what: one request carrying 64 prompts, args: [--forced-prompts, "64"], path: …}
    margin: "demo:forced_step_margin_mib"   # the engine's metric at the shape, MiB
    floor_mib: 40
    predictions: {0.90: 1660, 0.91: 840, 0.92: 20}   # registered before any rung runs
    production: {down: …, up: …}            # optional, as in a night plan
    end: {archive: true, teardown: true}

The ladder runs as a night (kind `tune`) whose one pin is VERSION: journalled, resumable, its
production guarded, its predictions registered first. `--revalidate` needs no file: each value
VERSION's manifest carries (a port wrote it) with a recorded `measure` is measured again by it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field

from lifecycle.errors import LifecycleError
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.model import LadderMethod
from lifecycle.night.plan import (
    Argument,
    End,
    Finding,
    Ladder,
    LoadedPlan,
    Plan,
    Production,
    listed_twice,
    load_validated,
)


class LadderFile(LadderMethod):
    """A ladder file: one ladder, on the release `tune` names."""

    schema_version: Literal[1]
    argument: Argument
    predictions: dict[float, float] = Field(
        default_factory=dict, description="rung -> the margin (MiB) expected."
    )
    production: Production | None = None
    end: End = Field(default_factory=End)


def ladder_plan(file: Path, version: str) -> LoadedPlan:
    """The night of one ladder file on `version`; problems located in the file (exit 2)."""
    ladder = load_validated(file, LadderFile, _ladder_checks)
    method = {name: getattr(ladder, name) for name in LadderMethod.model_fields}
    predictions = {version: dict(ladder.predictions)} if ladder.predictions else {}
    plan = Plan(
        schema_version=1,
        name=f"tune-{_slug(version)}-{ladder.argument}",
        pins=[version],
        ladders=[Ladder(**method, argument=ladder.argument, predictions=predictions)],
        production=ladder.production,
        end=ladder.end,
    )
    return LoadedPlan(file, plan)


def revalidation_plan(version: str, loaded: LoadedManifest) -> LoadedPlan:
    """A night measuring again every value `version` carries, each by its recorded ladder,
    with the carried value among the rungs and its old margin as the prediction."""
    ladders = []
    for name, tuned in loaded.manifest.tuned.items():
        if tuned.status != "carried":
            continue
        if tuned.measure is None or not isinstance(tuned.value, int | float):
            raise LifecycleError(
                f"{loaded.file}: tuned.{name} is carried with no recorded `measure` to measure it"
                f" by; run `lifecycle tune {version} LADDER.yaml` with a ladder for it"
            )
        value = float(tuned.value)
        method = tuned.measure
        predicted = {}
        if tuned.validity is not None and tuned.validity.measured_mib:
            predicted = {value: min(tuned.validity.measured_mib.values())}
        ladders.append(
            Ladder(
                argument=name,
                rungs=sorted({*method.rungs, value}),
                shape=method.shape,
                margin=method.margin,
                floor_mib=method.floor_mib,
                timeout_s=method.timeout_s,
                predictions={version: predicted} if predicted else {},
            )
        )
    if not ladders:
        raise LifecycleError(f"{loaded.file}: no tuned value is carried; nothing to revalidate")
    plan = Plan(
        schema_version=1, name=f"revalidate-{_slug(version)}", pins=[version], ladders=ladders
    )
    return LoadedPlan(loaded.file, plan)


def _ladder_checks(ladder: LadderFile) -> Iterator[Finding]:
    yield from listed_twice(("rungs",), ladder.rungs)
    if not ladder.shape.path.items():
        yield ("shape", "path"), "say what shows the shape was forced"
    for rung in ladder.predictions:
        if rung not in ladder.rungs:
            yield ("predictions", str(rung)), f"{rung!r} is not one of the rungs {ladder.rungs}"


def _slug(version: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", version.lower()).strip("-") or "release"
