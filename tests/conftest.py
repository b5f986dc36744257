"""Shared fixtures: the real services (tests/services.py) and a home dir tests cannot escape."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.services"]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point HOME and LIFECYCLE_HOME into tmp, so no test reads or writes the real user state."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LIFECYCLE_HOME", str(home / "lifecycle"))
    monkeypatch.delenv("LIFECYCLE_MANIFESTS", raising=False)
    return home


@pytest.fixture
def repo_root() -> Path:
    """The checkout under test."""
    return REPO
