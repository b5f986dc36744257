"""Deterministic patch export: the diff of each replayed commit, as the build applies it.

Every patch's diff is printed by git with the same pinned options, in the form the build
applies (`patch -p1 --fuzz=0` inside the package dir): a plain `git diff` per patch, paths
relative to the package dir (`--relative=<subdir>/`), `a/` and `b/` prefixes, renames
detected, index lines abbreviated to 12 hex digits, 3 lines of context, the myers algorithm
with the indent heuristic; no commit ids, dates, signatures or diffstat. Only a binary
file's block carries full object ids (`--binary` needs them to apply); the text files of the
same patch keep the abbreviated form. The patch file's own message (a mail's headers and
body, or the text above a plain diff) is put back above it by `with_port`.

A series mixes two forms, and a port keeps each in its own:
- a mail, as `git format-patch` writes it (or a DEP-3 header starting `From:`/`Subject:`):
  an mbox `From <commit> <date>` line, headers (From, Date, Subject, ...), a blank line, the
  message with its trailers, `---`, a diffstat, the diff, a version signature;
- a plain diff, perhaps below some free text (a DEP-3 paragraph such as `Description:`).

An unchanged patch keeps its bytes: when the new diff equals the old one except for `index`
lines (blob ids move whenever upstream edits the file elsewhere; `patch` ignores them), the
patch file is copied as it was, whatever tool first wrote it. One that moved, or was resolved,
keeps its headers and message byte for byte and gains a `Ported-From: OLD -> NEW (OUTCOME)`
trailer; its diff is the port's pinned export, so it has no diffstat or signature (they
describe the old diff), and a mail's mbox line names the zero commit (the commit it names
exists on no one else's machine). git and GNU patch skip all text before the first
`diff --git`, so neither the build nor the next port is affected by what is kept.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from lifecycle.port.git import Git
from lifecycle.port.replay import TRAILER, ZERO_MBOX

_PINNED_DIFF = (
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--find-renames",
    "--abbrev=12",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=3",
    "--diff-algorithm=myers",
    "--indent-heuristic",
    "--format=%x00%H",
)
_BLOCK = re.compile(rb"(?m)^(?=diff --git )")
_BINARY_STUB = re.compile(rb"(?m)^Binary files .* differ$")
_HUNK = re.compile(rb"(?m)^@@ .*$")
_INDEX = re.compile(rb"(?m)^index .*\n")


def export(git: Git, commits: list[str], subdir: str) -> dict[str, bytes]:
    """commit → its patch in the pinned format, paths relative to `subdir`."""
    if not commits:
        return {}  # `git log --no-walk` with no commit would show HEAD
    patches = _log_patches(git, commits, subdir, binary=False)
    for commit, text in patches.items():
        if _BINARY_STUB.search(text):
            with_binary = _log_patches(git, [commit], subdir, binary=True)[commit]
            patches[commit] = _splice_binary(text, with_binary)
    return patches


def same_position(old: bytes, new: bytes) -> bool:
    """The same patch but for text files' index lines: the change did not move at all."""
    return _without_text_index(old) == _without_text_index(new)


def same_hunks(old: bytes, new: bytes) -> bool:
    """The same hunks, context included, at any line numbers: applies as it was, offsets only."""
    return _HUNK.sub(b"@@", _without_text_index(old)) == _HUNK.sub(b"@@", _without_text_index(new))


def patch_indices(git: Git, revisions: list[str]) -> dict[str, int]:
    """commit → the series position recorded in its Lifecycle-Patch trailer."""
    fmt = f"--format=%H %(trailers:key={TRAILER},valueonly,separator=%x2C)"
    found = {}
    for line in git.out("log", fmt, *revisions).splitlines():
        commit, _, index = line.partition(" ")
        if index.strip():
            found[commit] = int(index)
    return found


def touched(git: Git, commits: list[str]) -> dict[str, list[str]]:
    """commit → the repository paths it changes (a rename counts as both of its paths)."""
    if not commits:
        return {}
    out = git.out(
        "log",
        "--no-walk=unsorted",
        "--format=%x00%H",
        "--name-only",
        "--no-renames",
        "-z",
        *commits,
    )
    found: dict[str, list[str]] = {}
    commit = ""
    for field in out.split("\0"):
        field = field.strip("\n")
        if not field:
            continue
        if re.fullmatch(r"[0-9a-f]{40,64}", field) and field not in found:
            commit = field
            found[commit] = []
        elif commit:
            found[commit].append(field)
    return found


def _log_patches(git: Git, commits: list[str], subdir: str, *, binary: bool) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="lifecycle-export-") as temp:
        output = Path(temp) / "log"
        extra = ["--binary"] if binary else []
        git.run(
            "log",
            "--no-walk=unsorted",
            "-p",
            *_PINNED_DIFF,
            *extra,
            f"--relative={subdir}/",
            f"--output={output}",
            *commits,
        )
        raw = output.read_bytes()
    patches = {}
    for entry in raw.split(b"\0")[1:]:
        commit, _, body = entry.partition(b"\n")
        patches[commit.decode()] = body.removeprefix(b"\n")
    return patches


def _splice_binary(text: bytes, with_binary: bytes) -> bytes:
    # The same diff twice, once with --binary: same files in the same order, so block i of
    # one is block i of the other; only the binary files' blocks are taken from the second.
    plain = [b for b in _BLOCK.split(text) if b]
    full = [b for b in _BLOCK.split(with_binary) if b]
    if len(plain) != len(full):
        raise AssertionError("binary re-export listed different files")
    return b"".join(f if _BINARY_STUB.search(p) else p for p, f in zip(plain, full, strict=True))


def _without_text_index(patch: bytes) -> bytes:
    blocks = [b for b in _BLOCK.split(patch) if b]
    return b"".join(b if b"GIT binary patch" in b else _INDEX.sub(b"", b) for b in blocks)


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
