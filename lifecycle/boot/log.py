"""A boot's engine log as it is kept (lifecycle.kept_log): redacted line by line as it comes,
bounded whatever the engine prints; of the part left out, the lines a verdict reads are kept.

Those are the lines `parse_boot_log` takes facts from, and the first line naming each cache's
path (`log_names` asks only whether one does). When lines a verdict reads had to be left out
too (`LogCut.noted_left_out`), a verdict read from the log cannot be trusted (`evidence.json`
then says `inconclusive`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from lifecycle.evidence.bundle import is_fact_line
from lifecycle.evidence.verdict import log_names
from lifecycle.kept_log import KeptLog, Note


def boot_log(secrets: Mapping[str, str], watched: Sequence[str] = ()) -> KeptLog:
    """The engine's log, redacted of `secrets` as it comes; `watched`: the caches' paths in
    the container, whose first naming line is kept wherever it is."""
    return KeptLog(_verdict_lines(watched), "lines a verdict reads", line_secrets(secrets))


def _verdict_lines(watched: Sequence[str]) -> Callable[[str], Note]:
    """What to note of the part left out: the first line naming each watched path, whatever
    its size; the lines a verdict reads, while they fit."""
    unnamed = list(watched)

    def note(line: str) -> Note:
        fresh = [p for p in unnamed if log_names([line], p)]
        if fresh:  # the cache is named: later lines naming it change no verdict
            unnamed[:] = [p for p in unnamed if p not in fresh]
            return Note.ALWAYS
        return Note.IF_ROOM if is_fact_line(line) else Note.NO

    return note


def line_secrets(secrets: Mapping[str, str]) -> dict[str, str]:
    """`secrets`, and each line of a value that spans lines as a secret of its own: redacted
    one line at a time, a key printed whole (a PEM) would otherwise be kept line by line."""
    pieces = {
        f"{name}~{i}": piece
        for name, value in secrets.items()
        if "\n" in value.strip()
        for i, piece in enumerate(value.strip().splitlines(), start=1)
        if piece.strip()
    }
    return {**secrets, **pieces}
