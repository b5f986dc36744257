"""A restore's partial: the tree (or, with --file, the file) it fills beside its place before
renaming (linking) it in, named after the process writing it, so that what a killed restore
left is told from what a live one is writing.

`.<place>.restore-<pid>@<host>+<random>`, in the place's own dir. A restore into a cache's dir
holds the cache's lease, so any partial beside that dir is a dead one's; `--into DIR` and
`--output FILE` name a place of the user's, which no lease covers: there a partial goes only
when it was made on this host by a process that no longer exists. A pid used again since
keeps a dead partial until that process ends too, which errs on the side of the live; another
host's (a dir shared over the network) is never judged from here.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from contextlib import suppress
from pathlib import Path


def partial_prefix(place: Path) -> str:
    """The start of the name of a partial this process makes beside `place` (a random tail
    follows, so a pid used again never meets a dead one's partial of the same name)."""
    return f".{place.name}.restore-{os.getpid()}@{_host()}+"


def remove_dead_partials(place: Path) -> None:
    """Remove the partials beside `place` that a restore on this host left when it died; those
    of a live restore, of another host, or of no known form are left as they are."""
    writer = re.compile(rf"\.{re.escape(place.name)}\.restore-(\d+)@([^+]*)\+[^+]+")
    for partial in place.parent.glob(f".{place.name}.restore-*"):
        made = writer.fullmatch(partial.name)
        if made and made[2] == _host() and not _alive(int(made[1])):
            # One that cannot be removed is no reason to fail this restore: its own writes
            # beside it say so if the dir cannot be written.
            with suppress(OSError):
                remove_partial(partial)


def remove_partial(partial: Path) -> None:
    """Remove a partial restore, read-only dirs included, and never through a link: a
    leftover name may be a link anyone who can write its dir made, and chmod follows links."""
    if partial.is_symlink() or not partial.is_dir():
        partial.unlink(missing_ok=True)  # the link itself; what it points at is not ours
        return
    # By file descriptor, following no link (not even one swapped in since the check above):
    # only the dirs under `partial` itself are made writable, to be emptied.
    for _, _, _, fd in os.fwalk(partial, follow_symlinks=False):
        os.fchmod(fd, 0o700)
    shutil.rmtree(partial, ignore_errors=True)  # by descriptor too: it never follows a link


def _host() -> str:
    # A name's separators ('@', '+', '/') never come from the host name.
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())


def _alive(pid: int) -> bool:
    """Whether a process of that pid exists here (another user's counts: it may be writing)."""
    if pid <= 0:
        return True  # no process's pid: kill() would reach a group, and nothing is judged dead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
