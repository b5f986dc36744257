"""From `lifecycle port OLD NEW` to everything a port needs, checked before any work starts.

`OLD` is what `show` and `build` accept (a directory under manifests/, e.g. `0.30` or
`demo/0.1`, or a manifest path); `NEW` is the directory under manifests/ the new manifest goes
to (`0.31`, `demo/0.2`). The new release is `--release`, else NEW's last path component
(`0.31` → tag v0.31, else v0.31.0); the old release is the old manifest's `engine.vllm`.

A NEW that exists (in the working tree or at HEAD) may hold values someone measured on that
release, and a port writes every tuned value of OLD as `carried`: over an existing release
that would quietly turn measurements into guesses. So the port refuses unless `--force`, and
then keeps every tuned value NEW's own manifest.yaml marks `validated` (measurement included),
in place of OLD's carried one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from pydantic import ValidationError

from lifecycle.errors import LifecycleError, path_fault, quoted
from lifecycle.home import Home
from lifecycle.manifest import LoadedManifest, find_manifest, load_manifest
from lifecycle.manifest.load import MANIFEST_NAME, manifest_digest, manifest_ref
from lifecycle.manifest.model import TunedValue
from lifecycle.port.branch import (
    Repository,
    differs_from,
    find_repository,
    head_entries,
    in_repository,
)
from lifecycle.port.git import Git
from lifecycle.port.replay import SeriesPatch
from lifecycle.port.upstream import (
    Mirror,
    Release,
    ensure_mirror,
    find_release,
    mirror_path,
    release_candidates,
    upstream_source,
)


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
    home: Home
    flags: PortFlags = field(default_factory=PortFlags)
    # The command's environment: the fetch's time limit (LIFECYCLE_GIT_TIMEOUT) and the
    # user's own ssh command are read from it.
    environ: Mapping[str, str] = field(default_factory=dict)


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
    existing: str | None = None  # where NEW is already, if it is (--force)
    validated: dict[str, TunedValue] = field(default_factory=dict)  # what that NEW validated
    moved: tuple[str, ...] = ()  # (--continue) release tags that moved since the port started

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
            return f"replaced {self.existing} (--force), keeping the values it validated"
        return f"{self.existing} exists: a real port refuses this without --force"


def make_plan(
    request: PortRequest,
    *,
    fetch: bool = True,
    uncommitted: tuple[str, ...] | None = None,
    releases: tuple[Release, Release] | None = None,
) -> PortPlan:
    """Check the request and fetch the upstream; a LifecycleError if the port cannot go.

    `uncommitted` and `releases`, when given, are what the port found dirty and the old and
    new releases it replayed on when it started (`--continue`): kept, whatever the tags name
    now."""
    manifests_dir = request.manifests_dir.resolve()
    loaded = load_manifest(find_manifest(request.manifests_dir, request.old_ref))
    old_dir = loaded.file.parent.resolve()
    old_label = manifest_ref(old_dir, manifests_dir)
    new_label = _new_label(request.new_ref)
    new_dir = manifests_dir / new_label
    fault = path_fault(new_dir)
    if fault:
        raise LifecycleError(f"NEW {quoted(request.new_ref)}: {fault}")
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
        git = Git.user(repo.root)
        if git.run("check-ref-format", "--branch", branch, check=False).rc != 0:
            raise LifecycleError(f"{branch!r} is not a valid branch name")
        at = git.commit_of(f"refs/heads/{branch}")
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
    existing, validated = _existing(new_dir, repo, committed)
    if existing and not (request.flags.force or request.flags.dry_run):
        raise LifecycleError(
            f"{new_label} already exists ({existing}): the port would replace it on "
            f"{branch}; pass --force to replace it (the tuned values it validated are kept), "
            "or name another NEW"
        )
    source = upstream_source(loaded)
    mirror = (
        ensure_mirror(request.home, source, request.environ)
        if fetch
        else Mirror(mirror_path(request.home, source), source)
    )
    upstream = loaded.manifest.upstream
    if releases is None:
        old = find_release(mirror.git, upstream, [loaded.manifest.engine.vllm], mirror.warning)
        candidates = release_candidates(new_label, request.flags.release)
        new = find_release(mirror.git, upstream, candidates, mirror.warning)
    else:
        old, new = releases
    moved = tuple(filter(None, (_moved(mirror.git, r) for r in releases or ())))
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
        validated=validated,
        moved=moved,
    )


def _moved(mirror: Git, release: Release) -> str | None:
    """What to say when `release.tag` no longer names the commit the port replayed on."""
    now = mirror.commit_of(f"refs/tags/{release.tag}")
    if now == release.commit:
        return None
    where = f"now at {now[:12]}" if now else "gone from the mirror"
    return (
        f"{release.tag} moved since the port started ({where}): the port stays on "
        f"{release.commit[:12]}, the commit it replayed on; port again to move onto the new one"
    )


def _new_label(ref: str) -> str:
    path = PurePosixPath(ref.replace(os.sep, "/"))
    if path.is_absolute() or ".." in path.parts or str(path) in ("", "."):
        raise LifecycleError(
            f"NEW must be a directory under manifests/ (like 0.31 or demo/0.2), not {quoted(ref)}"
        )
    return path.as_posix()


def _existing(
    new_dir: Path, repo: Repository | None, committed: dict[str, str]
) -> tuple[str | None, dict[str, TunedValue]]:
    """Where NEW's directory is, in the working tree or at HEAD (`committed`: head_entries of
    it), and the tuned values its own manifest validated; (None, {}) if neither has it."""
    text: str | None = None
    where = label = None
    if new_dir.is_dir() and any(new_dir.iterdir()):
        where = label = str(new_dir)
        if (new_dir / MANIFEST_NAME).is_file():
            where = label = str(new_dir / MANIFEST_NAME)
            text = (new_dir / MANIFEST_NAME).read_text()
    name = in_repository(repo, new_dir) if repo is not None else None
    if repo is not None and name is not None and name in committed:
        where = where or f"{name}/ at HEAD"
        if text is None:
            label = f"{name}/{MANIFEST_NAME} at HEAD"
            shown = Git.user(repo.root).run(
                "cat-file", "blob", f"{repo.head}:{name}/{MANIFEST_NAME}", check=False
            )
            text = shown.out if shown.rc == 0 else None
    if where is None or text is None:
        return where, {}
    return where, _validated(text, str(label))


def _validated(text: str, label: str) -> dict[str, TunedValue]:
    """The tuned values NEW's own file marks validated (not what it inherits)."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise LifecycleError(f"{label} does not parse ({problem}); fix or remove it") from None
    tuned = data.get("tuned") if isinstance(data, dict) else None
    found = {}
    for name, value in (tuned or {}).items() if isinstance(tuned, dict) else ():
        if not (isinstance(value, dict) and value.get("status") == "validated"):
            continue
        try:
            found[str(name)] = TunedValue.model_validate(value)
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"]
            raise LifecycleError(
                f"{label}: tuned.{name}: {problem}; fix it so its validated value can be kept"
            ) from None
    return found
