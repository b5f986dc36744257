"""A night plan and a `tune` ladder file, validated, and the plans `tune` makes of them.

Validated like a manifest: strict models, every problem located (`file:line:col: key:
message`), exit 2. What needs the manifests or the hooks (a profile, a cache, a hook's
declarations) is checked when the night starts (lifecycle.night.prepare). A ladder file, or a
release's carried values (`tune --revalidate`), runs as a night of rungs (kind `tune`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from lifecycle.errors import LifecycleError
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.checks import check_args, check_ladder
from lifecycle.manifest.load import Finding, load_validated
from lifecycle.manifest.model import CacheState, Evidence, LadderMethod, Slug, Text, version_text
from lifecycle.manifest.source import KeyPath

_ARGUMENT = re.compile(r"[a-z][a-z0-9_]*")


def _argument(value: str) -> str:
    if not _ARGUMENT.fullmatch(value):
        raise ValueError(f"{value!r} must be an engine argument in snake_case")
    return value


PinRef = Annotated[str, BeforeValidator(version_text), Field(min_length=1)]
Argument = Annotated[str, AfterValidator(_argument)]
Positive = Annotated[int, Field(ge=1)]
# Each run is a boot of minutes; a night runs every cell's repeats, so past this it would not
# end by morning (and a dry run would enumerate them for as long).
MAX_REPEATS = 100
Repeats = Annotated[int, Field(ge=1, le=MAX_REPEATS)]


class Frozen(BaseModel):
    """A model that never changes once made: what a night records and reports."""

    model_config = ConfigDict(frozen=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Created(_Strict):
    """A condition a check creates so its path runs: a forced shape, a shrunk pool."""

    what: Text
    args: list[str] = Field(default_factory=list, description="Added to the engine's arguments.")


def _gpu_shorthand(value: object) -> object:
    """`gpu: H200` is `gpu: {type: H200}`: one GPU of that type."""
    return {"type": value} if isinstance(value, str) else value


class Gpu(_Strict):
    """The accelerator a run needs (lifecycle.night.cluster): on a Ray cluster, `count` GPUs
    and `count` of the custom resource named `type` its GPU nodes declare at `ray start`."""

    type: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]
    count: Positive = 1

    def __str__(self) -> str:
        return self.type if self.count == 1 else f"{self.count}x {self.type}"


GpuNeed = Annotated[Gpu, BeforeValidator(_gpu_shorthand)]


class Check(_Strict):
    """One verdict a cell's boot gets, and what must be seen for it to mean anything."""

    name: Slug
    creates: list[Created] = Field(default_factory=list)
    path: Evidence = Field(description="All observed: the path under test ran.")
    pass_when: Evidence = Field(description="All observed (and the boot ended ok): pass.")
    fail_when: Evidence = Field(default_factory=Evidence, description="Any observed: fail.")


class Instrumented(_Strict):
    """The same cell again with observing hooks attached: shown, never counted."""

    hooks: Annotated[list[Text], Field(min_length=1)]
    repeats: Repeats = 1


class NightProfile(_Strict):
    """A workload of the matrix: a boot profile, its arguments, its checks."""

    boot_profile: Slug | None = Field(default=None, description="Default: the manifest's.")
    args: list[str] = Field(default_factory=list, description="{run}: the run's number.")
    hooks: list[Text] = Field(default_factory=list, description="Hooks that do not observe.")
    repeats: Repeats | None = None
    instrumented: Instrumented | None = None
    timeout_s: Annotated[float, Field(gt=0)] = 600.0
    gpu: GpuNeed | None = Field(default=None, description="Default: the pin's (plan `gpu:`).")
    checks: Annotated[list[Check], Field(min_length=1)]


class Ladder(LadderMethod):
    """A ladder of one tuned engine argument, climbed on some of the night's pins, with the
    margins predicted for its rungs before any of them runs."""

    argument: Argument
    pins: list[PinRef] | None = Field(default=None, description="Default: every pin.")
    predictions: dict[PinRef, dict[float, float]] = Field(
        default_factory=dict, description="pin -> rung -> the margin (MiB) expected."
    )

    def method(self) -> LadderMethod:
        """The ladder as a tuned value records how it was measured."""
        return LadderMethod.model_validate(
            {name: getattr(self, name) for name in LadderMethod.model_fields}
        )


class Production(_Strict):
    """The hooks that take production down for the night and bring it back."""

    down: Text
    up: Text
    status: Text | None = Field(default=None, description="A hook that only asks.")


class End(_Strict):
    """What the night does once every cell ran."""

    archive: bool = True
    teardown: bool = True


class Plan(_Strict):
    """One acceptance night."""

    schema_version: Literal[1]
    name: Slug
    pins: Annotated[list[PinRef], Field(min_length=1)]
    cache_states: Annotated[list[CacheState], Field(min_length=1)] = ["cold", "warm"]
    repeats: Repeats = 1
    production: Production | None = None
    profiles: dict[Slug, NightProfile] = Field(default_factory=dict)
    ladders: list[Ladder] = Field(default_factory=list)
    end: End = Field(default_factory=End)
    engine: Literal["local", "ray"] = Field(
        default="local", description="Where the cells run; `night --engine` overrides it."
    )
    gpu: dict[PinRef, GpuNeed] = Field(
        default_factory=dict, description="pin -> the accelerator its runs need on a cluster."
    )

    def ladder_pins(self, ladder: Ladder) -> list[str]:
        """The pins a ladder climbs."""
        return list(ladder.pins) if ladder.pins is not None else list(self.pins)


@dataclass(frozen=True)
class LoadedPlan:
    """A valid plan and where it came from."""

    file: Path
    plan: Plan

    def canonical(self) -> str:
        """The plan as JSON, keys sorted: what the digest is taken over and the ledger keeps.
        Not `engine` (where the cells run, not what they measure), nor a `gpu` not given: a plan
        written before either existed keeps its digest, so its unfinished night resumes."""
        document = self.plan.model_dump(mode="json", exclude={"engine"})
        if not document["gpu"]:
            del document["gpu"]
        for profile in document["profiles"].values():
            if profile["gpu"] is None:
                del profile["gpu"]
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """sha256 of the plan's canonical JSON."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()


def load_plan(file: Path) -> LoadedPlan:
    """Read and validate a plan; ManifestError (exit 2) with every problem located."""
    return LoadedPlan(file, load_validated(file, Plan, cross_checks))


def cross_checks(plan: Plan) -> Iterator[Finding]:
    """What a field's type cannot say: duplicates, references between keys, empty checks."""
    yield from listed_twice(("pins",), plan.pins)
    yield from listed_twice(("cache_states",), plan.cache_states)
    if not plan.profiles and not plan.ladders:
        yield (), "a plan needs profiles (the matrix) or ladders, or both"
    if plan.end.teardown and not plan.end.archive:
        yield ("end", "teardown"), "teardown removes only what is archived: set archive: true"
    for name, profile in plan.profiles.items():
        yield from listed_twice(("profiles", name, "checks"), [c.name for c in profile.checks])
        yield from check_args(("profiles", name, "args"), profile.args)
        for index, check in enumerate(profile.checks):
            where: KeyPath = ("profiles", name, "checks", index)
            for made, created in enumerate(check.creates):
                yield from check_args((*where, "creates", made, "args"), created.args)
            if not check.path.items():
                yield (*where, "path"), "say what must be observed for this check's path to run"
            if not check.pass_when.items():
                yield (*where, "pass_when"), "say what must be observed for a pass"
    for pin in plan.gpu:
        if pin not in plan.pins:
            yield ("gpu", pin), f"{pin!r} is not one of the plan's pins"
    for index, ladder in enumerate(plan.ladders):
        where = ("ladders", index)
        yield from listed_twice((*where, "rungs"), ladder.rungs)
        yield from check_ladder(where, ladder.argument, ladder)
        for pin in ladder.pins or ():
            if pin not in plan.pins:
                yield (*where, "pins"), f"{pin!r} is not one of the plan's pins"
        if not ladder.shape.path.items():
            yield (*where, "shape", "path"), "say what shows the shape was forced"
        for pin, rungs in ladder.predictions.items():
            if pin not in plan.ladder_pins(ladder):
                yield (*where, "predictions", pin), f"{pin!r} is not a pin of this ladder"
            for rung in rungs:
                if rung not in ladder.rungs:
                    message = f"{rung!r} is not one of the rungs {ladder.rungs}"
                    yield (*where, "predictions", pin, str(rung)), message


def listed_twice(where: KeyPath, values: Sequence[object]) -> Iterator[Finding]:
    """A finding for each value listed again after its first time."""
    seen: set[object] = set()
    for index, value in enumerate(values):
        if value in seen:
            yield (*where, index), f"{value!r} is listed twice"
        seen.add(value)


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
    yield from check_ladder((), ladder.argument, ladder)
    if not ladder.shape.path.items():
        yield ("shape", "path"), "say what shows the shape was forced"
    for rung in ladder.predictions:
        if rung not in ladder.rungs:
            yield ("predictions", str(rung)), f"{rung!r} is not one of the rungs {ladder.rungs}"


def _slug(version: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", version.lower()).strip("-") or "release"
