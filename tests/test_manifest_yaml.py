"""Reading YAML: merge keys, marks through aliases, the same answers without libyaml.

Hostile and broken files (alias bombs, deep nesting, oversized files) are corpus cases in
tests/bad_input/; these are the files that must load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lifecycle.manifest import load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.manifest.source import Mark, read_yaml

MERGED = """\
schema_version: 1
name: demo
engine:
  vllm: "0.31.0"
  flashinfer: "0.7.0"
  base_image: demo:1
  package_dir: /opt/engine
upstream:
  repository: https://example.invalid/engine.git
profiles:
  base: &base
    command: [vllm, serve]
    args: [--model, /m]
    env: {VLLM_LOGGING_LEVEL: INFO}
  serve:
    <<: *base
    args: [--model, /other]
  both:
    <<: [{ipc: host, args: [first]}, {ipc: private, gpus: all}]
"""


@pytest.fixture(params=["libyaml", "python"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run once with libyaml's loader and once as on a PyYAML built without it."""
    if request.param == "python":
        monkeypatch.delattr(yaml, "CSafeLoader")
    return str(request.param)


def test_a_merge_key_then_an_override_loads(tmp_path: Path, loader: str) -> None:
    file = tmp_path / "manifest.yaml"
    file.write_text(MERGED)
    profiles = load_manifest(file).manifest.profiles
    assert profiles["serve"].command == ["vllm", "serve"]  # merged
    assert profiles["serve"].args == ["--model", "/other"]  # overridden
    assert profiles["serve"].env == {"VLLM_LOGGING_LEVEL": "INFO"}
    # In a list of merged mappings the first one wins; keys of the mapping itself win over all.
    assert (profiles["both"].ipc, profiles["both"].gpus, profiles["both"].args) == (
        "host",
        "all",
        ["first"],
    )


def test_marks_say_where_a_merged_value_was_written(tmp_path: Path, loader: str) -> None:
    file = tmp_path / "manifest.yaml"
    file.write_text(MERGED)
    located = read_yaml(file)
    assert located.values[("profiles", "serve", "args")] == Mark(file, 17, 11)  # its own
    assert located.values[("profiles", "serve", "command")] == Mark(file, 12, 14)  # the anchor's


def test_a_merged_manifest_has_the_digest_of_the_same_manifest_written_out(
    tmp_path: Path, loader: str
) -> None:
    merged, written = tmp_path / "merged", tmp_path / "written"
    for directory in (merged, written):
        directory.mkdir()
    (merged / "manifest.yaml").write_text(MERGED)
    (written / "manifest.yaml").write_text(
        yaml.safe_dump(yaml.safe_load(MERGED))  # merged by PyYAML itself
    )
    assert manifest_digest(load_manifest(merged / "manifest.yaml")) == manifest_digest(
        load_manifest(written / "manifest.yaml")
    )
