"""`lifecycle validate`: load every manifest given, report every problem in every file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import (
    EXIT_OK,
    EXIT_USAGE,
    LifecycleError,
    ManifestError,
    path_fault,
    problem_lines,
)
from lifecycle.manifest import LoadedManifest, load_manifest
from lifecycle.manifest.checks import unconfirmed_pins
from lifecycle.manifest.load import MANIFEST_NAME, manifest_digest
from lifecycle.manifest.source import render_key_path
from lifecycle.report import Report


@dataclass(frozen=True)
class Validation:
    """What one file's validation found: its digest when valid, else its problems; and what
    is valid but needs a person (a pin nobody confirmed)."""

    file: Path
    digest: str | None
    problems: tuple[str, ...]  # `file:line:col: key: message`, the form editors read
    warnings: tuple[str, ...] = ()  # a pin the port could not derive, still unconfirmed


@dataclass(frozen=True)
class ValidateReport(Report):
    """Every file given, valid or not."""

    FORMAT: ClassVar[str] = "lifecycle-validate/1"
    files: tuple[Validation, ...]

    @property
    def exit_code(self) -> int:
        return EXIT_USAGE if any(v.problems for v in self.files) else EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(
            line
            for v in self.files
            for line in (*v.problems, *(f"warning: {w}" for w in v.warnings))
        )

    def to_json(self) -> dict[str, Any]:
        document = super().to_json()
        for entry, validation in zip(document["files"], self.files, strict=True):
            entry["valid"] = not validation.problems
        return document

    def text(self) -> str:
        """`ok FILE sha256:DIGEST` per valid file (the problems go to stderr)."""
        return "".join(f"ok {v.file} sha256:{v.digest}\n" for v in self.files if not v.problems)


def run(ctx: Context, request: verbs.Validate) -> ValidateReport:
    """Validate each file independently (default: every manifest under the manifests dir, nested
    ones such as `demo/0.2` included), so one broken manifest does not hide another."""
    files = [file for path in request.paths for file in _manifests_in(path, ctx.manifests_dir)]
    files = files or _manifests_under(ctx.manifests_dir)
    if not files:
        raise LifecycleError(f"no manifests found under {ctx.manifests_dir}")
    found = []
    for file in files:
        try:
            loaded: LoadedManifest = load_manifest(file)
            warnings = tuple(
                f"{file}: {render_key_path(path)}: {message}; `build` refuses it until you check "
                "the pin and delete this entry"
                for path, message in unconfirmed_pins(loaded.manifest)
            )
            found.append(Validation(file, manifest_digest(loaded), (), warnings))
        except ManifestError as exc:
            found.append(Validation(file, None, tuple(problem_lines(exc.problems))))
    return ValidateReport(tuple(found))


def _manifests_in(path: Path, manifests_dir: Path) -> list[Path]:
    """A file as it is; a dir, as `show` takes it: its manifest.yaml, else every one under it
    (none: the dir is reported as the file it is, a problem); a ref that is no path
    (`demo/0.2`), as build takes it. A path nothing can be read at is a file that cannot be
    read, reported as such."""
    as_ref = manifests_dir / path / MANIFEST_NAME
    if not os.path.lexists(path) and not path_fault(as_ref) and as_ref.is_file():
        return [as_ref]
    if path_fault(path) or not path.is_dir():
        return [path]
    if (path / MANIFEST_NAME).is_file():
        return [path / MANIFEST_NAME]
    return _manifests_under(path) or [path]


def _manifests_under(directory: Path) -> list[Path]:
    """Every manifest.yaml under `directory`, a dangling or looping symlink by that name too
    (reported then as the file it cannot read): Path.glob leaves those out, unseen."""
    found = (
        Path(root) / MANIFEST_NAME
        for root, _, names in os.walk(directory)
        if MANIFEST_NAME in names
    )
    return sorted(found)
