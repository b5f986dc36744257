"""Error families the CLI renders as one line each, with the exit code of their family.

| exit | meaning                                                                        |
|------|--------------------------------------------------------------------------------|
| 0    | ok                                                                             |
| 1    | the answer is no: differs, conflicts, engine failed, not archived, refused     |
| 2    | bad input or usage: a manifest, a flag, a record that does not parse           |
| 3    | the environment failed: Docker or S3 unreachable or too slow, home unusable    |
| 4    | an unexpected error (a bug): one line, the traceback written to a file         |
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
EXIT_NO = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERNAL = 4

EXIT_CODES = (
    (EXIT_OK, "ok"),
    (EXIT_NO, "the answer is no: differs, conflicts, engine failed, not archived, refused"),
    (EXIT_USAGE, "bad input or usage: a manifest, a flag, a record that does not parse"),
    (
        EXIT_ENVIRONMENT,
        "the environment failed: Docker or S3 unreachable or too slow, home unusable",
    ),
    (EXIT_INTERNAL, "an unexpected error: one line here, the traceback in a file it names"),
)


class LifecycleError(Exception):
    """Base of every error a user can act on; the CLI prints it without a traceback."""

    exit_code = EXIT_USAGE

    def lines(self) -> list[str]:
        """The message as the lines the CLI prints."""
        return [str(self)]


class AnswerNo(LifecycleError):
    """The command ran, and the answer is no (exit 1)."""

    exit_code = EXIT_NO


class EnvironmentFailure(LifecycleError):
    """Something the tool needs is not there or does not answer in time (exit 3)."""

    exit_code = EXIT_ENVIRONMENT


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
