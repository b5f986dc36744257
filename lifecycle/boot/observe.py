"""What the engine did to its caches, as the kernel saw it: which files it opened, which it wrote.

A verdict must not wait for a log line only vLLM prints, so every dir of each mounted cache is
watched with inotify from just before the container starts until it has exited. inotify
watches inodes, so the engine's opens and writes through the bind mount reach a watch on the
host dir; a dir created during the boot is watched as it appears (and walked, for what was
made in it before the watch took). Why not fanotify: it needs CAP_SYS_ADMIN and a mark on a
whole mount or filesystem, which would also report every other process on the host's disk;
inotify needs no privilege and sees only the caches. Cost: one watch per dir (a 20,000-file
cache has a few hundred), added in ~10 µs each, and one event per open or write.

Not evidence: atime (relatime, noatime). Lock and temporary files of a JIT build
(`fingerprint.is_transient`) are left out, as they are of fingerprints.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lifecycle.fingerprint import is_transient

IN_CLOSE_WRITE = 0x008
IN_OPEN = 0x020
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
# IN_MODIFY is left out: every write() would be an event, and IN_CLOSE_WRITE tells the same.
_WATCHED = IN_OPEN | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE
_WRITES = IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE
_EVENT = struct.Struct("iIII")


class NotObserved(Exception):
    """inotify could not watch a cache (no inotify, too few watches allowed): the boot goes on,
    and its verdicts say they were not observed."""


@dataclass
class CacheAccess:
    """One cache's files as the engine touched them during the boot, relative to its root."""

    opened: set[str] = field(default_factory=set)  # files (not dirs) opened, to read or write
    written: set[str] = field(default_factory=set)  # created, written, moved or deleted
    # False: the kernel's event queue overflowed, or a new dir could not be watched; what is
    # here happened, but more may have
    complete: bool = True


def _libc() -> ctypes.CDLL:
    """The C library this interpreter is linked with, through ctypes (nothing to install,
    Linux only): no search for it (find_library runs ldconfig, ~8 ms a boot)."""
    lib = ctypes.CDLL(None, use_errno=True)
    if not hasattr(lib, "inotify_init1"):
        raise NotObserved("this C library has no inotify")
    return lib


def _inotify_init(lib: ctypes.CDLL) -> int:
    fd = int(lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
    if fd < 0:
        raise NotObserved(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
    return fd


class AccessWatch:
    """inotify on every dir of each cache; `start` before the container starts, `stop` once it
    exited, then `access` holds what each cache saw."""

    def __init__(self, roots: Mapping[str, Path]) -> None:
        self.roots = dict(roots)
        self.access = {name: CacheAccess() for name in roots}
        self._dirs: dict[int, tuple[str, str]] = {}  # wd -> (cache name, dir relative to root)
        self._lib = _libc()
        self._fd = -1
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch every dir there is now; read events in a thread until `stop`."""
        self._fd = _inotify_init(self._lib)
        try:
            for name, root in self.roots.items():
                self._watch_tree(name, root, "", created=False)
        except BaseException:
            os.close(self._fd)
            raise
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._read_loop, name="cache-watch", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, CacheAccess]:
        """Read what is left of the queue and close; the access of each cache."""
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._thread = None
        if self._fd >= 0:
            self._drain()
            # The kernel frees the watches on close and waits out a grace period to do it,
            # ~15 ms every other boot here: not on the boot's way to its outcome.
            closing = threading.Thread(target=os.close, args=(self._fd,), name="unwatch")
            closing.daemon = True
            closing.start()
            self._fd = -1
        return self.access

    def _watch_tree(self, name: str, root: Path, relative: str, *, created: bool) -> None:
        """Watch `relative` and every dir under it; when it was created during the boot, what
        is already in it was written by the engine before the watch could see it. Each dir's
        watch is added before it is listed, so a file is either listed or an event."""
        pending = [relative]
        while pending:
            rel = pending.pop()
            try:
                wd = self._add_watch(str(root / rel if rel else root))
                self._dirs[wd] = (name, rel)
                entries = list(os.scandir(root / rel if rel else root))
            except FileNotFoundError:
                continue  # removed again before we got to it
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(_join(rel, entry.name))
                elif created:
                    self._note(name, _join(rel, entry.name), IN_CREATE)

    def _add_watch(self, path: str) -> int:
        wd = int(self._lib.inotify_add_watch(self._fd, os.fsencode(path), _WATCHED))
        if wd < 0:
            code = ctypes.get_errno()
            if code == errno.ENOSPC:
                raise NotObserved("too few inotify watches allowed (fs.inotify.max_user_watches)")
            raise OSError(code, os.strerror(code), path)
        return wd

    def _watch_new(self, name: str, relative: str) -> None:
        """A dir made during the boot; one the kernel will not watch leaves the access
        incomplete rather than stopping the watch of every other dir."""
        try:
            self._watch_tree(name, self.roots[name], relative, created=True)
        except (NotObserved, OSError):
            self.access[name].complete = False

    def _read_loop(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._wake_r], [], [])
            if self._fd in ready:
                self._drain()
            if self._wake_r in ready:
                return

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return
            self._parse(data)

    def _parse(self, data: bytes) -> None:
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size
            raw = data[offset : offset + length].rstrip(b"\0")
            offset += length
            if mask & IN_Q_OVERFLOW:
                for access in self.access.values():
                    access.complete = False
                continue
            where = self._dirs.get(wd)
            if where is None or mask & IN_IGNORED or not raw:
                continue  # a watch removed, or an event on the watched dir itself (a listing)
            name, rel = where
            child = _join(rel, os.fsdecode(raw))
            if mask & IN_ISDIR:
                if mask & (IN_CREATE | IN_MOVED_TO):
                    self._watch_new(name, child)
                continue
            self._note(name, child, mask)

    def _note(self, name: str, path: str, mask: int) -> None:
        parent, _, base = path.rpartition("/")
        if is_transient(base, parent.rpartition("/")[2]):
            return
        access = self.access[name]
        if mask & IN_OPEN:
            access.opened.add(path)
        if mask & _WRITES:
            access.written.add(path)


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name
