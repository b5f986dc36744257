"""A night's report: `report.json` and a self-contained `report.html` with each ladder's chart.

Written under `$LIFECYCLE_HOME/nights/<night>/` whenever the night runs again, and archived as
a new revision each time (`nights/<night>/<UTC time>-<6 hex>/`, created only if absent): the
archive is append-only, so the newest revision is the last one listed.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from lifecycle.archive.store import BlobStore
from lifecycle.home import Home, write_atomic
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
    if run.node:  # on a cluster: which node, and where its caches came from
        title += f" on {run.node}, caches {run.cache_from}"
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
    lost = "".join(
        f"<li>{escape(a.cell)} run {a.run} on {escape(a.node)}: {escape(a.error)}</li>"
        for a in view.lost
    )
    found = ['<h2 id="lost">Lost attempts (not counted)</h2>', f"<ul>{lost}</ul>"] if lost else []
    if not view.end:
        return found
    items = "".join(
        f"<li>{escape(e.action)}: {'ok' if e.ok else 'NOT OK'}; {escape(e.detail)}"
        + (f" ({escape(e.location)})" if e.location else "")
        + "</li>"
        for e in view.end
    )
    return [*found, '<h2 id="end">End</h2>', f"<ul>{items}</ul>"]


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{seconds:.1f} s"


# A ladder's chart, drawn as plain SVG so the page fetches nothing: measured margins solid
# (warm) and dashed (cold), predictions dotted, the floor a red rule; each mark names its data.
WIDTH, HEIGHT = 760, 380
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 24, 52
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
DASH = {"warm": "", "cold": "7 4", "predicted": "2 4"}


def ladder_chart(ladder: LadderView) -> str:
    """The ladder's chart as an `<svg>` element."""
    series = _series(ladder)
    xs = sorted({x for _, _, _, points in series for x, _ in points})
    ys = [y for _, _, _, points in series for _, y in points] + [ladder.floor_mib, 0.0]
    x_of, y_of, y_ticks = _scales(xs or [0.0, 1.0], ys)
    parts = [
        f'<svg class="ladder-chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}"'
        f' height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img"'
        f' data-argument="{escape(ladder.argument)}">',
        f"<title>{escape(ladder.argument)}: margin at {escape(ladder.shape)}</title>",
        '<rect x="0" y="0" width="100%" height="100%" fill="#fff"/>',
    ]
    plot_right = WIDTH - RIGHT
    for tick in y_ticks:
        y = y_of(tick)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{plot_right}" y2="{y:.1f}" stroke="#e5e5e5"/>'
            f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
            f"{tick:g}</text>"
        )
    for x_value in xs:
        x = x_of(x_value)
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#f0f0f0"/>'
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle" font-size="11">'
            f"{x_value:g}</text>"
        )
    floor = y_of(ladder.floor_mib)
    parts.append(
        f'<line class="floor" x1="{LEFT}" y1="{floor:.1f}" x2="{plot_right}" y2="{floor:.1f}"'
        f' stroke="#c00" stroke-width="1.5" stroke-dasharray="4 3"'
        f' data-floor="{ladder.floor_mib:g}"/>'
        f'<text x="{plot_right - 4}" y="{floor - 5:.1f}" text-anchor="end" font-size="11"'
        f' fill="#c00">floor {ladder.floor_mib:g} MiB</text>'
    )
    for index, (pin, kind, color, points) in enumerate(series):
        parts += _line(pin, kind, color, points, x_of, y_of)
        parts.append(_legend(index, pin, kind, color))
    parts += _axes(ladder, plot_right)
    parts.append("</svg>")
    return "\n".join(parts)


Points = list[tuple[float, float]]
Scale = Callable[[float], float]  # a value to its pixel coordinate


def _series(ladder: LadderView) -> list[tuple[str, str, str, Points]]:
    """(pin, warm | cold | predicted, color, points) for each line to draw."""
    found = []
    for index, pin in enumerate(ladder.pins):
        color = PALETTE[index % len(PALETTE)]
        for kind in ("warm", "cold"):
            points = [
                (r.value, m.margin_mib)
                for r in pin.rungs
                if (m := r.measured.get(kind)) is not None and m.margin_mib is not None
            ]
            if points:
                found.append((pin.pin, kind, color, points))
        predicted = [(r.value, r.predicted_mib) for r in pin.rungs if r.predicted_mib is not None]
        if predicted:
            found.append((pin.pin, "predicted", color, predicted))
    return found


def _scales(xs: list[float], ys: list[float]) -> tuple[Scale, Scale, list[float]]:
    """x and y to pixels, and the y ticks: round numbers covering every value."""
    low_x, high_x = min(xs), max(xs)
    if high_x == low_x:
        low_x, high_x = low_x - 0.01, high_x + 0.01
    pad_x = (high_x - low_x) * 0.06
    low_x, high_x = low_x - pad_x, high_x + pad_x
    step = _nice((max(ys) - min(ys)) / 5 or 1.0)
    low_y, high_y = math.floor(min(ys) / step) * step, math.ceil(max(ys) / step) * step
    if high_y == low_y:
        high_y = low_y + step
    ticks = [low_y + i * step for i in range(round((high_y - low_y) / step) + 1)]
    span_x, span_y = WIDTH - RIGHT - LEFT, HEIGHT - BOTTOM - TOP

    def x_of(value: float) -> float:
        return LEFT + (value - low_x) / (high_x - low_x) * span_x

    def y_of(value: float) -> float:
        return HEIGHT - BOTTOM - (value - low_y) / (high_y - low_y) * span_y

    return x_of, y_of, ticks


def _nice(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least `raw`."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(float(m * power) for m in (1, 2, 5, 10) if m * power >= raw)


def _line(pin: str, kind: str, color: str, points: Points, x_of: Scale, y_of: Scale) -> list[str]:
    coords = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in points)
    width = "1.5" if kind == "predicted" else "2.5"
    dash = f' stroke-dasharray="{DASH[kind]}"' if DASH[kind] else ""
    parts = [
        f'<polyline class="series" data-pin="{escape(pin)}" data-state="{kind}"'
        f' points="{coords}" fill="none" stroke="{color}" stroke-width="{width}"{dash}/>'
    ]
    for x, y in points:
        cx, cy = x_of(x), y_of(y)
        title = f"{pin} {kind} at {x:g}: {y:.1f} MiB"
        if kind != "predicted":  # measured: a dot; predicted: a hollow square
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{color}"'
                f' data-value="{x:g}" data-margin="{y:.1f}"><title>{escape(title)}</title></circle>'
            )
        else:
            parts.append(
                f'<rect x="{cx - 3:.1f}" y="{cy - 3:.1f}" width="6" height="6" fill="#fff"'
                f' stroke="{color}"><title>{escape(title)}</title></rect>'
            )
    return parts


def _legend(index: int, pin: str, kind: str, color: str) -> str:
    x, y = WIDTH - RIGHT + 16, TOP + 10 + index * 20
    dash = f' stroke-dasharray="{DASH[kind]}"' if DASH[kind] else ""
    return (
        f'<line x1="{x}" y1="{y}" x2="{x + 26}" y2="{y}" stroke="{color}"'
        f' stroke-width="2.5"{dash}/>'
        f'<text x="{x + 32}" y="{y + 4}" font-size="12">{escape(pin)} {kind}</text>'
    )


def _axes(ladder: LadderView, plot_right: int) -> list[str]:
    bottom = HEIGHT - BOTTOM
    return [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{bottom}" x2="{plot_right}" y2="{bottom}" stroke="#333"/>',
        f'<text x="{(LEFT + plot_right) / 2:.0f}" y="{HEIGHT - 12}" text-anchor="middle"'
        f' font-size="12">{escape(ladder.argument)}</text>',
        f'<text x="16" y="{(TOP + bottom) / 2:.0f}" text-anchor="middle" font-size="12"'
        f' transform="rotate(-90 16 {(TOP + bottom) / 2:.0f})">margin, MiB</text>',
    ]
