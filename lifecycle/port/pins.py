"""The new release's pins: its tag, the FlashInfer version it requires, its base image.

FlashInfer is read from the new tag itself: the lines of `requirements/cuda.txt`,
`requirements/*.txt`, `requirements*.txt`, `pyproject.toml`, `setup.py`, `setup.cfg`, or of
the package metadata a tree made from wheels or sdists holds instead (`Requires-Dist:` in
`*.dist-info/METADATA` and `PKG-INFO`, lines of `*.egg-info/requires.txt`), that name the
manifest's `engine.flashinfer_dist` (flashinfer-python for vLLM, demoinfer for the demo
engine) with an exact `==` pin. Without one the old pin is carried and flagged, and the new
manifest lists it under `engine.unconfirmed` so that `build` refuses it until a person
checks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lifecycle.errors import LifecycleError
from lifecycle.manifest.model import Upstream
from lifecycle.port.git import Git

# Searched in this order; the first file with an exact pin wins.
REQUIREMENT_FILES = (
    "requirements/cuda.txt",
    "requirements/common.txt",
    "requirements/*.txt",
    "requirements.txt",
    "requirements*.txt",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "*.dist-info/METADATA",
    "PKG-INFO",
    "*/PKG-INFO",
    "*.egg-info/requires.txt",
)
_REQUIRES_DIST = re.compile(r"^\s*Requires-Dist:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Release:
    """An upstream release: its version, tag and commit."""

    version: str
    tag: str
    commit: str


@dataclass(frozen=True)
class PinChange:
    """One pin, old and new, where the new one came from, and whether a person should look."""

    name: str
    old: str
    new: str
    source: str
    flagged: bool = False
    reason: str = ""  # why a flagged pin could not be derived


def find_release(
    mirror: Git, upstream: Upstream, candidates: list[str], warning: str | None = None
) -> Release:
    """The first candidate version whose tag (`upstream.tag`) exists in the mirror; if none
    does, the error adds the mirror's `warning` (a failed fetch explains a missing tag)."""
    for version in candidates:
        tag = upstream.tag_for(version)
        commit = mirror.commit_of(f"refs/tags/{tag}")
        if commit:
            return Release(version, tag, commit)
    pattern = upstream.tag_for("*")
    known = mirror.out("tag", "--list", pattern, "--sort=-version:refname").split()[:8]
    tried = ", ".join(upstream.tag_for(v) for v in candidates)
    raise LifecycleError(
        f"no upstream tag {tried} in the mirror (recent {pattern}: {', '.join(known) or 'none'});"
        " pass --release VERSION to name the release" + (f" ({warning})" if warning else "")
    )


def release_candidates(new_ref: str, explicit: str | None) -> list[str]:
    """`--release` if given, else the new manifest's directory name: `0.31` → 0.31, 0.31.0."""
    if explicit:
        return [explicit]
    name = new_ref.rstrip("/").rsplit("/", 1)[-1]
    candidates = [name, f"{name}.0"] if re.fullmatch(r"\d+\.\d+", name) else [name]
    valid = []
    for candidate in candidates:
        try:
            valid.append(str(Version(candidate)))
        except InvalidVersion:
            continue
    return valid or [name]


def flashinfer_pin(mirror: Git, release: Release, dist: str, old: str) -> PinChange:
    """The exact pin of `dist` at the release, or the old pin carried and flagged."""
    words = [re.escape(w) for w in re.split(r"[-_.]+", dist) if w]
    pattern = "[-_.]+".join(words)
    found = mirror.run(
        "grep",
        "-I",
        "-i",
        "-E",
        "--full-name",
        "-z",
        pattern,
        release.commit,
        "--",
        *REQUIREMENT_FILES,
        check=False,
    )
    exact: dict[str, str] = {}
    loose: dict[str, str] = {}
    for hit in found.out.splitlines():
        where, _, line = hit.partition("\0")
        file = where.removeprefix(f"{release.commit}:")
        requirement = _requirement(line)
        if requirement is None or canonicalize_name(requirement.name) != canonicalize_name(dist):
            continue
        pins = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
        if len(pins) == 1 and "*" not in pins[0]:
            exact.setdefault(file, pins[0])
        else:
            loose.setdefault(file, str(requirement))
    for file in _by_preference(exact):
        return PinChange("flashinfer", old, exact[file], f"{file} at {release.tag}")
    if loose:
        file = _by_preference(loose)[0]
        why = f"{file} at {release.tag} says {loose[file]!r}, not an exact pin"
    else:
        why = f"no requirement naming {dist} at {release.tag}"
    return PinChange("flashinfer", old, old, f"carried: {why}; check it", True, why)


def base_image_pin(base_image: str, old_version: str, new_version: str) -> PinChange:
    """The base image with the old version replaced by the new one, else carried and flagged."""
    name, colon, tag = base_image.rpartition(":")
    if colon and "/" not in tag and re.search(rf"(?<![\d.]){re.escape(old_version)}(?![\d])", tag):
        bumped = f"{name}:{tag.replace(old_version, new_version)}"
        return PinChange("base_image", base_image, bumped, "tag names the release")
    if old_version == new_version:
        return PinChange("base_image", base_image, base_image, "same release")
    why = f"its tag does not name {old_version}"
    return PinChange("base_image", base_image, base_image, f"carried: {why}; check it", True, why)


def _requirement(line: str) -> Requirement | None:
    # A requirements line, a pyproject/setup.py list item ("name==1.0",), a setup.cfg line or
    # a metadata field (`Requires-Dist: name==1.0; marker`).
    text = _REQUIRES_DIST.sub("", line.split("#", 1)[0]).strip().strip(",").strip().strip("'\"")
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def _by_preference(found: dict[str, str]) -> list[str]:
    def rank(file: str) -> tuple[int, str]:
        # fnmatch's `*` also matches `/`, as git's pathspecs do: the same files rank as matched.
        for position, pattern in enumerate(REQUIREMENT_FILES):
            if fnmatchcase(file, pattern):
                return position, file
        return len(REQUIREMENT_FILES), file

    return sorted(found, key=rank)
