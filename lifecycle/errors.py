"""Error families the CLI renders as one line each, exit code 2, no traceback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class LifecycleError(Exception):
    """Base of every error a user can act on; the CLI prints it without a traceback."""

    exit_code = 2

    def lines(self) -> list[str]:
        """The message as the lines the CLI prints."""
        return [str(self)]


@dataclass(frozen=True)
class Problem:
    """One fault in one file, located as precisely as the YAML lets us."""

    file: Path
    line: int
    col: int
    key_path: str
    message: str

    def render(self) -> str:
        """`path:line:col: key.path: message`, the form editors and CI annotators parse."""
        return f"{self.file}:{self.line}:{self.col}: {self.key_path}: {self.message}"


class ManifestError(LifecycleError):
    """A manifest that cannot be loaded; carries every problem found, each located."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))

    def lines(self) -> list[str]:
        return [p.render() for p in self.problems]
