"""`lifecycle validate`: load every manifest given, report every problem in every file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lifecycle.errors import ManifestError, Problem
from lifecycle.manifest import LoadedManifest, load_manifest
from lifecycle.manifest.digest import manifest_digest


@dataclass(frozen=True)
class Validation:
    """What one file's validation found: its digest when valid, else its problems."""

    file: Path
    digest: str | None
    problems: tuple[Problem, ...]


def validate(files: list[Path]) -> list[Validation]:
    """Validate each file independently, so one broken manifest does not hide another."""
    results = []
    for file in files:
        try:
            loaded: LoadedManifest = load_manifest(file)
            results.append(Validation(file, manifest_digest(loaded), ()))
        except ManifestError as exc:
            results.append(Validation(file, None, tuple(exc.problems)))
    return results
