"""What a port gives git of `upstream.repository`: a manifest runs no command."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.home import Home
from lifecycle.port.upstream import ensure_mirror
from tests.port_support import PatchSpec, Project, Upstream, git

# Quoted as YAML: `--upload-pack` runs its value through the shell on the fetching side.
OPTION = "--upload-pack=touch PWNED; echo x:y"


@pytest.fixture
def up(tmp_path: Path) -> Upstream:
    """An upstream at v1.0.0."""
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def project(tmp_path: Path, up: Upstream) -> Project:
    """A repository holding manifests/."""
    return Project(tmp_path / "project", up)


def _manifest_from(project: Project, repository: str, patches: list[PatchSpec]) -> Path:
    """manifests/1.0 (committed) whose upstream.repository is `repository`, as YAML text."""
    directory = project.manifest("1.0", patches, commit=False)
    manifest = directory / "manifest.yaml"
    text = manifest.read_text()
    written = f"  repository: {project.upstream.path}\n"
    assert written in text
    manifest.write_text(text.replace(written, f"  repository: {repository}\n"))
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "manifest 1.0")
    return manifest


def _pwned(*roots: Path) -> list[Path]:
    return [found for root in roots for found in root.rglob("PWNED")]


def test_a_repository_git_would_read_as_an_option_is_refused_before_git_runs(
    project: Project, tmp_path: Path, isolated_home: Path
) -> None:
    manifest = _manifest_from(project, f"'{OPTION}'", [])
    project.upstream.tag("2.0.0")

    for run in (project.port("1.0", "2.0", "--dry-run"), project.port("1.0", "2.0")):
        assert run.exit_code == 2, run.stderr
        assert run.stderr.startswith(f"{manifest}:")
        assert "upstream.repository: must not begin with '-'" in run.stderr
    assert _pwned(tmp_path, isolated_home) == []
    assert not (isolated_home / "lifecycle" / "mirrors").exists()  # no git was run at all


def test_git_never_takes_the_source_for_an_option(tmp_path: Path, isolated_home: Path) -> None:
    # Past the manifest's check (a value that got by it): `--` keeps it a repository.
    mirror = ensure_mirror(Home(tmp_path / "home"), OPTION)

    assert mirror.warning is not None and "failed" in mirror.warning
    assert _pwned(tmp_path, isolated_home) == []
