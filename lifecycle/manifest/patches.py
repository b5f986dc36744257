"""Checks on the patch series' files: where each is, that it is a diff, that none is there twice.

`validate` and `build --dry-run` read them, so a file that is not a patch is refused before
any build: GNU patch would only say "Only garbage was found" inside the image.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# A unified diff's file header and first hunk (`diff -u`, `git diff`), or a git diff section,
# which may carry no hunk at all (a rename, a mode change, an empty file, GIT binary patch).
_UNIFIED = re.compile(rb"^--- [^\n]+\n\+\+\+ [^\n]+\n@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_GIT = re.compile(rb"^diff --git [^\n]+\n", re.M)
MAX_PATCH_BYTES = 64 * 2**20


def check_patch_file(manifest_dir: Path, file: str) -> str | None:
    """Why a patch path is refused, or None: it must be a file inside the manifest's dir."""
    relative = Path(file)
    if relative.is_absolute():
        return "must be relative to the manifest's directory, not absolute"
    if ".." in relative.parts:
        return "must stay inside the manifest's directory ('..' is refused)"
    target = manifest_dir / relative
    # resolve() follows symlinks, so a link pointing outside is caught here too.
    if not target.resolve().is_relative_to(manifest_dir.resolve()):
        return "resolves outside the manifest's directory (symlink?)"
    if not target.is_file():
        return f"no such patch file: {target}"
    return None


def check_series_entry(
    manifest_dir: Path, file: str, index: int, seen: dict[object, int]
) -> str | None:
    """Why patches[index] is refused, or None: its path, its bytes, or an earlier entry of
    the series that is the same file or has the same bytes (`seen` remembers them)."""
    refused = check_patch_file(manifest_dir, file)
    if refused:
        return refused
    target = manifest_dir / file
    try:
        if target.stat().st_size > MAX_PATCH_BYTES:
            return f"larger than {MAX_PATCH_BYTES // 2**20} MiB; not a patch of an engine's sources"
        content = target.read_bytes()
    except OSError as exc:
        return f"cannot read {target}: {exc.strerror or exc}"
    refused = _content_problem(content)
    if refused:
        return refused
    for key in (target.resolve(), hashlib.sha256(content).hexdigest()):
        if key in seen:
            return f"the same patch as patches[{seen[key]}]; a series applies each patch once"
    seen[target.resolve()] = seen[hashlib.sha256(content).hexdigest()] = index
    return None


def _content_problem(content: bytes) -> str | None:
    if not content.strip():
        return "the patch file is empty"
    if b"\0" in content:
        return "the patch file holds binary data (NUL bytes); git's binary patches are text"
    if _UNIFIED.search(content) or _GIT.search(content):
        return None
    return "not a diff: no '--- FILE' '+++ FILE' '@@' hunk and no 'diff --git' header"
