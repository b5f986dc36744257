"""The build plan of the production manifests (they cannot be built here: no base images)."""

from __future__ import annotations

import functools
import json
import re
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from docker.errors import ImageNotFound

from lifecycle.build.engine import _context_tar, find_built
from lifecycle.build.plan import (
    BAKED_LABEL,
    CREATED_LABEL,
    SourceInfo,
    image_tag,
    plan_build,
)
from lifecycle.cli import cli
from lifecycle.ledger import Ledger
from lifecycle.manifest import load_manifest
from lifecycle.manifest.load import manifest_digest, patch_digests

WHEN = datetime(2026, 10, 10, 6, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("version", "flashinfer"), [("0.30", "0.6.18.post1"), ("0.31", "0.7.0.post1")]
)
def test_production_dockerfile(repo_root: Path, version: str, flashinfer: str) -> None:
    loaded = load_manifest(repo_root / f"manifests/{version}/manifest.yaml")
    plan = plan_build(loaded, created=WHEN, source=SourceInfo("git@example:ops.git", "abc123"))
    lines = plan.dockerfile.splitlines()
    assert f"FROM vllm/vllm-openai:v{version}.0" in lines
    # pins installed, series applied to the engine's package dir, then pins checked, in order
    steps = [line for line in lines if line.startswith(("COPY", "RUN"))]
    assert steps == [
        "COPY lifecycle/ /opt/lifecycle/build/",
        "RUN python3 /opt/lifecycle/build/pins.py install",
        "RUN sh /opt/lifecycle/build/apply-series.sh /usr/local/lib/python3.12/dist-packages/vllm",
        # the manifest's entry points, as a dist-info beside the engine's package
        "COPY lifecycle/entry-points/ /usr/local/lib/python3.12/dist-packages/",
        "RUN python3 /opt/lifecycle/build/pins.py check",
    ]
    info = "lifecycle/entry-points/lifecycle_entry_points_vllm_prod-0.dist-info"
    assert plan.context[f"{info}/entry_points.txt"].decode() == (
        "[vllm.general_plugins]\n"
        "lifecycle_provenance = vllm.plugins.lifecycle_provenance:log_provenance\n"
        "lifecycle_kv_tier = vllm.plugins.lifecycle_kv_tier:log_kv_tier\n"
    )
    assert json.loads(plan.context["lifecycle/entry_points.json"]) == {
        "vllm.general_plugins": {
            "lifecycle_provenance": "vllm.plugins.lifecycle_provenance:log_provenance",
            "lifecycle_kv_tier": "vllm.plugins.lifecycle_kv_tier:log_kv_tier",
        }
    }
    assert json.loads(plan.context["lifecycle/pins.json"]) == {
        "vllm": f"{version}.0",
        "flashinfer-python": flashinfer,
    }
    series = plan.context["lifecycle/series.tsv"].decode().splitlines()
    assert [row.split("\t")[1] for row in series] == [p.file for p in loaded.manifest.patches]
    for row, patch_file in zip(series, loaded.patch_files, strict=True):
        assert plan.context[f"lifecycle/{row.split(chr(9))[0]}"] == patch_file.read_bytes()


def test_labels_carry_digest_pins_and_each_patch(repo_root: Path) -> None:
    loaded = load_manifest(repo_root / "manifests/0.31/manifest.yaml")
    plan = plan_build(loaded, created=WHEN, source=SourceInfo("git@example:ops.git", "abc123"))
    digest = manifest_digest(loaded)
    assert plan.labels["lifecycle.manifest.digest"] == digest
    assert (
        plan.tag
        == image_tag("vllm-prod", "0.31.0", digest)
        == f"lifecycle/vllm-prod:0.31.0-{digest[:12]}"
    )
    for index, (file, sha) in enumerate(patch_digests(loaded), start=1):
        assert plan.labels[f"lifecycle.patch.{index:02d}.file"] == file
        assert plan.labels[f"lifecycle.patch.{index:02d}.sha256"] == sha
    assert plan.labels["org.opencontainers.image.created"] == "2026-10-10T06:00:00+00:00"
    assert plan.labels["org.opencontainers.image.revision"] == "abc123"
    assert plan.labels["org.opencontainers.image.source"] == "git@example:ops.git"
    assert json.loads(plan.labels["lifecycle.tuned"]) == {
        "gpu_memory_utilization": {"value": 0.94, "status": "validated"}
    }


def _labels_read_back(label_instruction: str) -> dict[str, str]:
    """The labels of a LABEL instruction as dockerd reads them: inside double quotes a
    backslash escapes `"`, `$` and itself only."""
    word = r'"((?:[^"\\]|\\.)*)"'
    unescape = functools.partial(re.sub, r'\\(["$\\])', r"\1")
    pairs = re.findall(rf"{word}={word}", label_instruction)
    return {unescape(key): unescape(value) for key, value in pairs}


def test_all_labels_go_in_one_label_instruction(repo_root: Path) -> None:
    """dockerd turns labels sent beside the build into one LABEL step each (a layer and a
    container apiece); one instruction at the end of the Dockerfile is one step."""
    loaded = load_manifest(repo_root / "manifests/0.31/manifest.yaml")
    odd = SourceInfo('https://example/ops.git?a="b"&c=$HOME\\', "caf\u00e9")
    plan = plan_build(loaded, created=WHEN, source=odd)
    steps, _, instruction = plan.dockerfile.partition("\nLABEL ")
    assert steps.endswith("RUN python3 /opt/lifecycle/build/pins.py check")
    one_line = instruction.replace(" \\\n", " ")
    assert one_line.endswith("\n") and "\n" not in one_line[:-1]
    assert _labels_read_back(one_line) == plan.labels
    assert plan.context["Dockerfile"] == plan.dockerfile.encode()


def test_a_label_with_a_line_break_is_refused(repo_root: Path) -> None:
    loaded = load_manifest(repo_root / "manifests/0.31/manifest.yaml")
    with pytest.raises(ValueError, match="line break"):
        plan_build(loaded, created=WHEN, source=SourceInfo("url", "abc\ndef"))


def test_context_tar_is_reproducible(repo_root: Path) -> None:
    loaded = load_manifest(repo_root / "manifests/0.30/manifest.yaml")
    plan = plan_build(loaded, created=WHEN, source=SourceInfo())
    first, second = _context_tar(plan).getvalue(), _context_tar(plan).getvalue()
    assert first == second
    with tarfile.open(fileobj=_context_tar(plan)) as tar:
        assert sorted(tar.getnames()) == sorted(plan.context)


def test_dry_run_cli_prints_plan_and_needs_no_docker(
    repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    result = CliRunner().invoke(
        cli, ["--manifests", str(repo_root / "manifests"), "build", "0.31", "--dry-run", "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["dockerfile"].count("FROM vllm/vllm-openai:v0.31.0") == 1
    assert "Dockerfile" in plan["context"]


class _Images:
    """dockerd's images as the SDK gives them: those `present` now (others went since)."""

    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, image_id: str) -> SimpleNamespace:
        if image_id not in self.present:
            raise ImageNotFound(f"No such image: {image_id}")
        return SimpleNamespace(id=image_id)


def test_the_image_of_a_digest_is_the_newest_still_there_never_a_bake(tmp_path: Path) -> None:
    # Another home's teardown may remove an image between dockerd's list and its inspect.
    def listed(
        image_id: str, created: str, *, baked: bool = False, parent: str = ""
    ) -> dict[str, object]:
        labels = {CREATED_LABEL: created, **({BAKED_LABEL: "[]"} if baked else {})}
        return {"Id": image_id, "Labels": labels, "ParentId": parent}

    summaries = [
        listed("sha256:old", "2026-12-01T00:00:00+00:00"),
        listed("sha256:gone", "2026-12-03T00:00:00+00:00"),
        listed("sha256:bake", "2026-12-04T00:00:00+00:00", baked=True),
        listed("sha256:middle", "2026-12-02T00:00:00+00:00"),
        # A step built on it (a killed bake's COPY): its labels whole, its id sorting after.
        listed("sha256:step", "2026-12-02T00:00:00+00:00", parent="sha256:middle"),
    ]
    api = SimpleNamespace(images=lambda filters, all=False: summaries)  # a step dangles: listed
    ledger = Ledger.open(tmp_path / "home")  # no build recorded: found by its labels alone
    present = {"sha256:old", "sha256:middle", "sha256:bake", "sha256:step"}
    client = SimpleNamespace(api=api, images=_Images(present))
    assert find_built(client, ledger, "sha256:d").id == "sha256:middle"
    client = SimpleNamespace(api=api, images=_Images({"sha256:bake"}))
    assert find_built(client, ledger, "sha256:d") is None
    ledger.close()
