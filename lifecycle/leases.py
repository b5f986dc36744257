"""Per-cache leases, so that a boot and a teardown never hold the same cache at once.

A boot holds a lease on each cache it mounts from the moment it picks the cache until its
end-of-boot scan is recorded; a teardown holds one from the verification of a cache until its
dir has been renamed out of place; a bake, from its check of a cache until its image is built;
a restore, while it rebuilds the cache's dir.
A lease is an exclusive `flock` on `$LIFECYCLE_HOME/locks/cache-<id>.lock`: the kernel
drops it when its holder ends, SIGKILL included, so a dead process never keeps a cache, and a
ledger row that says a boot holds a cache whose lease nobody holds tells that the boot died.
The lock files stay (a few bytes each): unlinking a lock file another process may be opening
would split the lock in two.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lifecycle.home import Home


class CacheLease:
    """A held lease; `release()` (or the process ending) gives it back."""

    def __init__(self, cache_id: str, fd: int) -> None:
        self.cache_id = cache_id
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the lease back; releasing twice is harmless."""
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> CacheLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (made if need be) for the block; waits for it."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def exclusive_or(path: Path, busy: Callable[[], Exception]) -> Iterator[None]:
    """Hold an exclusive flock on `path` (made if need be) for the block without waiting;
    `busy()` is raised when another process holds it (one teardown, one night per host)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy() from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def while_alive(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on a file of its own for the block, made for it and removed at
    its end: `held(path)` says the holder lives, and the kernel drops the lock with a killed
    holder, where the file stays to say it died."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(path):
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def held(path: Path) -> bool:
    """Whether a live process holds an exclusive flock on `path`; nothing is created."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def try_lease(home: Home, cache_id: str) -> CacheLease | None:
    """The cache's lease if nobody holds it now, else None; never waits."""
    path = home.cache_lock(cache_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_CLOEXEC: a hook or an acceptance command started meanwhile must not inherit the lock.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return CacheLease(cache_id, fd)


def lease_held(home: Home, cache_id: str) -> bool:
    """Whether some live process holds the cache's lease right now."""
    return held(home.cache_lock(cache_id))
