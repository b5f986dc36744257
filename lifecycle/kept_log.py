"""A log as lifecycle keeps it, whatever was printed: an engine's (a boot's), a Dockerfile
step's (a build's). Kept as it comes, line by line, and bounded.

An engine stuck in a loop (vLLM can print one warning per request) or a build step printing
every command writes gigabytes in minutes, and a night boots dozens of engines in one process:
the whole log held in memory took 1.6 GiB of RSS for a boot's 200 MiB of output, 2.7 GiB for a
build's 768 MiB (bench/README.md). So the log's head (how it came up) and its tail (how it
ended) are kept whole, and of the part between only the lines its reader asks to note (a boot:
the lines a verdict reads; a build: its in-image helpers' lines). Both ends and the noted lines
are capped, so the kept log (and what is in memory) stays under `HEAD_BYTES + NOTED_BYTES +
TAIL_BYTES` plus the marker lines; the markers say what was left out, and
`LogCut.noted_left_out` says when a line asked for could not be kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from lifecycle.redact import redact

# Each end of the log kept whole: a real engine's start-up, every compile and JIT line of it,
# is well under a MiB; the tail is what was printed as it failed.
HEAD_BYTES = 4 * 1024 * 1024
TAIL_BYTES = 4 * 1024 * 1024
# The noted lines of the part left out: thousands of compile lines fit.
NOTED_BYTES = 2 * 1024 * 1024
# A line longer than this (a progress bar redrawn with \r and no newline) is left out whole, a
# marker in its place: cutting it would keep half a secret that redaction no longer knows.
LINE_BYTES = 1024 * 1024
CUT = "[lifecycle: log cut:"  # starts every marker line lifecycle writes into a kept log
LONG_LINE = f"{CUT} a line of"
TAIL_FOLLOWS = f"{CUT} the log's last"


class Note(Enum):
    """What becomes of a line of the part of a log left out."""

    NO = "no"  # left out with the rest
    IF_ROOM = "if room"  # kept while the noted lines fit in NOTED_BYTES, else counted
    ALWAYS = "always"  # kept whatever: its reader asks for few such lines


@dataclass(frozen=True)
class LogCut:
    """What of a log was not kept."""

    bytes_left_out: int
    lines_left_out: int
    noted_left_out: int  # lines to note, left out all the same: what reads them is unsure

    def as_json(self) -> dict[str, Any]:
        """As a boot's evidence.json holds it: there the noted lines are the ones a verdict
        reads (its facts), a name every archived bundle carries."""
        return {
            "bytes_left_out": self.bytes_left_out,
            "lines_left_out": self.lines_left_out,
            "fact_lines_left_out": self.noted_left_out,
            "caps": {"head": HEAD_BYTES, "tail": TAIL_BYTES, "noted": NOTED_BYTES},
        }


def long_line(size: int) -> str:
    """The marker kept in place of a line over LINE_BYTES."""
    return f"{LONG_LINE} {size} bytes left out here (over the {LINE_BYTES} a line may hold)]"


class KeptLog:
    """A log's lines as they come, redacted of `secrets` first (None: kept as printed); `note`
    says which lines of the part left out are kept all the same, `noted` what they are."""

    def __init__(
        self,
        note: Callable[[str], Note],
        noted: str,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self._note = note
        self._noted_are = noted
        self._secrets = secrets
        self._head: list[str] = []
        self._tail: deque[tuple[str, int]] = deque()
        self._noted: list[str] = []
        self._sizes = {"head": 0, "tail": 0, "noted": 0}
        self._left_out = [0, 0, 0]  # bytes, lines, noted lines
        self.last = ""  # the line kept last, as kept: what is shown of it

    def add(self, line: str) -> None:
        """Keep one line (`last` is it as kept)."""
        if self._secrets is not None:
            line = redact(line, self._secrets)
        self.last = line
        size = len(line.encode(errors="replace")) + 1
        if line.startswith(LONG_LINE):
            self._left_out[2] += 1  # a line to note may have been in it: unread
        if not self._tail and self._sizes["head"] + size <= HEAD_BYTES:
            self._head.append(line)
            self._sizes["head"] += size
            return
        self._tail.append((line, size))
        self._sizes["tail"] += size
        while self._sizes["tail"] > TAIL_BYTES:
            self._cut(*self._tail.popleft())

    def cut(self) -> LogCut | None:
        """What was left out; None when the whole log is kept."""
        bytes_, lines, noted = self._left_out
        return LogCut(bytes_, lines, noted) if lines or noted else None

    def lines(self) -> list[str]:
        """The log as kept: its head, markers and noted lines of the part left out, its tail."""
        cut, lines = self.cut(), list(self._head)
        if cut is not None and cut.lines_left_out:
            lines.append(
                f"{CUT} {cut.bytes_left_out} bytes in {cut.lines_left_out} lines left out here; "
                f"of them, the {len(self._noted)} {self._noted_are} follow "
                f"({cut.noted_left_out} more left out)]"
            )
            lines += self._noted
            lines.append(f"{TAIL_FOLLOWS} {self._sizes['tail']} bytes follow]")
        lines += (line for line, _ in self._tail)
        return lines

    def text(self) -> str:
        """The log as kept, one text."""
        return "\n".join(self.lines()) + "\n"

    def _cut(self, line: str, size: int) -> None:
        self._sizes["tail"] -= size
        self._left_out[0] += size
        self._left_out[1] += 1
        note = self._note(line)
        if note is Note.NO:
            return
        if note is Note.ALWAYS or self._sizes["noted"] + size <= NOTED_BYTES:
            self._noted.append(line)
            self._sizes["noted"] += size
        else:
            self._left_out[2] += 1


class Lines:
    """A stream's lines from the pieces it comes in, cut at each newline only, in time linear in
    its size: a progress bar redrawn with \\r sends megabytes without a newline, and joining
    each piece onto all before it was quadratic. Past LINE_BYTES a line's pieces are only
    counted: a line is held whole or not at all, `long_line`'s marker in its place."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._size = 0

    def feed(self, piece: bytes) -> list[str]:
        """The lines `piece` ends."""
        *ended, rest = piece.split(b"\n")
        lines = []
        for line in ended:
            lines.append(self._line(line, self._size + len(line)))
            self._pending, self._size = [], 0
        if rest and self._size + len(rest) <= LINE_BYTES:
            self._pending.append(rest)
        self._size += len(rest)
        return lines

    def end(self) -> str | None:
        """The stream's last line, when it ended without a newline."""
        return self._line(b"", self._size) if self._size else None

    def _line(self, last: bytes, size: int) -> str:
        if size > LINE_BYTES:
            return long_line(size)
        return b"".join([*self._pending, last]).decode(errors="replace")


def is_cut(text: str) -> bool:
    """Whether a kept log left anything out: a line looked for and not found in it may be in
    what was left out."""
    return CUT in text


def latest_part(text: str) -> str:
    """The part of a kept log that holds the newest of its lines whole: its tail when it was
    cut (a value printed again and again is, in the head, an old one), else all of it."""
    at = text.rfind(TAIL_FOLLOWS)
    return text if at < 0 else text[at:]
