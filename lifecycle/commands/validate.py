"""`lifecycle validate`: load every manifest given, report every problem in every file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lifecycle.errors import ManifestError, Problem
from lifecycle.manifest import LoadedManifest, load_manifest
from lifecycle.manifest.checks import unconfirmed_pins
from lifecycle.manifest.digest import manifest_digest
from lifecycle.manifest.source import render_key_path


@dataclass(frozen=True)
class Validation:
    """What one file's validation found: its digest when valid, else its problems; and what
    is valid but needs a person (a pin nobody confirmed)."""

    file: Path
    digest: str | None
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...] = ()


def validate(files: list[Path]) -> list[Validation]:
    """Validate each file independently, so one broken manifest does not hide another."""
    results = []
    for file in files:
        try:
            loaded: LoadedManifest = load_manifest(file)
            warnings = tuple(
                f"{file}: {render_key_path(path)}: {message}; `build` refuses it until you check "
                "the pin and delete this entry"
                for path, message in unconfirmed_pins(loaded.manifest)
            )
            results.append(Validation(file, manifest_digest(loaded), (), warnings))
        except ManifestError as exc:
            results.append(Validation(file, None, tuple(exc.problems)))
    return results
