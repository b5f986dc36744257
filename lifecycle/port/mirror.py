"""The managed upstream mirror: one bare repository per upstream, under LIFECYCLE_HOME.

`$LIFECYCLE_HOME/mirrors/<name>-<sha256(source)[:16]>.git`, where the source is the URL as
written or the absolute path of a local repository. Every port fetches into it
(`git fetch --tags`, all branches, so a recorded upstream commit on a branch is found), under a
file lock so two ports do not fetch into one mirror at once. If the fetch fails (offline) the
mirror is used as it is, and the port says so; the tags it needs must already be there.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lifecycle.leases import exclusive
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.source import read_yaml
from lifecycle.port.git import Git

# git's own rule: `scheme://...`, or `host:path` with the colon before any slash, is remote.
REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^[^/]+:")


@dataclass(frozen=True)
class Mirror:
    """A fetched mirror; `warning` says when the fetch failed and an older copy is used."""

    path: Path
    source: str
    warning: str | None = None

    @property
    def git(self) -> Git:
        """A runner on the mirror (neutral config)."""
        return Git.scratch(self.path)


def upstream_source(loaded: LoadedManifest) -> str:
    """`upstream.repository` as git fetches it: a URL as written, a local path resolved against
    the directory of the manifest that declares it (like a patch file)."""
    repository = loaded.manifest.upstream.repository
    if REMOTE.match(repository):
        return repository
    return str((declaring_file(loaded).parent / repository).resolve())


def declaring_file(loaded: LoadedManifest) -> Path:
    """The manifest of the chain that writes `upstream.repository`, the nearest first: a
    derived manifest may inherit the path."""
    if len(loaded.chain) == 1:
        return loaded.file  # the model made it write the path
    for file in loaded.chain:
        data = read_yaml(file).data
        declared = data.get("upstream") if isinstance(data, dict) else None
        if isinstance(declared, dict) and "repository" in declared:
            return file
    return loaded.file


def mirror_path(home: Path, source: str) -> Path:
    """Where the mirror of `source` lives; a readable stem, then a hash that makes it unique."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", source.rstrip("/").rsplit("/", 1)[-1])
    stem = stem.removesuffix(".git") or "upstream"
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return home / "mirrors" / f"{stem}-{digest}.git"


def ensure_mirror(home: Path, source: str) -> Mirror:
    """Create the mirror if needed and fetch every branch and tag of `source` into it."""
    path = mirror_path(home, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(path.with_suffix(".lock")):
        if not (path / "HEAD").is_file():
            _init_bare(path)
        fetched = Git.user(path).run(
            "fetch",
            "--quiet",
            "--force",
            "--prune",
            "--tags",
            source,
            "+refs/heads/*:refs/heads/*",
            check=False,
        )
    if fetched.rc != 0:
        reason = (fetched.err or fetched.out).strip().splitlines()
        return Mirror(
            path,
            source,
            f"fetch from {source} failed ({' '.join(reason[-1:])}); "
            "using the mirror as last fetched",
        )
    return Mirror(path, source)


def _init_bare(path: Path) -> None:
    # Built beside its final place and renamed, so an interrupted init leaves no half mirror.
    temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        Git.scratch(temp).run("init", "--quiet", "--bare", str(temp))
        if path.exists():
            shutil.rmtree(path)
        temp.rename(path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
