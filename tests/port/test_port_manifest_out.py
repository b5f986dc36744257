"""The new manifest a port writes: what it extends, and where its carried values come from."""

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


def _inheriting_release(up: Upstream, project: Project) -> None:
    """1.1.0 extends 1.0.0: it inherits gpu_memory_utilization (measured on 1.0.0) and
    measures max_num_seqs itself; upstream has tagged 1.2.0 since."""
    project.manifest("1.0.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    _release(up, "1.1.0", 1)
    derived = project.manifests / "1.1.0"
    derived.mkdir()
    (derived / "manifest.yaml").write_text(
        "schema_version: 1\n"
        "extends: ../1.0.0/manifest.yaml\n"
        'engine: {vllm: "1.1.0", flashinfer: "1.0.0", base_image: "toy/engine:v1.1.0"}\n'
        "tuned:\n  max_num_seqs:\n    value: 64\n    status: validated\n"
        "    measured_on: toy 1.1.0\n    method: burst\n"
    )
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "1.1.0 by hand")
    _release(up, "1.2.0", 2)


def test_an_inherited_tuned_value_is_carried_from_the_release_that_measured_it(
    up: Upstream, project: Project
) -> None:
    _inheriting_release(up, project)

    run = project.port("1.1.0", "1.2.0", "--json")

    assert run.exit_code == 0, run.stderr
    assert run.report["tuned"] == {
        "gpu_memory_utilization": {"status": "carried", "carried_from": "1.0.0"},
        "max_num_seqs": {"status": "carried", "carried_from": "1.1.0"},
    }
    tuned = yaml.safe_load(project.shown("port/1.2.0", "manifests/1.2.0/manifest.yaml"))["tuned"]
    froms = {name: value["carried_from"] for name, value in tuned.items()}
    assert froms == {"gpu_memory_utilization": "1.0.0", "max_num_seqs": "1.1.0"}
    text = project.port("1.1.0", "1.2.1", "--release", "1.2.0", "--dry-run").stdout
    assert "  gpu_memory_utilization (measured on 1.0.0)\n" in text


def test_show_says_on_which_release_a_value_was_validated(up: Upstream, project: Project) -> None:
    _inheriting_release(up, project)

    code, out, err = _lifecycle(project.manifests, "show", "1.1.0")

    assert code == 0, err
    shown = [line for line in out.splitlines() if line.startswith("# tuned")]
    assert shown == [
        "# tuned gpu_memory_utilization=0.9 (validated on 1.0.0)",  # inherited, not 1.1.0's
        "# tuned max_num_seqs=64 (validated on 1.1.0)",
    ]
    _, out, _ = _lifecycle(project.manifests, "show", "1.1.0", "--json")
    assert json.loads(out)["tuned_from"] == {
        "gpu_memory_utilization": "1.0.0",
        "max_num_seqs": "1.1.0",
    }
