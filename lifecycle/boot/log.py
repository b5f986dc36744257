"""A boot's engine log as it is kept: redacted line by line as it comes, bounded whatever the
engine prints.

An engine stuck in a loop (vLLM can print one warning per request) writes gigabytes in
minutes, and a night boots dozens of engines in one process: the whole log held in memory
took 1.6 GiB of RSS for 200 MiB of output (bench/README.md). So a boot keeps the log's head
(how the engine came up: its compile, JIT and cache lines) and its tail (how it ended) whole,
and of the part between only the lines a verdict reads: the lines `parse_boot_log` takes facts
from, and the first line naming each cache's path (`log_names` asks only whether one does).
Both ends and the kept middle lines are capped, so the kept log (and what is in memory) stays
under `HEAD_BYTES + NOTED_BYTES + TAIL_BYTES` plus the marker lines; the markers say what was
left out, and `LogCut.fact_lines_left_out` says when a verdict read from the log cannot be
trusted (`evidence.json` then says `inconclusive`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lifecycle.evidence.bundle import is_fact_line
from lifecycle.evidence.verdict import log_names
from lifecycle.redact import redact

# Each end of the log kept whole: a real engine's start-up, every compile and JIT line of it,
# is well under a MiB; the tail is what an engine said as it failed.
HEAD_BYTES = 4 * 1024 * 1024
TAIL_BYTES = 4 * 1024 * 1024
# The lines of the part left out that a verdict reads: thousands of compile lines fit.
NOTED_BYTES = 2 * 1024 * 1024
# A line longer than this (a progress bar redrawn with \r and no newline) is left out whole, a
# marker in its place: cutting it would keep half a secret that redaction no longer knows.
LINE_BYTES = 1024 * 1024
CUT = "[lifecycle: log cut:"  # starts every marker line lifecycle writes into a kept log
LONG_LINE = f"{CUT} a line of"
TAIL_FOLLOWS = f"{CUT} the log's last"


@dataclass(frozen=True)
class LogCut:
    """What of a boot's log was not kept."""

    bytes_left_out: int
    lines_left_out: int
    fact_lines_left_out: int  # lines a verdict reads, left out all the same: it is unsure

    def as_json(self) -> dict[str, Any]:
        return {
            "bytes_left_out": self.bytes_left_out,
            "lines_left_out": self.lines_left_out,
            "fact_lines_left_out": self.fact_lines_left_out,
            "caps": {"head": HEAD_BYTES, "tail": TAIL_BYTES, "noted": NOTED_BYTES},
        }


def long_line(size: int) -> str:
    """The marker kept in place of a line over LINE_BYTES."""
    return f"{LONG_LINE} {size} bytes left out here (over the {LINE_BYTES} a line may hold)]"


class BootLog:
    """The engine's lines, redacted of `secrets` as they come; `watched`: the caches' paths
    in the container, whose first naming line is kept wherever it is."""

    def __init__(self, secrets: Mapping[str, str], watched: Sequence[str] = ()) -> None:
        self._secrets = line_secrets(secrets)
        self._watched = list(watched)
        self._head: list[str] = []
        self._tail: deque[tuple[str, int]] = deque()
        self._noted: list[str] = []
        self._sizes = {"head": 0, "tail": 0, "noted": 0}
        self._left_out = [0, 0, 0]  # bytes, lines, fact lines
        self.last = ""  # the line kept last, as kept: what a boot shows of it

    def add(self, line: str) -> None:
        """Keep one line of the engine's output (`last` is it as kept)."""
        self.last = line = redact(line, self._secrets)
        size = len(line.encode(errors="replace")) + 1
        if line.startswith(LONG_LINE):
            self._left_out[2] += 1  # a fact may have been in it: unread
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
        bytes_, lines, facts = self._left_out
        return LogCut(bytes_, lines, facts) if lines or facts else None

    def text(self) -> str:
        """The log as kept: its head, markers and kept lines of the part left out, its tail."""
        cut, lines = self.cut(), list(self._head)
        if cut is not None and cut.lines_left_out:
            lines.append(
                f"{CUT} {cut.bytes_left_out} bytes in {cut.lines_left_out} lines left out here; "
                f"of them, the {len(self._noted)} lines a verdict reads follow "
                f"({cut.fact_lines_left_out} more left out)]"
            )
            lines += self._noted
            lines.append(f"{TAIL_FOLLOWS} {self._sizes['tail']} bytes follow]")
        lines += (line for line, _ in self._tail)
        return "\n".join(lines) + "\n"

    def _cut(self, line: str, size: int) -> None:
        self._sizes["tail"] -= size
        self._left_out[0] += size
        self._left_out[1] += 1
        fresh = [p for p in self._watched if log_names([line], p)]
        if fresh:  # the cache is named: later lines naming it change no verdict
            self._watched = [p for p in self._watched if p not in fresh]
        elif not is_fact_line(line):
            return
        if fresh or self._sizes["noted"] + size <= NOTED_BYTES:
            self._noted.append(line)
            self._sizes["noted"] += size
        else:
            self._left_out[2] += 1


def is_cut(text: str) -> bool:
    """Whether a kept log left anything out: a line looked for and not found in it may be in
    what was left out."""
    return CUT in text


def latest_part(text: str) -> str:
    """The part of a kept log that holds the newest of its lines whole: its tail when it was
    cut (a value printed again and again is, in the head, an old one), else all of it."""
    at = text.rfind(TAIL_FOLLOWS)
    return text if at < 0 else text[at:]


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
