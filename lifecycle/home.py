"""LIFECYCLE_HOME: where this host's state lives (the ledger, kept evidence, caches, locks)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lifecycle.errors import EnvironmentFailure, LifecycleError


class HomeUnusable(EnvironmentFailure):
    """LIFECYCLE_HOME, or the ledger in it, cannot be used as it is (exit 3)."""


class NoLedger(LifecycleError):
    """Nothing was ever recorded in this home; a verb that only reads has nothing to read."""

    def __init__(self, home: Path) -> None:
        self.home = home
        super().__init__(f"no ledger at {home} yet")


def default_home(environ: Mapping[str, str]) -> Path:
    """LIFECYCLE_HOME, else $XDG_STATE_HOME/lifecycle, else ~/.local/state/lifecycle."""
    if environ.get("LIFECYCLE_HOME"):
        return Path(environ["LIFECYCLE_HOME"])
    state = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME", "~")) / ".local/state")
    return Path(state).expanduser() / "lifecycle"


def check_home(home: Path, *, create: bool) -> None:
    """A home that is a directory, made if `create`; NoLedger when it does not exist and must
    not be made."""
    if os.path.lexists(home) and not home.is_dir():
        raise HomeUnusable(f"LIFECYCLE_HOME {home} is not a directory")
    if not home.exists():
        if not create:
            raise NoLedger(home)
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HomeUnusable(f"cannot make LIFECYCLE_HOME {home}: {exc.strerror}") from None


def check_writable(home: Path) -> None:
    """The ledger's lock, its journal and every record are written here."""
    if not os.access(home, os.W_OK | os.X_OK):
        raise HomeUnusable(f"LIFECYCLE_HOME {home} is not writable (read-only?)")
