"""Write a measured tuned value into its manifest, leaving every other line as it was.

Only the value's own block under `tuned:` is replaced (or added, to the manifest the release
is named by, when it only inherited the value): comments, key order and layout elsewhere stay,
so the diff a reviewer reads is the measurement. The file is written beside itself and renamed
into place once it loads as a valid manifest; otherwise it is left untouched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from lifecycle.errors import LifecycleError
from lifecycle.manifest import load_manifest
from lifecycle.manifest.model import TunedValue
from lifecycle.manifest.source import read_yaml
from lifecycle.port.manifest_out import tuned_block

INDENT = 2


def write_tuned(file: Path, name: str, value: TunedValue) -> None:
    """Set `tuned.<name>` in `file` to `value`; LifecycleError when the file's layout does not
    allow it (a flow-style mapping) or the result would not be a valid manifest."""
    text = file.read_text()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    located = read_yaml(file)
    key = located.keys.get(("tuned", name))
    tuned = located.keys.get(("tuned",))
    if key is not None:
        start, indent = key.line - 1, key.col - 1
        _refuse_flow(located.values.get(("tuned", name)), key.line, file)
        end = _block_end(lines, start, indent)
        lines[start:end] = [tuned_block(name, value, indent)]
    elif tuned is not None:
        start, indent = tuned.line - 1, tuned.col - 1
        _refuse_flow(located.values.get(("tuned",)), tuned.line, file)
        end = _block_end(lines, start, indent)
        lines[end:end] = [tuned_block(name, value, indent + INDENT)]
    else:
        lines.append("\ntuned:\n" + tuned_block(name, value, INDENT))
    _replace(file, "".join(lines))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The line after the block a key at `start` opens: the next line as little indented as
    the key, less the blank and comment lines just before it (they belong to what follows)."""
    end = start + 1
    while end < len(lines):
        stripped = lines[end].strip()
        if stripped and not stripped.startswith("#") and _indent(lines[end]) <= indent:
            break
        end += 1
    while end - 1 > start and _loose(lines[end - 1], indent):
        end -= 1
    return end


def _loose(line: str, indent: int) -> bool:
    stripped = line.strip()
    return not stripped or (stripped.startswith("#") and _indent(line) <= indent)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _refuse_flow(value_mark: object, key_line: int, file: Path) -> None:
    line = getattr(value_mark, "line", None)
    if line == key_line:
        raise LifecycleError(
            f"{file}:{key_line}: tuned values written on one line ({{...}}) cannot be rewritten"
            " in place; write them as a block, one key a line"
        )


def _replace(file: Path, text: str) -> None:
    fd, temp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".yaml")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    try:
        Path(temp).chmod(file.stat().st_mode & 0o777)
        load_manifest(Path(temp))  # what is written must load, extends and patches included
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    Path(temp).replace(file)
