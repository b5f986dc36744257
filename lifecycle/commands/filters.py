"""The filters `caches`, `boots` and `results` share, on this host's ledger or on an archive:
a manifest name, a GPU arch, a state, an age."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from lifecycle.errors import LifecycleError


@dataclass(frozen=True)
class Filters:
    """What a listing keeps; nothing set keeps everything."""

    manifest: str | None = None
    arch: str | None = None
    state: str | None = None
    older_than: timedelta | None = None
    newer_than: timedelta | None = None

    def check_state(self, states: Sequence[str], listing: str) -> None:
        """A --state this listing cannot have is a usage error, not an empty table."""
        if self.state is not None and self.state not in states:
            raise LifecycleError(f"--state {self.state!r}: {listing} are {', '.join(states)}")

    def keeps(self, now: datetime, *, manifest: str, arch: str, state: str, at: str) -> bool:
        """Whether a row of this manifest, arch(es, comma-separated), state and time stays."""
        if self.manifest is not None and manifest != self.manifest:
            return False
        if self.arch is not None and self.arch not in {a.strip() for a in arch.split(",")}:
            return False
        if self.state is not None and state != self.state:
            return False
        age = now - datetime.fromisoformat(at)
        if self.older_than is not None and age < self.older_than:
            return False
        return self.newer_than is None or age <= self.newer_than


EVERYTHING = Filters()  # the default of every listing
