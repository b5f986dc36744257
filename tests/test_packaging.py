"""The package is pure Python: one `py3-none-any` wheel installs it anywhere, no compiler needed."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NATIVE_SOURCES = {".c", ".h", ".cc", ".cpp", ".pyx", ".pxd", ".rs"}


def test_nothing_is_compiled_at_install() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "ext-modules" not in pyproject.get("tool", {}).get("setuptools", {})
    assert not (REPO / "setup.py").exists()
    native = [p for p in (REPO / "lifecycle").rglob("*") if p.suffix in NATIVE_SOURCES]
    assert native == []
