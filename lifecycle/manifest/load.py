"""The one entry point that turns a manifest file into a validated, resolved `Manifest`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from lifecycle.errors import LifecycleError, ManifestError, Problem
from lifecycle.manifest.checks import check_profiles, check_tuned, check_tuned_in_args
from lifecycle.manifest.defaults import DEFAULT_CACHES
from lifecycle.manifest.limits import MAX_EXTENDS
from lifecycle.manifest.merge import deep_merge, merge_located
from lifecycle.manifest.model import Manifest
from lifecycle.manifest.mounts import check_cache_env, check_mounts
from lifecycle.manifest.patches import check_series_entry
from lifecycle.manifest.pydantic_errors import problems_from_validation
from lifecycle.manifest.source import KeyPath, Located, read_yaml, render_key_path

MANIFEST_NAME = "manifest.yaml"


@dataclass(frozen=True)
class LoadedManifest:
    """A resolved manifest, where it came from, and its patch files on disk in series order."""

    file: Path
    manifest: Manifest
    chain: tuple[Path, ...]  # this file, then each file it extends, nearest first
    patch_files: tuple[Path, ...]


def load_manifest(file: Path) -> LoadedManifest:
    """Read, resolve `extends`, validate; raise ManifestError with every located problem."""
    located, chain = _resolve(file, ())
    located.data = deep_merge({"caches": DEFAULT_CACHES}, located.data)
    try:
        manifest = Manifest.model_validate(located.data)
    except ValidationError as exc:
        raise ManifestError(problems_from_validation(exc, located)) from None

    def written(path: KeyPath) -> bool:  # by the manifest, not implied by a default
        return path in located.values

    findings = [
        *check_tuned(manifest),
        *check_profiles(manifest),
        *check_tuned_in_args(manifest),
        *check_mounts(manifest, written),
        *check_cache_env(manifest, written),
    ]
    problems = [_problem(located, path, message) for path, message in findings]
    patch_files: list[Path] = []
    seen: dict[object, int] = {}
    for index, patch in enumerate(manifest.patches):
        where: KeyPath = ("patches", index, "file")
        mark = located.mark(where)
        manifest_dir = mark.file.parent if mark else file.parent
        refused = check_series_entry(manifest_dir, patch.file, index, seen)
        if refused:
            problems.append(_problem(located, where, refused))
        patch_files.append(manifest_dir / patch.file)
    if problems:
        raise ManifestError(problems)
    return LoadedManifest(file, manifest, chain, tuple(patch_files))


def find_manifest(manifests_dir: Path, ref: str) -> Path:
    """`0.31` → manifests/0.31/manifest.yaml; a path to a file is taken as it is, a path to
    a dir holding a manifest.yaml is that file."""
    as_path = Path(ref)
    if as_path.suffix in {".yaml", ".yml"} or as_path.is_file():
        return as_path
    if (as_path / MANIFEST_NAME).is_file():
        return as_path / MANIFEST_NAME
    candidate = manifests_dir / ref / MANIFEST_NAME
    if candidate.is_file():
        return candidate
    known = sorted(p.parent.name for p in manifests_dir.glob(f"*/{MANIFEST_NAME}"))
    raise LifecycleError(
        f"no manifest for {ref!r}: {candidate} does not exist "
        f"(known: {', '.join(known) or 'none'} in {manifests_dir})"
    )


def _resolve(
    file: Path, stack: tuple[Path, ...], located: Located | None = None
) -> tuple[Located, tuple[Path, ...]]:
    located = located or _read_document(file)
    assert isinstance(located.data, dict), "a document _read_document gave back is a mapping"
    parent_ref = located.data.get("extends")
    if parent_ref is None:
        return located, (file,)
    if not isinstance(parent_ref, str) or not parent_ref:
        raise ManifestError([_problem(located, ("extends",), "expected a path to a manifest")])
    parent_file = Path(os.path.normpath(file.parent / parent_ref))
    here = (*stack, file.resolve())
    if len(here) >= MAX_EXTENDS:
        message = f"extends chain longer than {MAX_EXTENDS} manifests"
        raise ManifestError([_problem(located, ("extends",), message)])
    if parent_file.resolve() in here:
        cycle = " -> ".join(str(p) for p in (*here, parent_file.resolve()))
        raise ManifestError([_problem(located, ("extends",), f"extends cycle: {cycle}")])
    parent, chain = _resolve(parent_file, here, _read_parent(located, parent_ref, parent_file))
    return merge_located(parent, located), (file, *chain)


def _read_document(file: Path) -> Located:
    """The file as a YAML mapping; anything else is a ManifestError about the whole file."""
    located = read_yaml(file)
    if located.data is None:
        raise ManifestError([Problem(file, 1, 1, "(document)", "empty manifest")])
    if not isinstance(located.data, dict):
        raise ManifestError([_problem(located, (), "expected a mapping of manifest keys")])
    return located


def _read_parent(child: Located, ref: str, file: Path) -> Located:
    """The manifest `child` extends. What is no manifest at all (a dir, a file of another kind)
    is the `extends:` line's mistake and reported there; a manifest with mistakes, in it."""

    def wrong(message: str) -> ManifestError:
        return ManifestError([_problem(child, ("extends",), message)])

    if file.is_dir():
        inside = file / MANIFEST_NAME
        hint = f"; did you mean {ref.rstrip('/')}/{MANIFEST_NAME}?" if inside.is_file() else ""
        raise wrong(f"{ref} is a directory, not a manifest{hint}")
    if not file.is_file():
        raise wrong(f"no such manifest to extend: {file}")
    try:
        parent = _read_document(file)
    except ManifestError as exc:
        first = exc.problems[0]
        if first.key_path not in ("(file)", "(document)"):
            raise
        raise wrong(f"{ref} is not a manifest: {first.message}") from None
    assert isinstance(parent.data, dict), "a document _read_document gave back is a mapping"
    if not parent.data.keys() & Manifest.model_fields.keys():  # `Title: some prose` is YAML too
        raise wrong(f"{ref} is not a manifest: none of its keys is a manifest's")
    return parent


def _problem(located: Located, path: KeyPath, message: str) -> Problem:
    mark = located.mark(path)
    if mark is None:
        raise AssertionError(f"no position for {path}")  # the root always has one
    return Problem(mark.file, mark.line, mark.col, render_key_path(path), message)
