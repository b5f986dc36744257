"""From `lifecycle port OLD NEW` to everything a port needs, checked before any work starts.

`OLD` is what `show` and `build` accept (a directory under manifests/, e.g. `0.30` or
`demo/0.1`, or a manifest path); `NEW` is the directory under manifests/ the new manifest goes
to (`0.31`, `demo/0.2`). The new release is `--release`, else NEW's last path component
(`0.31` → tag v0.31, else v0.31.0); the old release is the old manifest's `engine.vllm`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lifecycle.errors import LifecycleError
from lifecycle.manifest import LoadedManifest, find_manifest, load_manifest
from lifecycle.manifest.digest import manifest_digest
from lifecycle.port.branch import (
    Repository,
    branch_exists,
    check_branch_name,
    differs_from,
    find_repository,
    head_entries,
)
from lifecycle.port.existing import Existing, find_existing
from lifecycle.port.mirror import (
    Mirror,
    ensure_mirror,
    mirror_path,
    upstream_source,
)
from lifecycle.port.pins import Release, find_release, release_candidates
from lifecycle.port.replay import SeriesPatch


@dataclass(frozen=True)
class PortFlags:
    """How to port, as the command line's options say."""

    dry_run: bool = False
    keep_going: bool = False  # try every patch and report every conflict
    branch: str | None = None  # default port/<new>
    release: str | None = None  # the upstream release; default from NEW's name
    allow_dirty: bool = False  # port OLD as in the working tree though HEAD differs
    force: bool = False  # replace a NEW manifest that exists


@dataclass(frozen=True)
class PortRequest:
    """What the CLI asked for: which manifests, from which release to which, and how."""

    manifests_dir: Path
    old_ref: str
    new_ref: str
    home: Path
    flags: PortFlags = field(default_factory=PortFlags)


@dataclass(frozen=True)
class PortPlan:
    """A checked request: manifests, releases, the mirror, the series, where results go."""

    request: PortRequest
    loaded: LoadedManifest
    old_label: str
    new_label: str
    new_dir: Path
    digest: str
    mirror: Mirror
    old: Release
    new: Release
    subdir: str
    patches: list[SeriesPatch]
    repo: Repository | None
    branch: str
    uncommitted: tuple[str, ...] = ()  # OLD's files that differ from HEAD (--allow-dirty)
    existing: Existing | None = None  # NEW, if it is there already (--force)

    @property
    def dirty_warning(self) -> str | None:
        """What a port of a working tree that differs from HEAD must say, if it does."""
        if not self.uncommitted:
            return None
        files = ", ".join(self.uncommitted)
        if self.request.flags.allow_dirty:
            return f"ported the working tree (--allow-dirty): {files} differ from HEAD"
        return f"{files} differ from HEAD: a real port refuses this without --allow-dirty"

    @property
    def existing_warning(self) -> str | None:
        """What a port onto a NEW that exists must say, if it does."""
        if self.existing is None:
            return None
        if self.request.flags.force:
            return f"replaced {self.existing.where} (--force), keeping the values it validated"
        return f"{self.existing.where} exists: a real port refuses this without --force"


def make_plan(
    request: PortRequest, *, fetch: bool = True, uncommitted: tuple[str, ...] | None = None
) -> PortPlan:
    """Check the request and fetch the upstream; a LifecycleError if the port cannot go.

    `uncommitted`, when given, is what the port found dirty when it started (`--continue`)."""
    manifests_dir = request.manifests_dir.resolve()
    loaded = load_manifest(find_manifest(request.manifests_dir, request.old_ref))
    old_dir = loaded.file.parent.resolve()
    old_label = _label(old_dir, manifests_dir)
    new_label = _new_label(request.new_ref)
    new_dir = manifests_dir / new_label
    chain_dirs = {f.parent.resolve() for f in loaded.chain}
    if new_dir in chain_dirs:
        raise LifecycleError(
            f"the new manifest cannot go to {new_dir}: {old_label} is (or extends) the manifest "
            "there; name a new directory"
        )
    repo = find_repository(manifests_dir)
    branch = request.flags.branch or f"port/{new_label}"
    if repo is None and not request.flags.dry_run:
        raise LifecycleError(
            f"{manifests_dir} is not in a git repository: the port is committed on a branch "
            "there (use --dry-run to only see the report)"
        )
    if repo is not None:
        check_branch_name(repo, branch)
        at = branch_exists(repo, branch)
        if at and not request.flags.dry_run:
            raise LifecycleError(
                f"branch {branch} already exists (at {at[:12]}): delete it "
                f"(git branch -D {branch}) or name another with --branch"
            )
    old_files = [*loaded.chain, *loaded.patch_files]
    committed = head_entries(repo, [*old_files, new_dir]) if repo else {}
    if uncommitted is None:
        uncommitted = tuple(differs_from(repo, committed, old_files)) if repo else ()
    if uncommitted and not (request.flags.allow_dirty or request.flags.dry_run):
        raise LifecycleError(
            f"{', '.join(uncommitted)} differ from HEAD: the port reads the working tree but "
            "commits on HEAD; commit them first, or pass --allow-dirty to port the working tree "
            "(the report records it)"
        )
    existing = find_existing(new_dir, repo, committed)
    if existing and not (request.flags.force or request.flags.dry_run):
        raise LifecycleError(
            f"{new_label} already exists ({existing.where}): the port would replace it on "
            f"{branch}; pass --force to replace it (the tuned values it validated are kept), "
            "or name another NEW"
        )
    source = upstream_source(loaded)
    mirror = (
        ensure_mirror(request.home, source)
        if fetch
        else Mirror(mirror_path(request.home, source), source)
    )
    upstream = loaded.manifest.upstream
    old = find_release(mirror.git, upstream, [loaded.manifest.engine.vllm], mirror.warning)
    candidates = release_candidates(new_label, request.flags.release)
    new = find_release(mirror.git, upstream, candidates, mirror.warning)
    patches = [
        SeriesPatch(i, p.file, f, p.upstream_commit, p.drop_when)
        for i, (p, f) in enumerate(zip(loaded.manifest.patches, loaded.patch_files, strict=True))
    ]
    return PortPlan(
        request=request,
        loaded=loaded,
        old_label=old_label,
        new_label=new_label,
        new_dir=new_dir,
        digest=manifest_digest(loaded),
        mirror=mirror,
        old=old,
        new=new,
        subdir=PurePosixPath(loaded.manifest.engine.package_dir).name,
        patches=patches,
        repo=repo,
        branch=branch,
        uncommitted=uncommitted,
        existing=existing,
    )


def _label(directory: Path, manifests_dir: Path) -> str:
    """`demo/0.1` for manifests/demo/0.1; a directory elsewhere is named by its basename."""
    try:
        return directory.relative_to(manifests_dir).as_posix()
    except ValueError:
        return directory.name


def _new_label(ref: str) -> str:
    path = PurePosixPath(ref.replace(os.sep, "/"))
    if path.is_absolute() or ".." in path.parts or str(path) in ("", "."):
        raise LifecycleError(
            f"NEW must be a directory under manifests/ (like 0.31 or demo/0.2), not {ref!r}"
        )
    return path.as_posix()
