"""Shared fixtures: the real services (tests/services.py) and a home dir tests cannot escape."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lifecycle.cli import cli

pytest_plugins = ["tests.services"]

REPO = Path(__file__).resolve().parent.parent

# `make test` runs these (files, or FILE::TEST) first, one at a time, then the rest three at a
# time (pytest-xdist, a file per worker): each here either removes engine images others boot
# (the demo's), or holds its commands to a time or memory bound another test's load would break.
SERIAL = {
    "test_bad_input.py",  # each bad input refused within 2 s and 200 MB
    "test_bounded_s3.py",  # every command within 45 s of a silent S3 server
    "test_hung_endpoints.py",  # the same of a hung dockerd; removes images
    "test_s3_waiting.py",
    "test_teardown.py::test_images_this_home_built_go_unless_a_cache_or_container_uses_them",
    "test_images.py",  # pulled by digest: removed first
    "test_build_engine.py",
    "test_port_demo.py",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SERIAL or f"{item.path.name}::{item.name}" in SERIAL:
            item.add_marker(pytest.mark.serial)


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


# ---- the demo project the teardown and plan/apply tests share -----------------------------------


@pytest.fixture
def project(
    tmp_path: Path,
    repo_root: Path,
    demo_images: None,
    s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Path]:
    """A project with the demo manifests, demo/0.2 built, archiving to the test bucket."""
    root = tmp_path / "project"
    for version in ("0.1", "0.2"):
        shutil.copytree(repo_root / f"manifests/demo/{version}", root / f"manifests/demo/{version}")
    (root / "hooks").mkdir()
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/test")
    monkeypatch.chdir(root)
    built = CliRunner().invoke(
        cli, ["--manifests", str(root / "manifests"), "build", "demo/0.2"], catch_exceptions=False
    )
    assert built.exit_code == 0, built.output
    yield root
