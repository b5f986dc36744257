"""LIFECYCLE_HOME: where this host's state lives (the ledger, kept evidence, caches, locks)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def default_home(environ: Mapping[str, str]) -> Path:
    """LIFECYCLE_HOME, else $XDG_STATE_HOME/lifecycle, else ~/.local/state/lifecycle."""
    if environ.get("LIFECYCLE_HOME"):
        return Path(environ["LIFECYCLE_HOME"])
    state = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME", "~")) / ".local/state")
    return Path(state).expanduser() / "lifecycle"
