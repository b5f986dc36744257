"""LIFECYCLE_HOME: where this host's state lives, and the one place its layout is spelled out.

ledger.sqlite3, ledger.lock     the ledger (lifecycle.ledger) and its writers' lock
teardown.lock                   one teardown at a time on this host
gc.lock                         one `gc --remote` at a time on this host
caches/<cache id>/              a JIT boot cache, mounted into boots
caches/.trash-<cache id>/       a cache dir a teardown has moved out of the way
locks/cache-<cache id>.lock     the cache's lease (lifecycle.leases)
locks/port-<port key>.lock      held by a port (or its --continue, --abort) while it runs
locks/build-<build id>.lock     held by a build while its ledger row says `running`
locks/boot-<boot id>.lock       held by a boot while its ledger row says `running`
evidence/builds/                build logs
evidence/boots/<boot id>.log    a boot's redacted log; evidence/boots/<boot id>/ its bundle
evidence/scans/<cache id>/      the fingerprints kept of a cache, one per scan
evidence/results/               documents attached to results
evidence/manifests/<digest>.json, evidence/patches/<sha256>.patch,
evidence/images/<id>.json       what a boot ran, kept for the archive and audits
nights/<night id>/              a night's report (report.html, report.json)
night.lock                      one night at a time on this host
mirrors/, port/                 upstream mirrors and stopped ports (lifecycle.port)
port-aborted/<old>-to-<new>-<when>.patch   what an aborted port's worktree held beyond its stop
crashes/                        tracebacks of unexpected errors

The `.lock` files are made by the first run that takes them and stay: a lock is the kernel's
flock on the file, held only while its run lives (SIGKILL drops it), so a file there says
nothing about a run in progress (`leases.held` asks). Removing one a process may be opening
would split the lock in two (lifecycle.leases).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lifecycle.errors import DiskFull, EnvironmentFailure, LifecycleError, no_room, read_regular

# What a boot keeps as JSON (its spec, its evidence summary, a manifest's or image's snapshot)
# is KiBs: a file far larger was not written as one, and is not read whole to find that out.
MAX_RECORD_BYTES = 16 * 2**20


class HomeUnusable(EnvironmentFailure):
    """LIFECYCLE_HOME, or the ledger in it, cannot be used as it is (exit 3)."""


class NoLedger(LifecycleError):
    """Nothing was ever recorded in this home; a verb that only reads has nothing to read."""

    def __init__(self, home: Path) -> None:
        self.home = home
        super().__init__(f"no ledger at {home} yet")


class Home:
    """The layout of one LIFECYCLE_HOME (pictured above), rooted at `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ledger_file = root / "ledger.sqlite3"  # the ledger's SQLite file
        self.ledger_lock = root / "ledger.lock"  # every ledger writer takes it
        self.teardown_lock = root / "teardown.lock"  # held by a teardown while it runs
        self.gc_lock = root / "gc.lock"  # held by `gc --remote` while it runs
        self.night_lock = root / "night.lock"  # held by a night (or a ladder) while it runs
        self.crashes = root / "crashes"  # unexpected errors' tracebacks
        self.mirrors = root / "mirrors"  # upstream repositories mirrored for `port`
        self.ports = root / "port"  # the state of stopped ports
        self.aborted_ports = root / "port-aborted"  # the edits each `port --abort` kept

    def __str__(self) -> str:
        """The home's path: what a message that names the home shows."""
        return str(self.root)

    def cache_dir(self, cache_id: str) -> Path:
        """A cache's dir, made by the boot that creates the cache."""
        return self.root / "caches" / cache_id

    def night_dir(self, night_id: str) -> Path:
        """Where a night's report is written."""
        return self.root / "nights" / night_id

    def cache_lock(self, cache_id: str) -> Path:
        """The file a cache's lease locks."""
        return self.root / "locks" / f"cache-{cache_id}.lock"

    def boot_lock(self, boot_id: str) -> Path:
        """The file a boot locks from its intent to its outcome: its process lives."""
        return self.root / "locks" / f"boot-{boot_id}.lock"

    def build_lock(self, build_id: int) -> Path:
        """The file a build locks while the ledger says it is running."""
        return self.root / "locks" / f"build-{build_id}.lock"

    def bake_lock(self, attempt_id: int) -> Path:
        """The file a bake locks while the ledger holds its attempt."""
        return self.root / "locks" / f"bake-{attempt_id}.lock"

    def port_lock(self, key: str) -> Path:
        """The file a running port of the state dir `port/<key>` locks."""
        return self.root / "locks" / f"port-{key}.lock"

    def evidence(self, kind: str) -> Path:
        """`evidence/<kind>/`: builds, boots, scans/<cache id>, results, manifests, …"""
        return self.root / "evidence" / kind

    def boot_bundle(self, boot_id: str) -> Path:
        """A boot's evidence dir (its bundle, its hooks' output)."""
        return self.evidence("boots") / boot_id

    def manifest_snapshot(self, digest: str) -> Path:
        """The resolved manifest a boot ran: {"digest", "file", "canonical", "patches"}."""
        return self.evidence("manifests") / f"{digest}.json"

    def patch_copy(self, sha256: str) -> Path:
        """A patch's bytes, as a boot's manifest named them."""
        return self.evidence("patches") / f"{sha256}.patch"

    def provenance(self, image_id: str) -> Path:
        """A baked image's in-toto Statement (lifecycle.bake.provenance)."""
        return self.evidence("bakes") / f"{image_id.removeprefix('sha256:')}.intoto.json"

    def image_snapshot(self, image_id: str) -> Path:
        """The image a boot ran: {"id", "tags", "labels"}."""
        return self.evidence("images") / f"{image_id.removeprefix('sha256:')}.json"


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


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file whole or not at all: a temp file beside it, synced, renamed over it. A
    crash leaves the old file or the new one, never half of one; a full disk, neither temp
    file nor a traceback: DiskFull, naming the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if no_room(exc):
            raise DiskFull(path) from exc
        raise
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        Path(temp).replace(path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        if no_room(exc):
            raise DiskFull(path) from exc
        raise
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_named(path: Path, data: bytes) -> None:
    """write_atomic for a file the user named (`plan -o`, `audit --provenance`): where a
    symlink points, the link kept. A rename over the link would put a file in its place, and
    whatever the link was for (a shared dir, a CI artifact path) would keep the old one."""
    write_atomic(Path(os.path.realpath(path)), data)


def read_record(path: Path) -> Any:
    """The JSON of a record kept in the home, or None when there is none (nothing there, or no
    regular file). ValueError when it is larger than MAX_RECORD_BYTES or not JSON."""
    try:
        raw = read_regular(path, MAX_RECORD_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError as exc:
        raise ValueError(f"{exc}; not a record of ours") from None
    return None if raw is None else json.loads(raw)
