"""The engine's log as a boot reads it (lifecycle.boot.engine.run_container): cut into lines at
each newline only, in time linear in its size, a line over LINE_BYTES left out; and as it keeps
it (lifecycle.boot.log, a lifecycle.kept_log): redacted line by line, bounded whatever the
engine prints. No Docker: the container is a stand-in that yields the log in dockerd's frames."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from lifecycle.boot.engine import run_container
from lifecycle.boot.log import boot_log
from lifecycle.evidence.bundle import parse_boot_log
from lifecycle.kept_log import (
    CUT,
    HEAD_BYTES,
    LINE_BYTES,
    NOTED_BYTES,
    TAIL_BYTES,
    KeptLog,
    is_cut,
    latest_part,
    long_line,
)


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
    # Over the 1 MiB a line may hold, it is left out whole, a marker naming its size in its place.
    assert kept == [long_line(30_000 * 1024)]


def test_a_line_up_to_the_cap_is_kept_whole_and_the_next_is_read_as_usual() -> None:
    line = b"y" * LINE_BYTES
    frames = [line[:1000], line[1000:] + b"\nafter\n", b"z" * (LINE_BYTES + 1), b"\nlast"]
    assert _read(frames) == [line.decode(), "after", long_line(LINE_BYTES + 1), "last"]


# --- what a boot keeps of the log (lifecycle.boot.log) -------------------------------------------

SECRET = "s3cr3t-value-0123"
FLOOD = f"WARNING request preempted (token {SECRET}) " + "." * 150


def _flooded(lines: int, middle: tuple[str, ...] = (), watched: tuple[str, ...] = ()) -> KeptLog:
    log = boot_log({"HF_TOKEN": SECRET}, watched)
    log.add("engine up")
    for n in range(lines):
        log.add(FLOOD)
        if n == lines // 2:
            for line in middle:
                log.add(line)
    log.add("engine done")
    return log


def test_a_flood_keeps_its_head_and_tail_and_says_how_much_was_left_out() -> None:
    lines = 60_000  # ~11 MiB: more than head and tail together
    log = _flooded(lines)
    text = log.text()
    cut = log.cut()
    assert cut is not None and cut.noted_left_out == 0
    kept = len(text.encode())
    assert kept <= HEAD_BYTES + TAIL_BYTES + 1024
    assert text.startswith("engine up\n") and text.endswith("engine done\n")
    marker = next(line for line in text.splitlines() if line.startswith(CUT))
    assert f"{cut.bytes_left_out} bytes in {cut.lines_left_out} lines left out here" in marker
    line = len(FLOOD.replace(SECRET, "<redacted:HF_TOKEN>")) + 1
    assert kept - len(marker) + cut.bytes_left_out == pytest.approx((lines + 2) * line, rel=0.01)
    assert SECRET not in text and "<redacted:HF_TOKEN>" in text
    assert is_cut(text) and latest_part(text).startswith(CUT)


def test_a_short_log_is_kept_whole_and_not_cut() -> None:
    log = _flooded(10)
    assert log.cut() is None and not is_cut(log.text())
    assert log.text().count("\n") == 12 and latest_part(log.text()) == log.text()


def test_lines_a_verdict_reads_are_kept_from_the_part_left_out() -> None:
    facts = [
        "Compiling a graph for dynamic shape takes 3.2 s",
        "Loading JIT ops: norm_kernel",
        "reading /var/cache/lifecycle/vllm/abc/model.so",
    ]
    log = _flooded(60_000, tuple(facts), watched=("/var/cache/lifecycle/vllm",))
    cut = log.cut()
    assert cut is not None and cut.noted_left_out == 0
    kept = log.text().splitlines()
    assert all(line in kept for line in facts)
    facts_read = parse_boot_log(log.text())
    assert facts_read.graph_compiles_s == [3.2] and facts_read.jit_modules_loaded == ["norm_kernel"]


def test_fact_lines_over_their_cap_make_the_log_alone_unsure() -> None:
    """A flood of lines a verdict reads: past NOTED_BYTES they are counted, not kept, and what
    the log alone says of the boot is inconclusive, not a guess from what was kept."""
    log = boot_log({})
    for _ in range(100_000):  # ~13 MiB of one compile line
        log.add("Compiling a graph for dynamic shape takes 3.2 s" + " " * 80)
    cut = log.cut()
    assert cut is not None and cut.noted_left_out > 0
    assert len(log.text().encode()) <= HEAD_BYTES + TAIL_BYTES + NOTED_BYTES + 1024


def test_a_secret_spanning_lines_is_redacted_line_by_line() -> None:
    pem = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAo\n-----END KEY-----"
    log = boot_log({"TLS_KEY": pem})
    for line in ("key follows:", *pem.splitlines(), "done"):
        log.add(line)
    text = log.text()
    assert all(piece not in text for piece in pem.splitlines()[1:3])
    assert "<redacted:TLS_KEY~2>" in text
