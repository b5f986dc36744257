"""A build whose RUN step floods its output leaves lifecycle bounded in memory and keeps a
bounded log: its head and tail whole, a marker saying what was left out, the lines of a failing
in-image helper wherever they were. Measured by bench/build_flood.py: a real `lifecycle build`
of demo/0.2 through the real dockerd, on a base whose ONBUILD RUN floods, lifecycle in a child
of its own."""

from __future__ import annotations

import re

import pytest

from bench.build_flood import FAILURE, measure

pytestmark = pytest.mark.docker

MIB = 1024 * 1024
# Lifecycle's own peak is ~85 MiB whatever the step prints; with the whole log held in memory
# it was 1.4 GiB for these 256 MiB of lines and one of 128 MiB, 195 MiB for the failing 40 MiB
# (bench/README.md): a bound between, with room.
PEAK_RSS_MIB = 150
KEPT_BYTES = 12 * MIB  # the kept log's caps (10 MiB in all), with room


def test_a_flooding_step_leaves_lifecycle_bounded_and_keeps_both_ends(
    demo_images: None,
) -> None:
    flood = measure(256, 128)
    summary = {k: v for k, v in flood.items() if k != "error"}
    assert (flood["exit_code"], flood["outcome"]) == (0, "built"), summary
    assert flood["peak_rss_mib"] < PEAK_RSS_MIB, summary
    assert flood["kept_log_bytes"] <= KEPT_BYTES, summary
    assert flood["first_line_kept"].startswith("Step 1/"), summary  # the log's beginning
    assert flood["last_line_kept"] == f"Successfully tagged {flood['tag']}", summary  # its end
    cut = _cut_bytes(flood["cut_markers"])
    assert (256 - 9) * MIB < cut["lines"] < 256 * MIB, summary  # all but the head and tail
    # The line with no newline, left out whole: dockerd's next words ("Removing intermediate
    # container …") go on it, as they do on a terminal.
    assert 128 * MIB <= cut["line"] < 128 * MIB + 1024, summary


def test_a_failing_flooded_step_still_names_its_failure(demo_images: None) -> None:
    flood = measure(32, 8, fail=True)
    summary = {k: v for k, v in flood.items() if k != "error"}
    assert (flood["exit_code"], flood["outcome"]) == (1, "failed"), summary
    assert flood["peak_rss_mib"] < PEAK_RSS_MIB, summary
    # The helper's lines were halfway through the flood, in the part left out: kept all the same.
    explained = [line.removeprefix("lifecycle:").strip() for line in FAILURE]
    assert flood["error"] == "\n  ".join(explained), flood["error"][:2000]
    assert flood["cut_markers"], summary


def _cut_bytes(markers: list[str]) -> dict[str, int]:
    """The bytes the kept log's markers say were left out: of lines, of one long line."""
    lines = [re.search(r"(\d+) bytes in \d+ lines left out", m) for m in markers]
    long = [re.search(r"a line of (\d+) bytes left out", m) for m in markers]
    return {
        "lines": sum(int(m[1]) for m in lines if m),
        "line": max((int(m[1]) for m in long if m), default=0),
    }
