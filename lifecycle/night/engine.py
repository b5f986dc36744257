"""Where a night's cells run: the small interface between the night and an engine.

The night decides what runs and in which order and keeps the journal; an engine starts the runs
it has room for, reports each one's RunSummary as it ends (or that its attempt was lost), then
archives and tears down what its boots left. This host's Docker engine is one, with room for
one run at a time (lifecycle.night.local); a Ray cluster of GPU hosts is the other, with room
for as many as its GPUs (lifecycle.night.cluster).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import Field

from lifecycle.hooks import Hook
from lifecycle.manifest import LoadedManifest
from lifecycle.night.cells import Cell
from lifecycle.night.checks import CheckVerdict
from lifecycle.night.plan import Frozen, Gpu


@dataclass(frozen=True)
class Pin:
    """A pin of the night, resolved: its manifest, digest and the image built from it."""

    ref: str
    loaded: LoadedManifest
    digest: str
    image: dict[str, Any]  # {"id", "tags", "labels"} as the engine found it
    tag: str


@dataclass(frozen=True)
class RunOrder:
    """Run `cell` once, as run number `run` (1 … its repeats)."""

    night_id: str
    cell: Cell
    run: int
    attempt: int
    pin: Pin
    hooks: tuple[Hook, ...]


class CheckOutcome(Frozen):
    """A check's verdict on one run, and the result it was recorded as."""

    verdict: CheckVerdict
    result_id: str | None  # None: the boot never happened, so nothing to record it against


class RunSummary(Frozen):
    """What one run of a cell did, as the journal keeps it and the report shows it."""

    cell: str
    run: int
    attempt: int
    boot_id: str | None
    host: str | None
    outcome: str  # the boot's: ok | failed | interrupted | aborted
    image_id: str | None = None  # the image the boot ran, as its record has it (None: no boot)
    exit_code: int | None
    error: str | None = None
    instrumented: bool
    hooks: list[str]
    args: list[str]
    cache_modes: dict[str, str] = Field(default_factory=dict)  # cache name -> cold | warm
    verdict: str  # pass | fail | inconclusive: its worst check
    checks: list[CheckOutcome]
    metrics: dict[str, float] = Field(default_factory=dict)  # what the engine reported
    margin_mib: float | None = None  # a rung's measured margin
    log: str | None = None  # where the boot's log is (a path on its host)
    evidence: str | None = None  # its evidence bundle
    started_at: str | None = None
    ended_at: str | None = None
    node: str | None = None  # on a cluster: the node that ran it
    cache_from: str | None = None  # on a cluster: local | restored | cold (where its caches were)
    scheduling_s: float | None = None  # on a cluster: the run's wall less its task's own wall


@dataclass(frozen=True)
class LostRun:
    """An attempt at a run that ended with no summary: its node died, or cannot run cells.
    Journalled with its node, never counted; the run goes to another node."""

    order: RunOrder
    node: str
    error: str


class EndSummary(Frozen):
    """What an end action (archive, teardown) did with the night's boots."""

    action: str  # archive | teardown
    ok: bool
    detail: str
    location: str | None = None
    caches: int = 0
    bytes: int = 0


class Engine(Protocol):
    """An engine a night runs its cells on."""

    @property
    def where(self) -> str:
        """Which engine, in words (for the report)."""
        ...

    def resolve(self, ref: str, loaded: LoadedManifest, digest: str) -> Pin:
        """The pin with its built image; LifecycleError (before anything runs) if not built."""
        ...

    def warm_ready(self, pin: Pin, gpu: Gpu | None) -> bool:
        """Whether a warm boot of the pin (on that kind of GPU) would find a good cache for
        every cache it mounts."""
        ...

    def start(self, order: RunOrder) -> bool:
        """Start the run (boot the cell once, judge its checks, record its results where the
        boot is) if there is room for it now; False: not now."""
        ...

    def finished(self) -> list[RunSummary | LostRun]:
        """Wait until a started run ends; every run that ended since the last call."""
        ...

    def recorded(self, orders: Sequence[RunOrder]) -> list[RunSummary]:
        """The summaries of those runs (journalled started, never done) whose boot recorded
        their results where it ran, though no summary of them reached the night (its driver
        was killed first): each judged from its boot, its recorded results reused, and on a
        cluster archived as its task would have (lifecycle.night.adopt)."""
        ...

    def archive(self, boots: Mapping[str, str | None]) -> EndSummary:
        """Archive the caches those boots used and the results standing on them (`boots`:
        boot id -> the node that ran it, as the journal has it; None: this host)."""
        ...

    def teardown(self, boots: Mapping[str, str | None]) -> EndSummary:
        """Remove the caches those boots used, once their evidence is archived."""
        ...


def worst(statuses: Sequence[str]) -> str:
    """fail if any failed, else inconclusive if any was, else pass (nothing: inconclusive)."""
    if "fail" in statuses:
        return "fail"
    if "inconclusive" in statuses or not statuses:
        return "inconclusive"
    return "pass"
