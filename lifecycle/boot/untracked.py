"""After a boot, before its container is removed: the JIT output it wrote outside its caches.

The container's own layer holds every path it wrote, and none under a bind mount: so none
inside a tracked cache. dockerd's list of a container's changes (`GET
/containers/{id}/changes`, `docker diff`) costs the same however little the container wrote
when its overlay2 driver diffs naively, walking the image's whole tree in two mounts (measured
here: 0.27 s on the 200 MB demo image, 1.4 s on the 2.3 GB stand-in, for 28 and 3,048
changes). overlay2 keeps the container's layer as a plain dir, `GraphDriver.Data.UpperDir` in
its inspect: exactly what the container wrote (copied up when it changed an image file), each
deleted path a whiteout (a 0/0 character device). When lifecycle runs on dockerd's host as a
user who may read that dir (root; not a member of the docker group alone, nor a remote or
Docker Desktop dockerd), walking it lists the same writes in milliseconds, and each file's
size comes from its own `lstat`.

Anything that walk cannot vouch for (a driver other than overlay2, a dir it cannot read, a dir
renamed within the layer: overlayfs' redirect xattr would list its files under their image
path) is asked of dockerd instead: its list of changes, then sizes from the archive
endpoint's stat header (`HEAD /containers/{id}/archive`), which reads no file content and runs
nothing in the container: measured here 4 to 5 ms a path (500 paths 2.1 s, 2,000 paths 9 s, on
2 busy cores); paths past `MAX_SIZED` are recorded without a size, so a boot that spilled a
whole cache into its container costs seconds, not minutes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lifecycle.boot.spec import CacheMount
from lifecycle.evidence.layout import inside_any, looks_like_jit_output
from lifecycle.ledger.boots import UntrackedWrite

MAX_SIZED = 2000
_CHANGES = {0: "changed", 1: "added"}  # 2 (deleted) left nothing behind
_MODE_DIR = 1 << 31  # Go's os.ModeDir, as the stat header reports modes
# overlayfs marks a dir moved within the layer with this xattr (`trusted.` as root, `user.`
# with userxattr, as rootless dockerd mounts it).
_REDIRECT = ("trusted.overlay.redirect", "user.overlay.redirect")


def read_untracked(
    client: Any, container: Any, boot_id: str, mounts: Sequence[CacheMount]
) -> tuple[list[UntrackedWrite], str | None]:
    """The container's JIT output outside its caches; on a dockerd error, none and why."""
    from docker.errors import DockerException

    try:
        tracked = [m.container_path for m in mounts]
        return untracked_writes(client, container, boot_id, tracked), None
    except (DockerException, OSError) as exc:  # requests' errors are OSErrors
        return [], f"writes outside the tracked caches not read: {exc}"


def untracked_writes(
    client: Any, container: Any, boot_id: str, tracked: Iterable[str]
) -> list[UntrackedWrite]:
    """The JIT-looking files the container wrote outside the `tracked` container paths."""
    roots = list(tracked)

    def wanted(path: str) -> bool:
        # The regexes first: most paths are `__pycache__` noise, and `inside_any` builds paths.
        return looks_like_jit_output(path) and not inside_any(path, roots)

    # The create's inspect (container.attrs) already names the layer: no request for it.
    from_layer = layer_writes(container.attrs, wanted)
    if from_layer is not None:
        return [UntrackedWrite(boot_id, *write) for write in from_layer]
    return _asked_of_dockerd(client, container, boot_id, wanted)


def layer_writes(
    attrs: Mapping[str, Any], wanted: Callable[[str], bool]
) -> list[tuple[str, str, int]] | None:
    """(path in the container, `added` or `changed`, size) of each `wanted` file (link, FIFO)
    in the container's own layer, dirs and deletions left out; None when its layer cannot be
    read here (see the module doc)."""
    driver = attrs.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    upper, lower = data.get("UpperDir"), data.get("LowerDir") or ""
    if driver.get("Name") != "overlay2" or not upper or not Path(upper).is_absolute():
        return None
    try:
        found = _walk(upper, "", wanted)
    except OSError:
        return None
    lowers = [d for d in lower.split(":") if d]
    return [(path, _change(path, lowers), size) for path, size in sorted(found)]


def _walk(root: str, prefix: str, wanted: Callable[[str], bool]) -> list[tuple[str, int]]:
    """(path in the container, size) of each wanted non-dir entry under `root`; OSError for a
    dir renamed within the layer."""
    found = []
    with os.scandir(root) as entries:
        for entry in entries:
            path = f"{prefix}/{entry.name}"
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if any(_has_xattr(entry.path, name) for name in _REDIRECT):
                    raise OSError(f"{path} was renamed within the layer")
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


def _asked_of_dockerd(
    client: Any, container: Any, boot_id: str, wanted: Callable[[str], bool]
) -> list[UntrackedWrite]:
    """The same from dockerd: its list of changes, then a stat header per path found."""
    found = []
    for change in container.diff() or []:
        path, kind = change["Path"], change["Kind"]
        if kind in _CHANGES and wanted(path):
            found.append((path, _CHANGES[kind]))
    writes = []
    for index, (path, change) in enumerate(sorted(found)):
        stat = _stat(client, container.id, path) if index < MAX_SIZED else None
        if stat is not None and stat.get("mode", 0) & _MODE_DIR:
            continue  # a dir: its files are listed in their own right
        size = stat.get("size") if stat is not None else None
        writes.append(UntrackedWrite(boot_id, path, change, size))
    return writes


def _stat(client: Any, container_id: str, path: str) -> dict[str, Any] | None:
    """The stat dockerd reports for a path in a stopped container, or None."""
    from docker.utils import decode_json_header

    api = client.api
    url = api._url("/containers/{0}/archive", container_id)
    response = api.head(url, params={"path": path}, timeout=api.timeout)
    header = response.headers.get("X-Docker-Container-Path-Stat")
    if response.status_code != 200 or not header:
        return None
    stat: dict[str, Any] = decode_json_header(header)
    return stat
