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

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lifecycle.dockerd import sdk_errors

HANDBACK_LABEL = "lifecycle.boot.handback"
HANDBACK_MOUNT = "/lifecycle-handback"
HANDBACK_TIMEOUT_S = 3600  # a chown of tens of thousands of files takes seconds; past this, stuck


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
    client: Any,
    image_id: str,
    roots: Sequence[Path],
    owner: tuple[int, int],
    label: str,
) -> str | None:
    """`chown -R` to `owner` (uid, gid) the cache dirs among `roots` holding another user's
    entries, as root in one container of the engine image that wrote them, nothing but those
    dirs mounted, no network; None when done (or nothing to do), else why not. No link is
    followed: what a link in a cache points at keeps its owner."""
    from docker.types import Mount

    try:
        foreign = [root for root in roots if held_by_another(root, owner[0])]
    except OSError as exc:
        return f"cannot look at the cache {exc.filename}: {exc.strerror}"
    if not foreign:
        return None
    mounts = [
        Mount(f"{HANDBACK_MOUNT}/{n}", os.path.realpath(root), type="bind")
        for n, root in enumerate(foreign)
    ]
    argv = ["chown", "-R", "-h", f"{owner[0]}:{owner[1]}", *(m["Target"] for m in mounts)]
    try:
        container = client.containers.create(
            image_id,
            argv,
            entrypoint=[],  # the engine's own would start the engine
            user="0:0",
            network_mode="none",
            mounts=mounts,
            labels={HANDBACK_LABEL: label},
        )
    except sdk_errors() as exc:
        return f"dockerd could not run a container to give them back: {exc}"
    try:
        container.start()
        code = int(container.wait(timeout=HANDBACK_TIMEOUT_S)["StatusCode"])
        said = container.logs(tail=3).decode(errors="replace").strip() if code else ""
    except sdk_errors() as exc:
        return f"dockerd could not give them back: {exc}"
    finally:
        with contextlib.suppress(*sdk_errors()):  # stopped and labelled: harmless if it stays
            container.remove(force=True)
    return f"giving them back in a container exited {code}: {said}" if code else None
