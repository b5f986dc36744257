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
    findings = [
        *check_tuned(manifest),
        *check_profiles(manifest),
        *check_tuned_in_args(manifest),
        *check_mounts(manifest, lambda path: path in located.values),
        *check_cache_env(manifest),
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


def _resolve(file: Path, stack: tuple[Path, ...]) -> tuple[Located, tuple[Path, ...]]:
    located = read_yaml(file)
    if located.data is None:
        raise ManifestError([Problem(file, 1, 1, "(document)", "empty manifest")])
    if not isinstance(located.data, dict):
        raise ManifestError([_problem(located, (), "expected a mapping of manifest keys")])
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
    if not parent_file.is_file():
        message = f"no such manifest to extend: {parent_file}"
        raise ManifestError([_problem(located, ("extends",), message)])
    parent, chain = _resolve(parent_file, here)
    return merge_located(parent, located), (file, *chain)


def _problem(located: Located, path: KeyPath, message: str) -> Problem:
    mark = located.mark(path)
    if mark is None:
        raise AssertionError(f"no position for {path}")  # the root always has one
    return Problem(mark.file, mark.line, mark.col, render_key_path(path), message)
