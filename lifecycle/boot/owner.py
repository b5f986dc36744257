"""Caches given back to the user lifecycle runs as, once an engine wrote them as another.

On a GPU host lifecycle runs as a release engineer in the docker group while the engine runs
as its image's user, usually root; a JIT writes some files 0600 (mkstemp, then rename) and
some dirs 0700, which that engineer cannot read: no scan, archive, verify or teardown of the
cache could read what the engine built. So when the engine has exited, dockerd (root, as it
ran the engine) changes the owner of what it wrote to lifecycle's user, modes untouched: the
cache is then as a restore leaves it, and the engine, root, reads and writes it as before.
The owner is in no fingerprint; the modes are, and stay as the engine wrote them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lifecycle.dockerd import as_root

HANDBACK_MOUNT = "/lifecycle-handback"


def held_by_another(root: Path, uid: int) -> bool:
    """Whether anything below `root` belongs to a user other than `uid`; stops at the first
    such entry (a dir of another user's is not entered: it may not be)."""
    pending = [os.fspath(root)]
    while pending:
        with os.scandir(pending.pop()) as listing:
            for item in listing:
                st = item.stat(follow_symlinks=False)
                if st.st_uid != uid:
                    return True
                if item.is_dir(follow_symlinks=False):
                    pending.append(item.path)
    return False


def give_back(
    client: Any, image_id: str, roots: Sequence[Path], owner: tuple[int, int]
) -> str | None:
    """`chown -R` to `owner` (uid, gid) the cache dirs among `roots` holding another user's
    entries, as root through dockerd (as_root), one container for all; None when done (or
    nothing to do), else why not. No link is followed: what a link in a cache points at keeps
    its owner."""
    if _reads_everything():
        return None
    try:
        foreign = [root for root in roots if held_by_another(root, owner[0])]
    except OSError as exc:
        return f"cannot look at the cache {exc.filename}: {exc.strerror}"
    if not foreign:
        return None
    dirs = {f"{HANDBACK_MOUNT}/{n}": root for n, root in enumerate(foreign)}
    argv = ["chown", "-R", "-h", f"{owner[0]}:{owner[1]}", *dirs]
    return as_root(client, image_id, argv, dirs, "give the caches back")


def _reads_everything() -> bool:
    """Whether this process is root outside any user namespace: it reads and removes whatever
    an engine wrote, so no cache needs giving back, and none is walked to find out (a walk of
    every entry of every cache, each boot). Root in a user namespace of its own is not: files
    of users unmapped there are another's."""
    if os.getuid() != 0:
        return False
    try:
        mapped = Path("/proc/self/uid_map").read_text().split()
    except OSError:
        return False
    return mapped == ["0", "0", "4294967295"]
