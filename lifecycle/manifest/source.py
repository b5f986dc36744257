"""YAML read with the position of every key and value (`Located`), so every later error can
name `file:line:col`, within limits: libyaml's event stream is checked for depth and size before
anything recursive sees it, and PyYAML's constructor builds scalars only (docs/manifests.md,
Errors, says why)."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from lifecycle.errors import ManifestError, Problem
from lifecycle.table import visible

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Mark:
    """Where a YAML node starts, 1-based as editors count."""

    file: Path
    line: int
    col: int


@dataclass
class Located:
    """Plain data from one or more YAML files, with the mark of every key and value."""

    data: Any
    values: dict[KeyPath, Mark] = field(default_factory=dict)
    keys: dict[KeyPath, Mark] = field(default_factory=dict)

    def mark(self, path: KeyPath, *, prefer_key: bool = False) -> Mark | None:
        """The mark of `path`, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            if prefer_key and prefix in self.keys:
                return self.keys[prefix]
            if prefix in self.values:
                return self.values[prefix]
        return None


def render_key_path(path: KeyPath) -> str:
    """`patches[1].file` for ("patches", 1, "file"); `(document)` for the root. A key's own
    newline is escaped: a problem is one line, whatever key the YAML holds."""
    out = ""
    for part in path:
        key = visible(str(part))
        out += f"[{part}]" if isinstance(part, int) else (f".{key}" if out else key)
    return out or "(document)"


__all__ = ["KeyPath", "Located", "Mark", "read_yaml", "render_key_path"]

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
        dangling = " (a symlink to nothing)" if file.is_symlink() else ""
        raise file_problem(file, f"no such file{dangling}") from None
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


def read_yaml(file: Path) -> Located:
    """Parse one YAML document; duplicate keys (which YAML would silently overwrite), alias
    bombs, deep nesting and oversized files are ManifestErrors, each located."""
    text = read_bounded(file)
    check_events(file, text)
    loader = new_loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return Located(None)
        return compose(file, node, loader)
    except yaml.MarkedYAMLError as exc:
        raise yaml_problem(file, exc, text) from None
    finally:
        loader.dispose()


MERGE_TAG = "tag:yaml.org,2002:merge"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"

Pair = tuple[str, yaml.Node, yaml.Node]  # key as written, key node, value node


class _Fatal(Exception):
    """A limit was hit: stop at once, whatever else the document holds."""


def compose(file: Path, node: yaml.Node, loader: yaml.CSafeLoader | yaml.SafeLoader) -> Located:
    """The document under `node` as data with marks; ManifestError with every problem found."""
    builder = _Builder(file, loader)
    with suppress(_Fatal):  # its one problem is recorded
        builder.out.data = builder.value(node, ())
    if builder.problems:
        raise ManifestError(list(builder.problems.values()))
    return builder.out


class _Builder:
    def __init__(self, file: Path, loader: yaml.CSafeLoader | yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader
        self.out = Located(None)
        self.problems: dict[tuple[int, int, str], Problem] = {}
        self.nodes = 0
        self.open: set[int] = set()  # collections being built: one met again is recursive

    def value(self, node: yaml.Node, path: KeyPath) -> Any:
        self._count(node, path)
        self.out.values[path] = self._mark(node)
        if isinstance(node, yaml.ScalarNode):
            return self._construct(node, path)
        if len(path) + 1 > MAX_DEPTH:
            self._fatal(node, path, f"nested deeper than {MAX_DEPTH} levels (aliases expanded)")
        self._enter(node, path)
        try:
            if isinstance(node, yaml.SequenceNode):
                if node.tag != _SEQ_TAG:
                    return self._problem(node, path, f"tag {node.tag!r} is not supported here")
                return [self.value(item, (*path, index)) for index, item in enumerate(node.value)]
            if not isinstance(node, yaml.MappingNode) or node.tag != _MAP_TAG:
                return self._problem(node, path, f"tag {node.tag!r} is not supported here")
            data: dict[Any, Any] = {}
            for text, key_node, value_node in self._pairs(node, path, 0):
                child = (*path, text)
                self.out.keys[child] = self._mark(key_node)
                data[self._construct(key_node, child)] = self.value(value_node, child)
            return data
        finally:
            self.open.discard(id(node))

    def _pairs(self, node: yaml.MappingNode, path: KeyPath, merges: int) -> list[Pair]:
        """The mapping's pairs as YAML's merge rules make them: its own keys win over merged
        ones, an earlier merged mapping over a later one; a key written twice is a problem."""
        own: list[Pair] = []
        sources: list[yaml.MappingNode] = []
        seen: set[str] = set()
        for key_node, value_node in node.value:
            self._count(key_node, path)
            if not isinstance(key_node, yaml.ScalarNode):
                self._problem(key_node, path, "a key must be a plain value, not a collection")
                continue
            text = str(key_node.value)
            if text in seen:
                self._problem(key_node, (*path, text), "duplicate key")
                continue
            seen.add(text)
            if key_node.tag == MERGE_TAG:
                sources = self._merge_sources(value_node, (*path, text))
            else:
                own.append((text, key_node, value_node))
        if sources and merges + 1 > MAX_DEPTH:
            self._fatal(node, path, f"merges (<<) nested deeper than {MAX_DEPTH} levels")
        merged: list[Pair] = []
        for source in reversed(sources):
            self._enter(source, path)
            try:
                merged += self._pairs(source, path, merges + 1)
            finally:
                self.open.discard(id(source))
        # A dict keeps a key where it first appeared and the value set last: PyYAML's order.
        winners = {pair[0]: pair for pair in (*merged, *own)}
        return list(winners.values())

    def _merge_sources(self, node: yaml.Node, path: KeyPath) -> list[yaml.MappingNode]:
        if isinstance(node, yaml.MappingNode):
            return [node]
        items = node.value if isinstance(node, yaml.SequenceNode) else None
        if items and all(isinstance(item, yaml.MappingNode) for item in items):
            return list(items)
        self._problem(node, path, "a merge (<<) takes a mapping or a list of mappings")
        return []

    def _construct(self, node: yaml.Node, path: KeyPath) -> Any:
        try:
            return self.loader.construct_object(node)
        except yaml.MarkedYAMLError as exc:
            return self._problem(node, path, exc.problem or "cannot read this value")
        except (ValueError, OverflowError) as exc:  # e.g. 2026-02-30, an int of 5000 digits
            return self._problem(node, path, f"cannot read this value: {exc}")

    def _count(self, node: yaml.Node, path: KeyPath) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            message = f"more than {MAX_NODES} nodes once aliases are expanded (an alias bomb?)"
            self._fatal(node, path, message)

    def _enter(self, node: yaml.Node, path: KeyPath) -> None:
        if id(node) in self.open:
            self._fatal(node, path, "an alias refers to a collection that holds it (recursive)")
        self.open.add(id(node))

    def _mark(self, node: yaml.Node) -> Mark:
        return Mark(self.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def _problem(self, node: yaml.Node, path: KeyPath, message: str) -> None:
        mark = self._mark(node)
        problem = Problem(mark.file, mark.line, mark.col, render_key_path(path), message)
        self.problems.setdefault((mark.line, mark.col, message), problem)

    def _fatal(self, node: yaml.Node, path: KeyPath, message: str) -> NoReturn:
        self.problems.clear()
        self._problem(node, path, message)
        raise _Fatal
