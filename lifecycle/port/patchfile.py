"""A patch file's message and its diff; a moved patch written back with its message kept.

A series mixes two forms, and a port keeps each in its own:
- a mail, as `git format-patch` writes it (or a DEP-3 header starting `From:`/`Subject:`):
  an mbox `From <commit> <date>` line, headers (From, Date, Subject, ...), a blank line, the
  message with its trailers, `---`, a diffstat, the diff, a version signature;
- a plain diff, perhaps below some free text (a DEP-3 paragraph such as `Description:`).

A patch whose change did not move keeps its bytes. One that moved, or was resolved, keeps
its headers and message byte for byte and gains a `Ported-From: OLD -> NEW (OUTCOME)`
trailer; its diff is the port's pinned export, so it has no diffstat or signature (they
describe the old diff), and a mail's mbox line names the zero commit (the commit it names
exists on no one else's machine). git and GNU patch skip all text before the first
`diff --git`, so neither the build nor the next port is affected by what is kept.
"""

from __future__ import annotations

import re

ZERO_MBOX = b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
_MBOX = re.compile(rb"From \S+ \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\r?\n")
_HEADER = re.compile(rb"(From|Date|Subject): ")
_HEADER_LINE = re.compile(rb"[A-Za-z0-9-]+: ")
_DIFF_START = re.compile(rb"(?m)^(?:diff --git |Index: |--- .*\n\+\+\+ )")
_SEPARATOR = re.compile(rb"(?m)^---[ \t]*\r?\n")
_TRAILER = re.compile(rb"[A-Za-z0-9][A-Za-z0-9-]*: \S")
_CONTINUATION = re.compile(rb"[ \t]+\S")


def with_port(original: bytes, diff: bytes, trailer: str) -> bytes:
    """`original`'s headers and message, `trailer` added to them, then the new `diff` (what
    stood between the message and the old diff, a diffstat, is dropped)."""
    start = _DIFF_START.search(original)
    before = original[: start.start()] if start else original
    mbox = _MBOX.match(before)
    rest = before[mbox.end() :] if mbox else before
    headers = None  # a mail's header block (without its blank line); None for a plain diff
    if mbox or _HEADER.match(rest):
        # RFC 822: the headers are the lines up to the first that is neither a header nor the
        # continuation of one; a blank line after them is the mail's, not the message's.
        lines = rest.splitlines(keepends=True)
        count = 0
        while count < len(lines) and (
            _HEADER_LINE.match(lines[count]) or (count and _CONTINUATION.match(lines[count]))
        ):
            count += 1
        headers, rest = b"".join(lines[:count]), b"".join(lines[count:])
        rest = rest[1:] if rest.startswith(b"\n") else rest
    separator = _SEPARATOR.search(rest)
    message = add_trailer(rest[: separator.start()] if separator else rest, trailer.encode())
    if headers is not None:
        return ZERO_MBOX + headers + b"\n" + message + b"---\n" + diff
    return message + (b"---\n" if separator else b"\n") + diff


def add_trailer(message: bytes, trailer: bytes) -> bytes:
    """The message with `trailer` as its last line: in its trailer block if it ends with one
    (as `git interpret-trailers` would put it), else in a paragraph of its own."""
    body = message.rstrip(b"\r\n\t ")
    if not body:
        return trailer + b"\n"
    last = body.rsplit(b"\n\n", 1)[-1].split(b"\n")
    in_block = bool(_TRAILER.match(last[0])) and all(
        _TRAILER.match(line) or _CONTINUATION.match(line) for line in last
    )
    return body + (b"\n" if in_block else b"\n\n") + trailer + b"\n"
