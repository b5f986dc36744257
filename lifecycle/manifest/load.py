"""The one entry point that turns a manifest file into a validated, resolved `Manifest`, and
its digest: what an image, a cache and a result are traced back to. `extends`: a derived
manifest is its parent with the child's keys laid over it. The patch files are checked here
too (a diff, each once), so a file that is not a patch is refused before any build: GNU patch
would only say "Only garbage was found" inside the image."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from lifecycle.errors import (
    LifecycleError,
    ManifestError,
    Problem,
    clip,
    did_you_mean,
    path_fault,
    quoted,
)
from lifecycle.manifest.checks import (
    DEFAULT_CACHES,
    check_cache_env,
    check_mounts,
    check_profiles,
    check_tuned,
    check_tuned_in_args,
)
from lifecycle.manifest.model import Manifest
from lifecycle.manifest.pydantic_errors import problems_from_validation
from lifecycle.manifest.source import (
    MAX_EXTENDS,
    KeyPath,
    Located,
    read_yaml,
    render_key_path,
)
from lifecycle.redact import without_userinfo
from lifecycle.table import visible

MANIFEST_NAME = "manifest.yaml"
Document = TypeVar("Document", bound=BaseModel)
Finding = tuple[KeyPath, str]  # a problem at a key path, located in the file when raised


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
        refused = _refused_patch(manifest_dir, patch.file, index, seen)
        if refused:
            problems.append(_problem(located, where, refused))
        patch_files.append(manifest_dir / patch.file)
    if problems:
        raise ManifestError(problems)
    return LoadedManifest(file, manifest, chain, tuple(patch_files))


def manifest_ref(directory: Path, manifests_dir: Path) -> str:
    """How build and boot name the manifest in `directory` (`0.31`, `demo/0.2`): its path under
    the project's manifests; a directory elsewhere is named by its basename."""
    try:
        return directory.resolve().relative_to(manifests_dir.resolve()).as_posix()
    except ValueError:
        return directory.name


def tuned_origins(loaded: LoadedManifest) -> dict[str, Path]:
    """The file of the chain that writes each tuned value's `value`, the nearest: where it was
    measured (or recorded as carried); a derived manifest inherits its parent's measurements."""
    origins: dict[str, Path] = {}
    for file in reversed(loaded.chain):  # the root first: a nearer file's value overrides
        data = read_yaml(file).data
        tuned = data.get("tuned") if isinstance(data, dict) else None
        for name, value in tuned.items() if isinstance(tuned, dict) else ():
            if isinstance(value, dict) and "value" in value:
                origins[str(name)] = file
    return {name: origins.get(name, loaded.file) for name in loaded.manifest.tuned}


def find_manifest(manifests_dir: Path, ref: str) -> Path:
    """`0.31` → manifests/0.31/manifest.yaml; a path to a file is taken as it is, a path to
    a dir holding a manifest.yaml is that file."""
    as_path = Path(ref)
    candidate = manifests_dir / ref / MANIFEST_NAME
    fault = path_fault(as_path) or path_fault(candidate)
    if fault:
        raise LifecycleError(f"no manifest for {quoted(ref)}: {fault}")
    if as_path.suffix in {".yaml", ".yml"} or as_path.is_file():
        return as_path
    if (as_path / MANIFEST_NAME).is_file():
        return as_path / MANIFEST_NAME
    if candidate.is_file():
        return candidate
    if os.path.lexists(candidate):  # a dir, a FIFO, a device, a dangling link: there, not a file
        raise LifecycleError(f"no manifest for {quoted(ref)}: {_shown(candidate)} is not a file")
    # Refs are a release (`0.31`) or a name and its release (`demo/0.2`): one or two dirs deep.
    found = [*manifests_dir.glob(f"*/{MANIFEST_NAME}"), *manifests_dir.glob(f"*/*/{MANIFEST_NAME}")]
    known = sorted(p.parent.relative_to(manifests_dir).as_posix() for p in found)
    raise LifecycleError(
        f"no manifest for {quoted(ref)}: {_shown(candidate)} does not exist "
        f"(known: {', '.join(known) or 'none'} in {_shown(manifests_dir)})"
        f"{did_you_mean(ref, known)}"
    )


def _shown(path: Path) -> str:
    """A path as an error line names it: clipped, and a newline or control in a ref the user
    typed escaped, so that it cannot start a line of its own."""
    return visible(clip(str(path)))


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
    written = _read_parent(located, parent_ref, parent_file)  # first: resolve() raises on a loop
    if parent_file.resolve() in here:
        cycle = " -> ".join(str(p) for p in (*here, parent_file.resolve()))
        raise ManifestError([_problem(located, ("extends",), f"extends cycle: {cycle}")])
    parent, chain = _resolve(parent_file, here, written)
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

    fault = path_fault(file)
    if fault:
        raise wrong(f"cannot read {quoted(ref)}: {fault}")
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


def deep_merge(base: Any, over: Any) -> Any:
    """Mappings merge key by key; anything else (lists included) is replaced by `over`."""
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    return over


def merge_located(base: Located, over: Located) -> Located:
    """Merge data, keeping for every surviving value the mark of the file it came from. A
    tuned value's block is one account of where its value came from: a file that writes the
    `value` replaces its parent's block whole (the parent's note or `validity`, merged key by
    key, would read as the measurement of another value); one that does not (`status:
    carried`) keeps the parent's value and what it says of it."""
    values = {p: m for p, m in base.values.items() if _survives(p, over)}
    keys = {p: m for p, m in base.keys.items() if _survives(p, over)}
    data = deep_merge(base.data, over.data)
    declared = over.data.get("tuned") if isinstance(over.data, dict) else None
    if isinstance(declared, dict) and isinstance(data.get("tuned"), dict):
        data["tuned"].update(
            {name: block for name, block in declared.items() if _writes_value(block)}
        )
    return Located(data, values | over.values, keys | over.keys)


def _writes_value(block: Any) -> bool:
    return isinstance(block, dict) and "value" in block


def _survives(path: KeyPath, over: Located) -> bool:
    """A base value survives unless `over` sets it, replaces a non-mapping above it, or
    writes the value of the tuned value it belongs to."""
    if path in over.values or (path[:1] == ("tuned",) and (*path[:2], "value") in over.keys):
        return False
    for end in range(1, len(path)):
        prefix = path[:end]
        if prefix in over.values and not isinstance(_get(over.data, prefix), dict):
            return False
    return True


def _get(data: Any, path: KeyPath) -> Any:
    for part in path:
        data = data[part]
    return data


# A unified diff's file header and first hunk (`diff -u`, `git diff`), or a git diff section,
# which may carry no hunk at all (a rename, a mode change, an empty file, GIT binary patch).
_UNIFIED = re.compile(rb"^--- [^\n]+\n\+\+\+ [^\n]+\n@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_GIT = re.compile(rb"^diff --git [^\n]+\n", re.M)
MAX_PATCH_BYTES = 64 * 2**20


def _refused_patch(
    manifest_dir: Path, file: str, index: int, seen: dict[object, int]
) -> str | None:
    """Why patches[index] is refused, or None: it must be a diff in a file inside the manifest's
    dir, neither the same file as an earlier entry nor the same bytes (`seen` remembers them)."""
    relative = Path(file)
    if relative.is_absolute():
        return "must be relative to the manifest's directory, not absolute"
    if ".." in relative.parts:
        return "must stay inside the manifest's directory ('..' is refused)"
    target = manifest_dir / relative
    fault = path_fault(target)
    if fault:
        return f"cannot read {quoted(file)}: {fault}"
    # resolve() follows symlinks, so a link pointing outside is caught here too.
    if not target.resolve().is_relative_to(manifest_dir.resolve()):
        return "resolves outside the manifest's directory (symlink?)"
    if not target.is_file():
        return f"no such patch file: {target}"
    try:
        if target.stat().st_size > MAX_PATCH_BYTES:
            return f"larger than {MAX_PATCH_BYTES // 2**20} MiB; not a patch of an engine's sources"
        content = target.read_bytes()
    except OSError as exc:
        return f"cannot read {target}: {exc.strerror or exc}"
    if not content.strip():
        return "the patch file is empty"
    if b"\0" in content:
        return "the patch file holds binary data (NUL bytes); git's binary patches are text"
    if not (_UNIFIED.search(content) or _GIT.search(content)):
        return "not a diff: no '--- FILE' '+++ FILE' '@@' hunk and no 'diff --git' header"
    keys = (target.resolve(), hashlib.sha256(content).hexdigest())
    for key in keys:
        if key in seen:
            return f"the same patch as patches[{seen[key]}]; a series applies each patch once"
    seen.update(dict.fromkeys(keys, index))
    return None


_DOMAIN = b"lifecycle/manifest/v1\n"


def canonical_form(loaded: LoadedManifest) -> dict[str, Any]:
    """The resolved manifest as JSON data; `extends` is where it came from and `registry` where
    its images are kept, not what it is; nor is a credential in its upstream's URL (kept out of
    the digest, so a new token is not a new engine, and of the snapshots a boot archives)."""
    data = loaded.manifest.model_dump(mode="json", exclude={"extends", "registry"})
    data["upstream"]["repository"] = _without_credential(data["upstream"]["repository"])
    return data


_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<user>[^@/:]*)(?::[^@/]*)?@")


def _without_credential(url: str) -> str:
    """`url` without a credential: an http(s) URL's whole userinfo (a token is written there
    alone, or as the password), any other's password; `ssh://git@host/…` is as written."""
    found = _USERINFO.match(url)
    if found is None:
        return url
    if found["scheme"].lower() in ("http", "https"):
        return without_userinfo(url)
    return f"{found['scheme']}://{found['user']}@{url[found.end() :]}"


def manifest_digest(loaded: LoadedManifest) -> str:
    """sha256 over the canonical resolved manifest, then each patch's bytes in series order.

    Key order, comments and YAML layout do not enter it; one patch byte or the order does.
    Every part is length-prefixed so that no two different inputs concatenate alike.
    """
    canonical = json.dumps(
        canonical_form(loaded), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    digest = hashlib.sha256(_DOMAIN)
    digest.update(b"%d\n" % len(canonical) + canonical)
    for patch_file in loaded.patch_files:
        content = patch_file.read_bytes()
        digest.update(b"%d\n" % len(content) + content)
    return digest.hexdigest()


def patch_digests(loaded: LoadedManifest) -> list[tuple[str, str]]:
    """(file as written in the manifest, sha256 of its bytes) for each patch, in order."""
    return [
        (patch.file, hashlib.sha256(path.read_bytes()).hexdigest())
        for patch, path in zip(loaded.manifest.patches, loaded.patch_files, strict=True)
    ]


def load_validated(
    file: Path, model: type[Document], checks: Callable[[Document], Iterator[Finding]]
) -> Document:
    """A YAML document validated as `model`, then by `checks` (what its types cannot say);
    ManifestError (exit 2) with every problem located, as for a manifest."""
    located = read_yaml(file)
    if not isinstance(located.data, dict):
        raise ManifestError([Problem(file, 1, 1, "(document)", "expected a mapping of keys")])
    try:
        document = model.model_validate(located.data)
    except ValidationError as exc:
        raise ManifestError(problems_from_validation(exc, located, model)) from None
    problems = []
    for path, message in checks(document):
        mark = located.mark(path, prefer_key=True)  # a finding is about the key: point at it
        assert mark is not None, "the document root always has a mark"
        problems.append(Problem(mark.file, mark.line, mark.col, render_key_path(path), message))
    if problems:
        raise ManifestError(problems)
    return document
