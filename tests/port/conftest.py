"""The port tests' upstream and project: real git repositories in tmp dirs (tests.port_support)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.port_support import Project, Upstream


@pytest.fixture
def up(tmp_path: Path) -> Upstream:
    """An upstream at v1.0.0; each test writes its own history on from there."""
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def project(tmp_path: Path, up: Upstream) -> Project:
    """A repository holding manifests/ (test_port_demo.py has the demo's own)."""
    return Project(tmp_path / "project", up)
