"""Plain aligned text tables for the listing verbs (no colour: output is often piped)."""

from __future__ import annotations

from collections.abc import Sequence


def render(headers: Sequence[str], rows: Sequence[Sequence[object]], empty: str = "(none)") -> str:
    """Columns padded to their widest cell; an empty table is the line `empty`."""
    if not rows:
        return empty + "\n"
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


def count_of(n: int, noun: str) -> str:
    """`1 cache`, `2 caches`."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def some_of(items: Sequence[str]) -> str:
    """The first three, and `…` when there are more."""
    return ", ".join(items[:3]) + (", …" if len(items) > 3 else "")


def human_bytes(size: int | None) -> str:
    """1536 → '1.5 KiB'."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_age(seconds: float) -> str:
    """90 → '1m', 7200 → '2h', 3 days → '3d'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
