"""A stopped container's own layer, read from this host's disk when dockerd keeps it here.

dockerd's list of a container's changes (`GET /containers/{id}/changes`) costs the same
however little the container wrote when its overlay2 driver diffs naively, walking the
image's whole tree in two mounts (measured here: 0.27 s on the 200 MB demo image, 1.4 s on
the 2.3 GB stand-in, for 28 and 3,048 changes). overlay2 keeps the container's layer as a
plain dir, `GraphDriver.Data.UpperDir` in its inspect: exactly what the container wrote
(copied up when it changed an image file), each deleted path a whiteout (a 0/0 character
device). When lifecycle runs on dockerd's host as a user who may read that dir (root; not a
member of the docker group alone, nor a remote or Docker Desktop dockerd), walking it lists
the same writes in milliseconds, and each file's size comes from its own `lstat`.

Anything this reader cannot vouch for answers None, and the caller asks dockerd instead: a
driver other than overlay2, a dir it cannot read, a dir renamed within the layer (overlayfs'
redirect xattr: its files would be listed under their image path, not where they are now).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# overlayfs marks a dir moved within the layer with this xattr (`trusted.` as root, `user.`
# with userxattr, as rootless dockerd mounts it).
_REDIRECT = ("trusted.overlay.redirect", "user.overlay.redirect")


@dataclass(frozen=True)
class LayerWrite:
    """A file (link, FIFO) in the container's layer: its path in the container, `added` or
    `changed` (an image file copied up and written), and its size."""

    path: str
    change: str
    size: int


class _Unreadable(Exception):
    """The layer holds something this reader cannot account for."""


def layer_writes(
    attrs: Mapping[str, Any], wanted: Callable[[str], bool]
) -> list[LayerWrite] | None:
    """The `wanted` files in the container's own layer (dirs and deletions left out), or None
    when its layer cannot be read here (see the module doc)."""
    driver = attrs.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    upper, lower = data.get("UpperDir"), data.get("LowerDir") or ""
    if driver.get("Name") != "overlay2" or not upper or not Path(upper).is_absolute():
        return None
    try:
        found = _walk(upper, "", wanted)
        lowers = [d for d in lower.split(":") if d]
        return [LayerWrite(path, _change(path, lowers), size) for path, size in sorted(found)]
    except (OSError, _Unreadable):
        return None


def _walk(root: str, prefix: str, wanted: Callable[[str], bool]) -> list[tuple[str, int]]:
    """(path in the container, size) of each wanted non-dir entry under `root`."""
    found = []
    with os.scandir(root) as entries:
        for entry in entries:
            path = f"{prefix}/{entry.name}"
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if any(_has_xattr(entry.path, name) for name in _REDIRECT):
                    raise _Unreadable(f"{path} was renamed within the layer")
                found += _walk(entry.path, path, wanted)
            elif stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                continue  # a whiteout: the path was deleted, nothing is left of it
            elif wanted(path):
                found.append((path, info.st_size))
    return found


def _has_xattr(path: str, name: str) -> bool:
    try:
        os.getxattr(path, name, follow_symlinks=False)
    except OSError:
        return False  # ENODATA mostly; a filesystem without xattrs has no redirects either
    return True


def _change(path: str, lowers: list[str]) -> str:
    """`changed` when the image has the path (the container wrote over it), else `added`."""
    relative = path.lstrip("/")
    present = any(os.path.lexists(Path(lower, relative)) for lower in lowers)
    return "changed" if present else "added"
