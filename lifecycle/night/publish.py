"""A night's report, written beside its ledger and archived with its results.

`$LIFECYCLE_HOME/nights/<night>/report.html` and `report.json` (the JSON `lifecycle night
--json` prints, format `lifecycle-night/1`), written again whenever the night runs again. At
the archive location each writing is its own pair of objects under
`nights/<night>/<UTC time>-<6 hex>/`, created only if absent: the archive is append-only,
and the newest revision of a night's report is the last one listed.

The HTML page is self-contained (no script, no stylesheet, nothing fetched) and reads top to
bottom: the pins' verdicts, production's downtime, where an observer changed the outcome, the
matrix (pins x profiles x cache states, each run linking its boot's evidence), then each
ladder as a chart and a table of predicted against measured margins.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from lifecycle.archive.store import BlobStore
from lifecycle.home import Home, write_atomic
from lifecycle.night.chart import ladder_chart
from lifecycle.night.engine import RunSummary
from lifecycle.night.ladder import LadderView
from lifecycle.night.view import CellView, NightView, ReportPlaces

FORMAT = "lifecycle-night/1"


def report_json(view: NightView) -> dict[str, object]:
    """The report as JSON data, its format first."""
    return {"format": FORMAT, **view.model_dump(mode="json")}


def publish(view: NightView, home: Home, store: BlobStore | None) -> NightView:
    """Write the report's two files (and archive them when there is an archive); the view with
    where they are."""
    directory = home.night_dir(view.id)
    directory.mkdir(parents=True, exist_ok=True)
    revision = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    html_key = store.location.key("nights", view.id, revision, "report.html") if store else None
    json_key = store.location.key("nights", view.id, revision, "report.json") if store else None
    places = ReportPlaces(
        html_file=str(directory / "report.html"),
        json_file=str(directory / "report.json"),
        archived_html=store.url(html_key) if store and html_key else None,
        archived_json=store.url(json_key) if store and json_key else None,
    )
    view = view.model_copy(update={"report": places})
    html = render_html(view, view.archive).encode()
    document = (json.dumps(report_json(view), indent=1) + "\n").encode()
    write_atomic(Path(places.html_file), html)
    write_atomic(Path(places.json_file), document)
    if store is not None and html_key and json_key:
        store.put_document(json_key, document, only_new=True)
        store.put_document(html_key, html, content_type="text/html; charset=utf-8", only_new=True)
    return view


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; } caption { text-align: left; color: #555; }
th, td { border: 1px solid #ccc; padding: .3em .6em; vertical-align: top; text-align: left; }
th { background: #f4f4f4; } code { font-size: .92em; } .meta { color: #555; }
.pass { background: #dff3df; } .fail { background: #f8dcdc; }
.inconclusive { background: #fbefc9; } .pending { background: #eee; }
.verdict { font-weight: 600; } .runs a { margin-right: .35em; } .why { color: #444; }
.callout { border-left: 4px solid #d62728; background: #fdf1f1; padding: .5em 1em; }
td.instrumented { background-image: repeating-linear-gradient(45deg, transparent 0 6px,
  rgba(0,0,0,.05) 6px 12px); }
"""


def render_html(view: NightView, archive: str | None) -> str:
    """The page. `archive`: the archive location, to name the results' records in S3."""
    title = f"{view.kind} {view.id}: {view.plan}"
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">{escape(view.state)}; started {escape(view.started_at)} on'
        f" {escape(view.host)}, cells run on {escape(view.engine)}; plan"
        f" <code>{escape(view.plan_file)}</code> sha256:{view.plan_digest[:12]}</p>",
        *_pins(view),
        *_production(view),
        *_disagreements(view),
        *_matrix(view, archive),
        *(_ladder(ladder, view) for ladder in view.ladders),
        *_end(view),
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _pins(view: NightView) -> list[str]:
    rows = [
        f'<tr><td>{escape(p.pin)}</td><td class="verdict {p.verdict}">{p.verdict}</td>'
        f'<td>{p.cells}</td><td class="why">{escape(p.why)}</td></tr>'
        for p in view.pins
    ]
    return [
        '<h2 id="pins">Pins</h2><table class="pins"><caption>Counted: plain cells of the matrix'
        " (instrumented cells and ladder rungs are shown, never counted)</caption>"
        "<tr><th>pin</th><th>verdict</th><th>cells</th><th>why</th></tr>",
        *rows,
        "</table>",
    ]


def _production(view: NightView) -> list[str]:
    production = view.production
    if production is None:
        return []
    lines = []
    for interval in production.intervals:
        until = interval.up_at or "NOT BROUGHT BACK"
        took = f" ({_duration(interval.seconds)})" if interval.seconds is not None else ""
        lines.append(f"<li>down {escape(interval.down_at)} → up {escape(until)}{took}</li>")
    state = "up" if production.up else "DOWN"
    return [
        '<h2 id="production">Production</h2>',
        f'<p class="downtime">Downtime {_duration(production.downtime_s)}, measured from the'
        f" production hooks; production is {state} (last: {escape(production.last_event or '-')})."
        "</p>",
        f"<ul>{''.join(lines)}</ul>",
    ]


def _disagreements(view: NightView) -> list[str]:
    if not view.disagreements:
        return []
    items = "".join(f"<li>{escape(d.text)}</li>" for d in view.disagreements)
    return [
        '<h2 id="observers">Observers that voted</h2>',
        f'<div class="callout"><ul>{items}</ul><p>An observing hook changes the engine it'
        " watches; its runs are shown and not counted.</p></div>",
    ]


def _matrix(view: NightView, archive: str | None) -> list[str]:
    cells = [c for c in view.cells if not c.workload.count("=")]
    if not cells:
        return []
    states = [s for s in ("cold", "warm") if any(c.state == s for c in cells)]
    variants = [
        (s, i)
        for s in states
        for i in (False, True)
        if any(c.state == s and c.instrumented == i for c in cells)
    ]
    header = "".join(f"<th>{s}{' (instrumented)' if i else ''}</th>" for s, i in variants)
    by_place = {(c.pin, c.workload, c.state, c.instrumented): c for c in cells}  # ids are unique
    rows = []
    for pin, workload in dict.fromkeys((c.pin, c.workload) for c in cells):
        created = next((c.created for c in cells if c.pin == pin and c.workload == workload), [])
        label = escape(workload) + "".join(
            f"<br><small>creates: {escape(w)}</small>" for w in created
        )
        tds = []
        for state, instrumented in variants:
            cell = by_place.get((pin, workload, state, instrumented))
            tds.append(_cell(cell, archive) if cell else "<td></td>")
        rows.append(f"<tr><td>{escape(pin)}</td><td>{label}</td>{''.join(tds)}</tr>")
    return [
        '<h2 id="matrix">Matrix</h2><table class="matrix"><caption>Pins x profiles x cache'
        " states; each number links a run's boot log, each check its evidence</caption>"
        f"<tr><th>pin</th><th>profile</th>{header}</tr>",
        *rows,
        "</table>",
    ]


def _cell(cell: CellView, archive: str | None) -> str:
    runs = " ".join(_run_link(run) for run in cell.runs)
    whys = sorted(
        {
            f"{o.verdict.check}: {o.verdict.status}: {o.verdict.why}"
            for r in cell.runs
            for o in r.checks
            if o.verdict.status != "pass"
        }
    )
    details = ""
    if whys:
        items = "".join(f"<li>{escape(w)}</li>" for w in whys)
        details = f"<details><summary>why</summary><ul>{items}</ul></details>"
    results = [o.result_id for r in cell.runs for o in r.checks if o.result_id]
    records = ""
    if archive and results:
        more = " …" if len(results) > 2 else ""
        shown = escape(", ".join(results[:2])) + more
        records = f'<small title="{escape(archive)}/results/">results: {shown}</small>'
    classes = f"{cell.verdict}{' instrumented' if cell.instrumented else ''}"
    return (
        f'<td class="{classes}" data-cell="{escape(cell.id)}"><span class="verdict">'
        f"{cell.verdict}</span> {cell.passed}/{len(cell.runs)}"
        f'<div class="runs">{runs}</div>{details}{records}</td>'
    )


def _run_link(run: RunSummary) -> str:
    title = f"run {run.run}: {run.verdict}; boot {run.boot_id} {run.outcome}"
    if run.log is None:
        return f'<span title="{escape(title)}">{run.run}</span>'
    evidence = ""
    if run.evidence:
        evidence = f'<a href="file://{escape(run.evidence)}" title="evidence bundle">↗</a>'
    return (
        f'<a class="{run.verdict}" href="file://{escape(run.log)}" title="{escape(title)}">'
        f"{run.run}</a>{evidence}"
    )


def _ladder(ladder: LadderView, view: NightView) -> str:
    rows = []
    for pin in ladder.pins:
        for rung in pin.rungs:
            measured = []
            for state in ("cold", "warm"):
                m = rung.measured.get(state)
                if m is None:
                    measured.append('<td class="pending">-</td>')
                    continue
                margin = "not measured" if m.margin_mib is None else f"{m.margin_mib:.1f}"
                under = (
                    "" if m.under_prediction_mib is None else f" ({-m.under_prediction_mib:+.1f})"
                )
                measured.append(f'<td class="{m.verdict}">{margin}{under}</td>')
            predicted = "-" if rung.predicted_mib is None else f"{rung.predicted_mib:g}"
            chosen = " ← chosen" if pin.chosen == rung.value else ""
            rows.append(
                f"<tr><td>{escape(pin.pin)}</td><td>{rung.value:g}{chosen}</td><td>{predicted}</td>"
                f"{''.join(measured)}<td>{'yes' if rung.clears else 'no'}</td></tr>"
            )
    choices = "".join(
        f"<li><b>{escape(p.pin)}</b>: {escape(p.why)}"
        + (f"; written to <code>{escape(p.written)}</code>" if p.written else "")
        + "</li>"
        for p in ladder.pins
    )
    registered = ""
    if view.predictions and view.predictions.predictions:
        first = view.predictions.predictions[0]
        where = f", archived at {escape(view.predictions.url)}" if view.predictions.url else ""
        registered = (
            f"<p>Predictions registered {escape(first.registered_at)}, before any rung"
            f" ran{where}.</p>"
        )
    return (
        f'<h2 id="ladder-{escape(ladder.argument)}">Ladder: {escape(ladder.argument)}</h2>'
        f"<p>Margin ({escape(ladder.margin)}) at {escape(ladder.shape)}, every rung cold and"
        f" warm; a value is chosen only if it clears {ladder.floor_mib:g} MiB in both.</p>"
        f"{registered}<figure>{ladder_chart(ladder)}</figure>"
        '<table class="ladder"><tr><th>pin</th><th>value</th><th>predicted MiB</th>'
        "<th>cold MiB (vs predicted)</th><th>warm MiB (vs predicted)</th><th>clears</th></tr>"
        + "".join(rows)
        + f"</table><ul>{choices}</ul>"
    )


def _end(view: NightView) -> list[str]:
    if not view.end:
        return []
    items = "".join(
        f"<li>{escape(e.action)}: {'ok' if e.ok else 'NOT OK'}; {escape(e.detail)}"
        + (f" ({escape(e.location)})" if e.location else "")
        + "</li>"
        for e in view.end
    )
    return ['<h2 id="end">End</h2>', f"<ul>{items}</ul>"]


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{seconds:.1f} s"
