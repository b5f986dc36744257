"""The night's HTML report, rendered by a real headless browser (Debian's chromium).

The report is built from a journal as a night writes it (cells with runs, production events, a
ladder's rungs on two pins), rendered to HTML, and opened by chromium twice: once with a small
probe script appended to a copy (it measures the laid-out table and chart and writes what it
found into the DOM, which `--dump-dom` prints), once for a screenshot. The report itself must
hold no script, no stylesheet link and nothing fetched from anywhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle.ledger import Ledger
from lifecycle.night.cells import cells
from lifecycle.night.engine import RunSummary
from lifecycle.night.journal import NightJournal
from lifecycle.night.plan import load_plan
from lifecycle.night.publish import render_html
from lifecycle.night.view import NightView, night_view

REPO = Path(__file__).resolve().parent.parent
PROBE = """<script>
const table = document.querySelector("table.matrix");
const chart = document.querySelector("svg.ladder-chart");
const series = [...chart.querySelectorAll("polyline.series")];
document.body.dataset.measured = JSON.stringify({
  rows: table.rows.length,
  tableHeight: table.getBoundingClientRect().height,
  chartWidth: chart.getBoundingClientRect().width,
  chartHeight: chart.getBoundingClientRect().height,
  floor: chart.querySelector("line.floor").getBoundingClientRect().width,
  series: series.map(s => [s.dataset.pin, s.dataset.state, Math.round(s.getTotalLength())]),
});
</script>"""
# What the demo engine measures at the forced 64-prompt step (tests/test_demo_night_engine.py).
MARGINS = {
    "demo/0.1": {0.9: (1684.4, 1708.4), 0.91: (865.2, 889.2), 0.92: (46.0, 70.0)},
    "demo/0.2": {0.9: (1608.6, 1632.6), 0.91: (789.4, 813.4), 0.92: (-29.8, -5.8)},
}


def chromium() -> str:
    """The browser; under CI its absence fails the test (.ci/setup installs it)."""
    found = shutil.which("chromium")
    if found is None:
        message = "chromium not installed (apt-get install chromium; .ci/setup does)"
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def browse(page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", *flags, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def summary(cell: str, verdict: str, margin: float | None = None) -> RunSummary:
    return RunSummary(
        cell=cell, run=1, attempt=1, boot_id=f"b-{abs(hash(cell)) % 10**6}", host="vm",
        outcome="ok" if verdict == "pass" else "failed", exit_code=0, instrumented=False,
        hooks=[], args=[], verdict=verdict, checks=[], margin_mib=margin,
        log=f"/var/lib/lifecycle/evidence/boots/{cell}.log",
        evidence=f"/var/lib/lifecycle/evidence/boots/{cell}",
    )  # fmt: skip


@pytest.fixture
def view(tmp_path: Path) -> NightView:
    """A demo night as its journal would hold it, part of the matrix and the whole ladder."""
    loaded = load_plan(REPO / "nights/demo.yaml")
    start = datetime(2026, 10, 10, 1, tzinfo=UTC)
    ticks = iter(range(100_000))

    def stamp() -> str:
        return (start + timedelta(seconds=next(ticks))).isoformat(timespec="milliseconds")

    journal = NightJournal.begin(Ledger.open(tmp_path / "home"), loaded, "night", REPO, stamp)
    journal.event("production.down:intent", "production-down")
    journal.event("production.down:done", "production-down")
    for cell in cells(loaded.plan):
        if cell.rung is not None:
            cold, warm = MARGINS[cell.pin][cell.rung.value]
            margin = cold if cell.state == "cold" else warm
            journal.done(summary(cell.id, "pass" if margin >= 40 else "fail", margin))
        elif cell.workload == "forced":
            journal.done(summary(cell.id, "pass" if cell.pin == "demo/0.1" else "fail"))
    journal.event("production.up:intent", "production-up")
    journal.event("production.up:done", "production-up")
    return night_view(journal, loaded.plan, cells(loaded.plan), "docker", None)


def test_the_report_renders_in_chromium_with_its_table_and_chart(
    view: NightView, tmp_path: Path
) -> None:
    html = render_html(view, "s3://bucket/nights")
    assert "<script" not in html and "<link" not in html and " src=" not in html
    assert not re.findall(r'href="https?://', html)  # links are to evidence, never the network
    page = tmp_path / "report.html"
    page.write_text(html)
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("</body>", PROBE + "</body>"))

    dom = browse(probed, "--dump-dom").stdout
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found is not None, dom[-2000:]
    measured = json.loads(found[1].replace("&quot;", '"'))
    assert measured["rows"] == 1 + 2 * 4  # a header, then 2 pins x 4 profiles
    assert measured["tableHeight"] > 100
    assert measured["chartWidth"] == 760 and measured["chartHeight"] == 380
    assert measured["floor"] > 400
    lines = {(pin, state) for pin, state, length in measured["series"] if length > 100}
    assert lines == {
        (pin, state) for pin in ("demo/0.1", "demo/0.2") for state in ("warm", "cold", "predicted")
    }

    shot = tmp_path / "report.png"
    browse(page, f"--screenshot={shot}", "--window-size=1200,2400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert missing_glyphs(html) == []  # none drawn as a box by the fonts chromium has here


def missing_glyphs(html: str) -> list[str]:
    """The characters beyond ASCII in `html` that no installed font has (fontconfig's view,
    which is chromium's): each would be drawn as an empty box."""
    if shutil.which("fc-list") is None:
        pytest.skip("fontconfig's fc-list not installed (chromium depends on it)")
    return [
        f"{char} U+{ord(char):04X}"
        for char in sorted({c for c in html if ord(c) > 127})
        if not subprocess.run(
            ["fc-list", f":charset={ord(char):x}", "family"], capture_output=True, text=True
        ).stdout.strip()
    ]


def test_the_report_says_what_the_night_found(view: NightView) -> None:
    html = render_html(view, None)
    assert (
        view.production is not None and view.production.downtime_s == 19.0
    )  # a second a journal row
    assert "Downtime 19.0 s, measured from the production hooks; production is up" in html
    assert "0.91 ← chosen" in html and "0.92 ← chosen" in html
    assert "0.92 clears 40 MiB (46.0 MiB cold, 70.0 MiB warm)" in html
    assert "-29.8 (-49.8)" in html  # measured, and how far under its prediction (20 MiB)
    ladder = view.ladders[0]
    assert [p.chosen for p in ladder.pins] == [0.92, 0.91]
