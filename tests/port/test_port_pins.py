"""The new release's pins: which tag names it, and the base image bumped only where sure."""

from __future__ import annotations

import pytest
import yaml

from lifecycle.port.upstream import base_image_pin, release_candidates
from tests.port_support import Project, Upstream, git


@pytest.mark.parametrize(
    ("image", "old", "new", "bumped"),
    [
        ("vllm/vllm-openai:v0.31.0", "0.31.0", "0.32.0", "vllm/vllm-openai:v0.32.0"),
        # Only the release: the CUDA version holds "1.0" too, inside another version.
        ("toy/engine:v1.0-cuda12.1.0", "1.0", "1.1", "toy/engine:v1.1-cuda12.1.0"),
        ("toy/engine:1.0-cuda12.1.0", "1.0", "1.1", "toy/engine:1.1-cuda12.1.0"),
        (
            "registry.local:5000/toy:v1.0.0rc1",
            "1.0.0rc1",
            "1.0.0",
            "registry.local:5000/toy:v1.0.0",
        ),
    ],
)
def test_a_tag_naming_the_release_once_is_bumped_there_only(
    image: str, old: str, new: str, bumped: str
) -> None:
    pin = base_image_pin(image, old, new)
    assert (pin.new, pin.flagged) == (bumped, False)


@pytest.mark.parametrize(
    ("image", "old", "new", "why"),
    [
        # 0.30.1 is another release than 0.30: not the version the tag names.
        ("vllm/vllm-openai:v0.30.1", "0.30", "0.31", "its tag does not name 0.30"),
        ("toy/engine:v1.0-py1.0", "1.0", "1.1", "its tag names 1.0 2 times, not once"),
        ("toy/engine:latest", "1.0", "1.1", "its tag does not name 1.0"),
        ("registry.local:5000/toy", "1.0", "1.1", "its tag does not name 1.0"),
    ],
)
def test_a_tag_naming_the_release_ambiguously_is_carried_and_flagged(
    image: str, old: str, new: str, why: str
) -> None:
    pin = base_image_pin(image, old, new)
    assert (pin.new, pin.flagged, pin.reason) == (image, True, why)


def test_a_base_image_naming_the_release_twice_is_left_unconfirmed(
    up: Upstream, project: Project
) -> None:
    written = project.manifest("1.0", [], commit=False) / "manifest.yaml"
    text = written.read_text().replace("toy/engine:v1.0.0", "toy/engine:v1.0.0-base1.0.0")
    written.write_text(text)
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "1.0")
    up.commit("Release 2.0.0")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    image = next(p for p in run.report["pins"] if p["name"] == "base_image")
    assert (image["new"], image["flagged"]) == ("toy/engine:v1.0.0-base1.0.0", True)
    engine = yaml.safe_load(project.shown("port/2.0", "manifests/2.0/manifest.yaml"))["engine"]
    assert "base_image" not in engine  # 1.0's, inherited as it was
    assert "names 1.0.0 2 times" in engine["unconfirmed"]["base_image"]


def test_a_release_is_looked_for_normalized_then_as_written() -> None:
    assert release_candidates("1.1.0-rc1", None) == ["1.1.0rc1", "1.1.0-rc1"]
    assert release_candidates("demo/0.32", None) == ["0.32", "0.32.0"]
    assert release_candidates("1.1.0rc1", None) == ["1.1.0rc1"]
    assert release_candidates("1.1.0-rc1", "1.1.0rc1") == ["1.1.0rc1"]


def test_a_tag_spelled_as_new_is_found(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [])
    up.commit("Release candidate")
    up.tag("1.1.0-rc1")  # v1.1.0-rc1: not the normalized v1.1.0rc1

    run = project.port("1.0", "1.1.0-rc1", "--json")

    assert run.exit_code == 0, run.stderr
    assert (run.report["to"]["tag"], run.report["to"]["version"]) == ("v1.1.0-rc1", "1.1.0-rc1")
