"""YAML read with positions, so every later error can name `file:line:col`, within limits.

The text is read whole only up to MAX_FILE_BYTES; libyaml's event stream is checked for depth
and size before it is composed (its composer recurses in C); then the nodes become data here,
each counted through aliases and merges (lifecycle.manifest.compose).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lifecycle.manifest.compose import compose
from lifecycle.manifest.limits import check_events, new_loader, read_bounded, yaml_problem
from lifecycle.manifest.located import KeyPath, Located, Mark, render_key_path

__all__ = ["KeyPath", "Located", "Mark", "read_yaml", "render_key_path"]


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
