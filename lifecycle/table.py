"""Plain aligned text tables for the listing verbs (no colour: output is often piped), and
outside text made visible rather than obeyed by the terminal that shows it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# What a terminal acts on rather than shows: C0 controls (ESC opens CSI and OSC sequences that
# clear the screen or set the clipboard; BEL, backspace, CR, LF), DEL, C1 controls (U+0080-U+009F,
# CSI and OSC in one character to some terminals), bidi marks, embeddings, overrides and isolates
# (text that reads in another order than it is), and Unicode's line and paragraph separators.
_ACTED_ON = [
    *range(0x20), *range(0x7F, 0xA0), 0x61C, 0x200E, 0x200F, *range(0x2028, 0x202F),
    *range(0x2066, 0x206A),
]  # fmt: skip
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
# Each as Python writes it in a string: `\\x1b`, `\\n`, `\\u202e`.
_IN_FIELD = {
    code: _NAMED.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    for code in _ACTED_ON
}
# In text whose newlines are lifecycle's own: the same but newline and tab, which only move on.
_IN_TEXT = {code: shown for code, shown in _IN_FIELD.items() if code not in (0x09, 0x0A)}


def visible(field: str) -> str:
    """Outside text (a record's field, an engine's error, a file name) as one line that shows
    what it holds: each control or bidi character escaped as Python would write it (`\\x1b`,
    `\\n`), so that a crafted field neither drives the terminal nor forges a line of its own.
    Nothing is dropped: an odd record is seen to be odd. A backslash is left as it is."""
    return field if field.isprintable() else field.translate(_IN_FIELD)


def visible_lines(text: str) -> str:
    """`visible`, keeping newlines and tabs: for text whose lines lifecycle made (a report, a
    note), where a field's own newline can no longer be told from lifecycle's."""
    return text if text.isprintable() else text.translate(_IN_TEXT)


def lines_text(lines: Iterable[str]) -> str:
    """A report's text from its lines: each `visible`, so that a field's newline in one is
    escaped, and each ended by a newline of lifecycle's own."""
    return "".join(visible(line) + "\n" for line in lines)


def render(headers: Sequence[str], rows: Sequence[Sequence[object]], empty: str = "(none)") -> str:
    """Columns padded to their widest cell; an empty table is the line `empty`."""
    if not rows:
        return empty + "\n"
    # A cell is a field: its newline would forge a row, its escape sequence drive the terminal.
    cells = [
        [str(h) for h in headers],
        *[["" if c is None else visible(str(c)) for c in r] for r in rows],
    ]
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
