"""Deterministic patch export: the diff of each replayed commit, as the build applies it.

Every patch's diff is printed by git with the same pinned options, in the form the build
applies (`patch -p1 --fuzz=0` inside the package dir): a plain `git diff` per patch, paths
relative to the package dir (`--relative=<subdir>/`), `a/` and `b/` prefixes, renames
detected, index lines abbreviated to 12 hex digits, 3 lines of context, the myers algorithm
with the indent heuristic; no commit ids, dates, signatures or diffstat. Only a binary
file's block carries full object ids (`--binary` needs them to apply); the text files of the
same patch keep the abbreviated form. The patch file's own message (a mail's headers and
body, or the text above a plain diff) is put back above it by `patchfile.with_port`.

An unchanged patch keeps its bytes: when the new diff equals the old one except for `index`
lines (blob ids move whenever upstream edits the file elsewhere; `patch` ignores them), the
patch file is copied as it was, whatever tool first wrote it.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from lifecycle.port.git import Git
from lifecycle.port.replay import TRAILER

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
