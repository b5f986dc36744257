"""What `caches`, `boots` and `results` share, on this host's ledger or on an archive: their
filters (a manifest name, a GPU arch, a state, an age), a boot's outcomes, a row's flags."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from lifecycle.commands import verbs
from lifecycle.durations import instant, parse_duration
from lifecycle.errors import LifecycleError
from lifecycle.ledger.listings import Narrowing

Item = TypeVar("Item")


@dataclass(frozen=True)
class Facts:
    """What the filters look at in a row."""

    manifest: str
    arch: str  # one, or several comma-separated
    state: str
    at: str  # ISO 8601: when it was made, started or archived


@dataclass(frozen=True)
class Filters:
    """What a listing keeps; nothing set keeps everything."""

    manifest: str | None = None
    arch: str | None = None
    state: str | None = None
    older_than: timedelta | None = None
    newer_than: timedelta | None = None

    @classmethod
    def of(cls, request: verbs.Filtered) -> Filters:
        """The filters a listing's command line asked for; a bad duration is a usage error."""

        def duration(text: str | None, flag: str) -> timedelta | None:
            return None if text is None else parse_duration(text, flag)

        older, newer = request.older_than, request.newer_than
        return cls(
            request.manifest, request.arch, request.state,
            duration(older, "--older-than"), duration(newer, "--newer-than"),
        )  # fmt: skip

    def check_state(self, states: Sequence[str], listing: str) -> None:
        """A --state this listing cannot have is a usage error, not an empty table."""
        if self.state is not None and self.state not in states:
            raise LifecycleError(f"--state {self.state!r}: {listing} are {', '.join(states)}")

    @property
    def narrows(self) -> bool:
        """Whether any filter is set: a listing of every row reads the other tables whole."""
        return self != Filters()

    def narrowing(
        self, now: datetime, recorded: Mapping[str, tuple[str, ...]] | None = None
    ) -> Narrowing:
        """These filters as the ledger asks them of its rows, before `keeps` judges each row it
        reads. `recorded`: the states a row shown in a state may be recorded in, where they
        are not that state alone (a cache whose dir is gone is shown missing)."""
        states = None if self.state is None else (recorded or {}).get(self.state, (self.state,))
        since = None if self.newer_than is None else now - self.newer_than
        until = None if self.older_than is None else now - self.older_than
        return Narrowing(self.manifest, self.arch, states, since, until)

    def keeps(self, now: datetime, *, manifest: str, arch: str, state: str, at: str) -> bool:
        """Whether a row of this manifest, arch(es, comma-separated), state and time stays."""
        if self.manifest is not None and manifest != self.manifest:
            return False
        if self.arch is not None and self.arch not in {a.strip() for a in arch.split(",")}:
            return False
        if self.state is not None and state != self.state:
            return False
        moment = instant(at)
        if moment is None:  # a record's time that is none (written by anyone): of no age
            return self.older_than is None and self.newer_than is None
        age = now - moment
        if self.older_than is not None and age < self.older_than:
            return False
        return self.newer_than is None or age <= self.newer_than

    def select(
        self, now: datetime, items: Iterable[Item], facts: Callable[[Item], Facts]
    ) -> list[Item]:
        """The items whose facts these filters keep, in their order."""
        return [item for item in items if self.keeps(now, **asdict(facts(item)))]


OUTCOMES = ("running", "ok", "failed", "interrupted", "aborted", "timeout")
METRICS_WIDTH = 40  # characters of `k=v, …` in the table; --json has them all


def age(now: datetime, at: str) -> float:
    """Seconds from `at` (ISO 8601) to `now`."""
    return (now - datetime.fromisoformat(at)).total_seconds()


def flags(instrumented: bool, pinned: bool) -> str:
    """INSTRUMENTED (a result of the engine plus an observing hook), pinned."""
    return " ".join(["INSTRUMENTED"] * instrumented + ["pinned"] * pinned)
