"""How a tuned value is measured, and the conditions it was measured in.

A value a utilization ladder chose is valid only for what the ladder saw: a cold boot's compile
scratch shrinks the KV pool against a warm boot of the same build, a value that passed warm
has failed cold, and an observer attached to the engine changes what it measures. So a
validated value carries its `validity` (image and manifest, cache states, observers, predicted
against measured), and its `measure` says how to measure it again: the ladder, as data, which
`lifecycle tune VERSION --revalidate` runs on a ported release whose value is only carried.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from lifecycle.manifest.fields import Slug, Strict, Text, matching

CONDITION = re.compile(
    r"^\s*(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?P<op>>=|<=|==|!=|>|<)\s*"
    r"(?P<value>-?\d+(?:\.\d+)?)\s*$"
)
CACHE_FILE = re.compile(r"^(?P<cache>[a-z0-9][a-z0-9._-]*):(?P<glob>.+)$")
_METRIC = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")


def _pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    return value


def _condition(value: str) -> str:
    if not CONDITION.match(value):
        raise ValueError(f"{value!r}: expected `METRIC OP NUMBER`, e.g. 'vllm:x_bytes > 0'")
    return value


def _cache_file(value: str) -> str:
    match = CACHE_FILE.match(value)
    glob = PurePosixPath(match["glob"]) if match else None
    if glob is None or glob.is_absolute() or ".." in glob.parts:
        raise ValueError(f"{value!r}: expected CACHE:GLOB, the glob inside the cache's dir")
    return value


MetricName = Annotated[str, matching(_METRIC, "is not a metric name")]
CacheState = Literal["cold", "warm"]


class Evidence(Strict):
    """What can be observed of a boot: log lines, the engine's metrics, files in its caches."""

    log: list[Annotated[str, AfterValidator(_pattern)]] = Field(
        default_factory=list, description="Regular expressions, each matched against the log."
    )
    metrics: list[Annotated[str, AfterValidator(_condition)]] = Field(
        default_factory=list, description="`METRIC OP NUMBER`, the metric as the engine prints it."
    )
    files: list[Annotated[str, AfterValidator(_cache_file)]] = Field(
        default_factory=list, description="`CACHE:GLOB`: a file the boot left in a cache."
    )

    def items(self) -> list[tuple[str, str]]:
        """(kind, what) for each piece: ("log", pattern), ("metric", condition), ("file", …)."""
        return [
            *(("log", p) for p in self.log),
            *(("metric", c) for c in self.metrics),
            *(("file", f) for f in self.files),
        ]


class Shape(Strict):
    """A forced shape (one request carrying 64 prompts) and the evidence it was forced."""

    what: Text
    boot_profile: Slug | None = Field(default=None, description="Default: the manifest's.")
    args: list[str] = Field(default_factory=list, description="Added to the engine's arguments.")
    path: Evidence = Field(description="All observed: the shape was forced.")


class LadderMethod(Strict):
    """A ladder of one tuned value, each rung run cold and warm at a forced shape; the value
    is the highest rung whose margin clears the floor in both cache states."""

    rungs: Annotated[list[float], Field(min_length=1)]
    shape: Shape
    margin: MetricName = Field(description="The metric (MiB) the engine reports at the shape.")
    floor_mib: Annotated[float, Field(ge=0)]
    timeout_s: Annotated[float, Field(gt=0)] = 600.0


class Validity(Strict):
    """The conditions a validated value was measured in; it holds for them, not beyond."""

    measured_at: Text
    night: Text = Field(description="The night (or ladder) whose journal and records hold it.")
    image_id: Text
    manifest_digest: Text = Field(description="Of the manifest measured, before this was written.")
    cache_states: list[CacheState]
    observers: list[Text] = Field(description="Observing hooks attached: none, or it is no value.")
    floor_mib: float
    predicted_mib: float | None = None
    measured_mib: dict[CacheState, float]
    archive: Text | None = Field(default=None, description="Where the night's record is.")
