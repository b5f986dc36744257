"""Data read from YAML with the position of every key and value, so errors name `file:line:col`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
