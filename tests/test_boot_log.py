"""The engine's log as a boot reads it (lifecycle.boot.engine.run_container): every byte, cut
into lines at each newline only, in time linear in its size. No Docker: the container is a
stand-in that yields the log in the frames dockerd sends."""

from __future__ import annotations

import time
from collections.abc import Iterator

from lifecycle.boot.engine import run_container


class _Container:
    """Yields `frames` as its log, then exits 0."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames

    def start(self) -> None:
        pass

    def logs(self, **_: object) -> Iterator[bytes]:
        return iter(self.frames)

    def wait(self) -> dict[str, int]:
        return {"StatusCode": 0}

    def stop(self, timeout: int = 10) -> None:
        pass


def _read(frames: list[bytes]) -> list[str]:
    kept: list[str] = []
    code, stopped = run_container(_Container(frames), None, kept.append, lambda line: None)
    assert (code, stopped) == (0, False)
    return kept


def test_lines_are_cut_at_newlines_whatever_the_frames() -> None:
    frames = [b"one\ntw", b"o", b"\n", b"three\nfour\n\nfive"]
    assert _read(frames) == ["one", "two", "three", "four", "", "five"]


def test_a_log_without_newlines_is_read_in_time_linear_in_its_size() -> None:
    """A progress bar redrawn with `\\r` sends megabytes without a newline; each frame joined
    onto all before it and split again cost a boot 88 s for 50 MiB of it (the engine's own
    run: under a second)."""
    frames = [b"\r" + b"x" * 1023] * 30_000  # 30 MiB in dockerd's 1 KiB frames
    started = time.monotonic()
    kept = _read(frames)
    assert time.monotonic() - started < 5
    assert kept == [b"".join(frames).decode()]
