"""Forking worker processes safely: only a single-threaded process, children that never
return into the caller's stack, and every child killed and reaped on the way out.

Python threads cannot overlap CPU-bound work (the GIL); a forked child can, and shares the
parent's memory copy-on-write. `archive.transfer` forks uploaders.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def fork_is_safe() -> bool:
    """Fork only a process with one OS thread: a lock held by another thread stays held forever."""
    # threading.active_count() misses native threads started by C extensions; the kernel does not.
    if not hasattr(os, "fork"):
        return False
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("Threads:"):
            return line.split()[1] == "1"
    return False


def fork_when_safe(within: float) -> bool:
    """fork_is_safe, asked again for up to `within` seconds: a pool's threads, joined a moment
    ago, can still be leaving the kernel's thread list (measured: 2-6 ms)."""
    deadline = time.monotonic() + within
    while not fork_is_safe():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


def kill_and_reap(children: list[int]) -> None:
    """SIGKILL every child still listed and wait for it, so none is left running or a zombie."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    children.clear()


def spawn(check: Callable[[], bool], children: list[int]) -> None:
    """Fork a child that exits 0 if `check` passes, 1 otherwise; add its pid to `children`."""
    # Signals stay blocked from before the fork until the child is inside its try (and the pid is
    # recorded here): a KeyboardInterrupt in between would unwind the child through the caller's
    # stack, or leave a child nobody reaps.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    parent = os.getpid()
    try:
        pid = os.fork()
        if pid == 0:
            _die_with(parent)
            _child(check, mask)
        children.append(pid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this child the moment its parent dies, SIGKILL included.

    A SIGKILLed archive would otherwise leave its uploaders running for seconds, holding the
    descriptors it shared with them, the teardown lock among them.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(1)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _child(check: Callable[[], bool], mask: Iterable[int]) -> NoReturn:
    """Never return into the caller's stack: leave through os._exit, whatever `check` does."""
    # try/finally rather than except: KeyboardInterrupt and SystemExit end here too, and os._exit
    # runs no atexit handler and flushes none of the parent's stdio buffers a second time.
    status = 1
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if check():
            status = 0
    finally:
        os._exit(status)
