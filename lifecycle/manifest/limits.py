"""How big a YAML file of ours may be, and the event pass that enforces it before composing.

A manifest is a few kilobytes. These bounds are far above any real one and keep a hostile or
mistaken file to a fraction of a second and a few megabytes: libyaml's composer recurses in C
(100k nested brackets crash the process), and aliases let 453 bytes stand for a billion nodes.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lifecycle.errors import ManifestError, Problem

MAX_FILE_BYTES = 1024 * 1024  # a file of ours
MAX_NODES = 20_000  # scalars and collections, every alias counted as what it stands for
MAX_DEPTH = 32  # collections nested in collections, aliases expanded
MAX_EXTENDS = 8  # manifests in one `extends` chain, the first one included

_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_NODES = (yaml.ScalarEvent, yaml.AliasEvent, *_OPENS)


def new_loader(text: str) -> yaml.CSafeLoader | yaml.SafeLoader:
    """libyaml's safe loader when PyYAML was built with it (5x faster, the same marks)."""
    if hasattr(yaml, "CSafeLoader"):
        return yaml.CSafeLoader(text)
    return yaml.SafeLoader(text)


def read_bounded(file: Path) -> str:
    """The file's text, refused whole if it is larger than MAX_FILE_BYTES or not UTF-8."""
    try:
        if file.exists() and not file.is_file() and not file.is_dir():
            # A FIFO would block the read forever, /dev/zero never end it.
            raise file_problem(file, "not a regular file")
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise file_problem(file, "no such file") from None
    except IsADirectoryError:
        raise file_problem(file, "is a directory, expected a YAML file") from None
    except OSError as exc:
        raise file_problem(file, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise file_problem(file, f"larger than {MAX_FILE_BYTES // 1024} KiB; not a file of ours")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise file_problem(file, f"not UTF-8 text (byte {exc.start})") from None


def check_events(file: Path, text: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH and more than MAX_NODES nodes as written, reading
    libyaml's flat event stream, before anything recursive sees the document."""
    loader = new_loader(text)
    depth = nodes = 0
    try:
        while (event := loader.get_event()) is not None:
            if isinstance(event, _NODES):
                nodes += 1
                if nodes > MAX_NODES:
                    raise ManifestError([_at(file, event, f"more than {MAX_NODES} nodes")])
            if isinstance(event, _OPENS):
                depth += 1
                if depth > MAX_DEPTH:
                    message = f"nested deeper than {MAX_DEPTH} levels"
                    raise ManifestError([_at(file, event, message)])
            elif isinstance(event, _CLOSES):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        raise yaml_problem(file, exc, text) from None
    finally:
        loader.dispose()


def yaml_problem(file: Path, exc: yaml.MarkedYAMLError, text: str) -> ManifestError:
    """A YAML syntax or construction error as one located problem; the two a person makes
    most (a tab that indents, a second document) said plainly instead of in parser terms."""
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem = exc.problem or exc.context or "invalid YAML"
    indent = _indent(text, line)
    if "\t" in indent and col <= len(indent) + 1:
        col = indent.index("\t") + 1
        problem = "a tab indents this line; YAML indents with spaces only"
    elif problem == "but found another document":
        problem = "a second YAML document starts here (---); a manifest is one document"
    return ManifestError([Problem(file, line, col, "(yaml)", problem)])


def _indent(text: str, line: int) -> str:
    """The leading whitespace of line `line` (1-based) of `text`."""
    lines = text.split("\n", line)
    found = lines[line - 1] if line <= len(lines) else ""
    return found[: len(found) - len(found.lstrip(" \t"))]


def file_problem(file: Path, message: str) -> ManifestError:
    """A problem with the file as a whole."""
    return ManifestError([Problem(file, 1, 1, "(file)", message)])


def _at(file: Path, event: yaml.Event, message: str) -> Problem:
    mark = event.start_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    return Problem(file, line, col, "(yaml)", message)
