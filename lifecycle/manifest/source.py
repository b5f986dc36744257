"""YAML read with positions, so every later error can name `file:line:col`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lifecycle.errors import ManifestError, Problem

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
    """`patches[1].file` for ("patches", 1, "file"); `(document)` for the root."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def read_yaml(file: Path) -> Located:
    """Parse one YAML document, refusing duplicate keys that YAML would silently overwrite."""
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _file_problem(file, "no such file") from None
    except IsADirectoryError:
        raise _file_problem(file, "is a directory, expected a manifest file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _file_problem(file, f"cannot read: {exc}") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise ManifestError([Problem(file, line, col, "(yaml)", problem)]) from None
    finally:
        loader.dispose()
    located = Located(data)
    if node is not None:
        problems: list[Problem] = []
        _walk(file, node, (), located, problems)
        if problems:
            raise ManifestError(problems)
    return located


def _walk(
    file: Path, node: yaml.Node, path: KeyPath, out: Located, problems: list[Problem]
) -> None:
    out.values[path] = _mark(file, node)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*path, key)
            if key in seen:
                where = _mark(file, key_node)
                problems.append(
                    Problem(file, where.line, where.col, render_key_path(child), "duplicate key")
                )
            seen.add(key)
            out.keys[child] = _mark(file, key_node)
            _walk(file, value_node, child, out, problems)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(file, item, (*path, index), out, problems)


def _mark(file: Path, node: yaml.Node) -> Mark:
    return Mark(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _file_problem(file: Path, message: str) -> ManifestError:
    return ManifestError([Problem(file, 1, 1, "(file)", message)])
