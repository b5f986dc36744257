"""`extends`: a derived manifest is its parent with the child's keys laid over it."""

from __future__ import annotations

from typing import Any

from lifecycle.manifest.source import KeyPath, Located


def deep_merge(base: Any, over: Any) -> Any:
    """Mappings merge key by key; anything else (lists included) is replaced by `over`."""
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    return over


def merge_located(base: Located, over: Located) -> Located:
    """Merge data, keeping for every surviving value the mark of the file it came from."""
    values = {p: m for p, m in base.values.items() if _survives(p, over)}
    keys = {p: m for p, m in base.keys.items() if _survives(p, over)}
    return Located(deep_merge(base.data, over.data), values | over.values, keys | over.keys)


def _survives(path: KeyPath, over: Located) -> bool:
    """A base value survives unless `over` sets it, or replaces a non-mapping above it."""
    if path in over.values:
        return False
    for end in range(1, len(path)):
        prefix = path[:end]
        if prefix in over.values and not isinstance(_get(over.data, prefix), dict):
            return False
    return True


def _get(data: Any, path: KeyPath) -> Any:
    for part in path:
        data = data[part]
    return data
