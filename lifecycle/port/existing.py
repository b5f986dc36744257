"""A NEW that already exists: replaced only with `--force`, and what it validated is kept.

A release directory that exists (in the working tree or at HEAD) may hold values someone
measured on that release. A port writes every tuned value of OLD as `carried`; over an
existing release that would quietly turn measurements into guesses. So the port refuses
unless `--force`, and then keeps every tuned value NEW's own manifest.yaml marks
`validated` (measurement included), in place of OLD's carried one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from lifecycle.errors import LifecycleError
from lifecycle.manifest.model import TunedValue
from lifecycle.port.branch import Repository, in_repository
from lifecycle.port.git import Git

MANIFEST = "manifest.yaml"


@dataclass(frozen=True)
class Existing:
    """A NEW already there: where it was found, and the tuned values it validated."""

    where: str
    validated: dict[str, TunedValue]


def find_existing(
    new_dir: Path, repo: Repository | None, committed: dict[str, str]
) -> Existing | None:
    """NEW's directory in the working tree or at HEAD (`committed`: branch.head_entries of
    it), if either has it."""
    text: str | None = None
    where = label = None
    if new_dir.is_dir() and any(new_dir.iterdir()):
        where = label = str(new_dir)
        if (new_dir / MANIFEST).is_file():
            where = label = str(new_dir / MANIFEST)
            text = (new_dir / MANIFEST).read_text()
    name = in_repository(repo, new_dir) if repo is not None else None
    if repo is not None and name is not None and name in committed:
        where = where or f"{name}/ at HEAD"
        if text is None:
            label = f"{name}/{MANIFEST} at HEAD"
            shown = Git.user(repo.root).run(
                "cat-file", "blob", f"{repo.head}:{name}/{MANIFEST}", check=False
            )
            text = shown.out if shown.rc == 0 else None
    if where is None:
        return None
    return Existing(where, _validated(text, str(label)) if text is not None else {})


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
