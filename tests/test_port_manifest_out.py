"""The new manifest a port writes: what it extends."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from lifecycle.cli import cli
from lifecycle.manifest import load_manifest
from tests.port_support import PatchSpec, Project, Upstream, change_mix, git


@pytest.fixture
def up(tmp_path: Path) -> Upstream:
    """An upstream at v1.0.0."""
    return Upstream(tmp_path / "upstream")


@pytest.fixture
def project(tmp_path: Path, up: Upstream) -> Project:
    """A repository holding manifests/."""
    return Project(tmp_path / "project", up)


def _release(up: Upstream, version: str, line: int) -> None:
    up.edit("pkg/serve.py", lambda t: t.replace(f"VALUE_{line:02d} = {line}\n", "CHANGED = 1\n"))
    up.commit(f"Release {version}")
    up.tag(version)


def _lifecycle(manifests: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--manifests", str(manifests), *args])
    return result.exit_code, result.stdout, result.stderr


def _current_link(project: Project, tmp_path: Path) -> tuple[Path, str]:
    (project.manifests / "current").symlink_to("1.0.0")
    return project.manifests, "current"


def _file_link(project: Project, tmp_path: Path) -> tuple[Path, str]:
    old = project.manifests / "1.0.0"
    (old / "manifest.yaml").rename(old / "real.yaml")
    (old / "manifest.yaml").symlink_to("real.yaml")
    return project.manifests, "1.0.0"


def _project_link(project: Project, tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "link").symlink_to(project.path)
    return tmp_path / "link" / "manifests", "1.0.0"  # absolute, through the link


@pytest.mark.parametrize(
    ("layout", "extends"),
    [
        (_current_link, "../1.0.0/manifest.yaml"),
        (_file_link, "../1.0.0/real.yaml"),
        (_project_link, "../1.0.0/manifest.yaml"),
    ],
    ids=["manifests-current-link", "manifest-yaml-link", "project-through-a-link"],
)
def test_a_symlink_on_the_way_to_old_ports_and_extends_the_real_file(
    up: Upstream,
    project: Project,
    tmp_path: Path,
    layout: Callable[[Project, Path], tuple[Path, str]],
    extends: str,
) -> None:
    project.manifest("1.0.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    _release(up, "1.1.0", 1)
    manifests, old = layout(project, tmp_path)
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "--allow-empty", "-m", "layout")

    code, out, err = _lifecycle(manifests, "port", old, "1.1.0", "--json")

    assert code == 0, err
    assert json.loads(out)["commit"]
    written = yaml.safe_load(project.shown("port/1.1.0", "manifests/1.1.0/manifest.yaml"))
    assert written["extends"] == extends  # the real file, not through a link that may move
    checkout = tmp_path / "checkout"
    git(project.path, "worktree", "add", "-q", str(checkout), "port/1.1.0")
    (checkout / "manifests/current").unlink(missing_ok=True)  # NEW does not lean on it
    loaded = load_manifest(checkout / "manifests/1.1.0/manifest.yaml")
    assert loaded.chain[-1] == Path(os.path.normpath(checkout / "manifests/1.1.0" / extends))
    assert loaded.manifest.engine.vllm == "1.1.0"
