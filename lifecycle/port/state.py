"""A stopped port's state, so `--continue` and `--abort` work like git's.

One port at a time per repository holding manifests/, like one rebase per repository:
`$LIFECYCLE_HOME/port/<sha256(repository root)[:16]>/` holds `state.json` and `worktree/`,
the scratch clone the conflict is resolved in. Nothing is written into the user's repository
until the port finishes, so `--abort` restores everything by removing this directory.

A port, a `--continue` and an `--abort` hold the state dir's lock (an flock, `running`) while
they run. The kernel drops it when its holder ends, SIGKILL included: a state dir whose lock
nobody holds is a port that stopped, or one that died, and only then may `--abort` remove it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lifecycle.errors import AnswerNo, LifecycleError
from lifecycle.home import Home
from lifecycle.leases import exclusive_or
from lifecycle.port.upstream import Release

STATE_VERSION = 1


@dataclass(frozen=True)
class PortState:
    """Everything `--continue` needs to pick up where the port stopped."""

    old_ref: str
    old_manifest: str
    new_ref: str
    release: str
    branch: str
    manifests_dir: str
    old_manifest_digest: str
    base_commit: str | None
    old_commits: list[str]
    picks: list[str]
    pre_dropped: dict[str, dict[str, str]] = field(default_factory=dict)
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)
    stop: dict[str, Any] | None = None
    allow_dirty: bool = False
    force: bool = False
    uncommitted: list[str] = field(default_factory=list)
    # The releases the replay was made on, as their tags named them when the port started: a
    # tag moved since (a respin, refetched by another port) must not change what was ported
    # onto. None in a state saved before they were kept: the tags are read again.
    old_release: dict[str, str] | None = None
    new_release: dict[str, str] | None = None
    # sha256 of the worktree's changes (`changes`) as the port left it at its stop: what differs
    # at `--abort` is a person's work. None in a state saved before it was kept.
    worktree_left: str | None = None
    version: int = STATE_VERSION

    @property
    def releases(self) -> tuple[Release, Release] | None:
        """The old and new releases the port started on, if the state has them."""
        if self.old_release is None or self.new_release is None:
            return None
        return Release(**self.old_release), Release(**self.new_release)


def state_dir(home: Home, repo_root: Path) -> Path:
    """Where the port state of the repository at `repo_root` lives."""
    key = hashlib.sha256(str(repo_root.resolve()).encode()).hexdigest()[:16]
    return home.ports / key


def in_progress(home: Home) -> list[Path]:
    """The state dirs of every port in progress (or left over by a killed one) under `home`."""
    ports = home.ports
    return sorted(d for d in ports.iterdir() if d.is_dir()) if ports.is_dir() else []


def describe(directory: Path) -> str:
    """`1.0 -> 2.0 of /path/to/manifests`, or what is known of a port that saved nothing."""
    if not (directory / "state.json").is_file():
        return f"an interrupted port ({directory})"
    try:
        saved = load(directory)
    except LifecycleError as exc:
        return str(exc)
    return f"{saved.old_ref} -> {saved.new_ref} of {saved.manifests_dir}"


def worktree(directory: Path) -> Path:
    """The scratch clone inside a state dir."""
    return directory / "worktree"


@contextlib.contextmanager
def running(home: Home, directory: Path, what: str, advice: str) -> Iterator[None]:
    """Hold the lock of the port in `directory` for the block, as `what` (`the port 1.0 -> 2.0`);
    without waiting: AnswerNo (exit 1) names the port that holds it, then `advice`."""
    lock = home.port_lock(directory.name)

    def busy() -> Exception:
        holder = lock.read_text().strip() if lock.is_file() else ""
        return AnswerNo(f"{holder or 'a port'} is running in {directory}: {advice}")

    with exclusive_or(lock, busy):
        lock.write_text(f"{what} (pid {os.getpid()})\n")  # for the refusals of others
        yield


def claim(directory: Path, describe: str) -> None:
    """Create the state dir (its lock held: `running`), refusing if one is there: a port that
    stopped, or the leftovers of one that died."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        directory.mkdir()
    except FileExistsError:
        current = load(directory) if (directory / "state.json").is_file() else None
        what = f"{current.old_ref} -> {current.new_ref}" if current else "an unfinished port"
        raise LifecycleError(
            f"{what} is in progress in {directory}: `lifecycle port --continue` after "
            f"resolving, or `lifecycle port --abort` (this run: {describe})"
        ) from None


def save(directory: Path, state: PortState) -> None:
    """Write state.json atomically."""
    temp = directory / "state.json.tmp"
    temp.write_text(json.dumps(asdict(state), indent=2, sort_keys=True) + "\n")
    temp.replace(directory / "state.json")


def load(directory: Path) -> PortState:
    """The saved state; a LifecycleError if there is none."""
    try:
        data = json.loads((directory / "state.json").read_text())
    except FileNotFoundError:
        raise LifecycleError(f"no port in progress (nothing in {directory})") from None
    if data.get("version") != STATE_VERSION:
        raise LifecycleError(
            f"{directory}: port state version {data.get('version')} is not "
            f"{STATE_VERSION}; `lifecycle port --abort` it"
        )
    return PortState(**data)


def remove(directory: Path) -> None:
    """Forget the port: the state, the scratch clone, and `port/` itself once empty."""
    shutil.rmtree(directory)
    with contextlib.suppress(OSError):
        directory.parent.rmdir()
