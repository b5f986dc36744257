"""A ladder as an inline SVG chart: margin against the tuned value, one line per pin and state.

Drawn here, as plain SVG elements, so the report needs nothing from the network: measured
margins as solid (warm) and dashed (cold) lines, predictions as dotted lines, the floor as a
red rule. Each line and point carries a `data-*` attribute naming what it shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape

from lifecycle.night.ladder import LadderView

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
