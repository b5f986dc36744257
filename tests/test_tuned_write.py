"""A measured value is written into its manifest in place: only its own block changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lifecycle.errors import LifecycleError
from lifecycle.manifest import load_manifest
from lifecycle.manifest.model import Evidence, LadderMethod, Shape, TunedValue, Validity
from lifecycle.night.settle import write_tuned

REPO = Path(__file__).resolve().parent.parent

MEASURED = TunedValue(
    value=0.91,
    status="validated",
    measured_on="demollm 0.2.0 + demoinfer 0.2.0 on lifecycle/demo:0.2.0-abc",
    method="gpu_memory_utilization ladder (0.9, 0.91, 0.92) at the forced shape",
    margin="789.4 MiB cold, 813.4 MiB warm at one request carrying 64 prompts (floor 40 MiB)",
    measure=LadderMethod(
        rungs=[0.9, 0.91, 0.92],
        shape=Shape(what="one request carrying 64 prompts", args=["--forced-prompts", "64"],
                    path=Evidence(log=["prompts=64 "])),
        margin="demo:forced_step_margin_mib",
        floor_mib=40,
    ),
    validity=Validity(
        measured_at="2026-12-01T17:20:24.453+00:00", night="n-1", image_id="sha256:abc",
        manifest_digest="0" * 64, cache_states=["cold", "warm"], observers=[], floor_mib=40,
        predicted_mib=840, measured_mib={"cold": 789.4, "warm": 813.4},
    ),
)  # fmt: skip


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    for version in ("0.1", "0.2"):
        shutil.copytree(REPO / f"manifests/demo/{version}", tmp_path / f"demo/{version}")
    return tmp_path / "demo"


def test_the_carried_block_becomes_the_measured_one_and_nothing_else_moves(
    manifests: Path,
) -> None:
    file = manifests / "0.2/manifest.yaml"
    before = file.read_text().splitlines()
    write_tuned(file, "gpu_memory_utilization", MEASURED)
    after = file.read_text().splitlines()
    start = before.index("tuned:")
    assert after[: start + 1] == before[: start + 1]  # header comments, engine, patches
    assert after[start + 1] == "  gpu_memory_utilization:"
    assert after[start + 2 : start + 4] == ["    value: 0.91", "    status: validated"]
    tuned = load_manifest(file).manifest.tuned["gpu_memory_utilization"]
    assert tuned == MEASURED  # every field, the validity record included, reads back


def test_a_value_only_inherited_is_added_to_the_manifest_named(manifests: Path) -> None:
    file = manifests / "0.2/manifest.yaml"
    text = file.read_text()
    file.write_text(text[: text.index("tuned:")] + "# the end\n")
    write_tuned(file, "gpu_memory_utilization", MEASURED)
    assert file.read_text().startswith(text[: text.index("tuned:")] + "# the end\n\ntuned:\n")
    assert load_manifest(file).manifest.tuned["gpu_memory_utilization"] == MEASURED
    # Another value joins the same `tuned:` block.
    other = MEASURED.model_copy(update={"value": 256, "measure": None, "validity": None})
    write_tuned(file, "max_num_seqs", other)
    tuned = load_manifest(file).manifest.tuned
    assert list(tuned) == ["gpu_memory_utilization", "max_num_seqs"]


def test_a_flow_style_block_or_an_invalid_result_leaves_the_file_untouched(
    manifests: Path,
) -> None:
    file = manifests / "0.2/manifest.yaml"
    text = file.read_text()
    flow = text[: text.index("tuned:")] + "tuned: {gpu_memory_utilization: {value: 0.92}}\n"
    file.write_text(flow)
    with pytest.raises(LifecycleError, match="cannot be rewritten in place"):
        write_tuned(file, "gpu_memory_utilization", MEASURED)
    assert file.read_text() == flow
    file.write_text(text)
    broken = MEASURED.model_copy(update={"value": 1.5})  # out of (0, 1]: refused on load
    with pytest.raises(LifecycleError):
        write_tuned(file, "gpu_memory_utilization", broken)
    assert file.read_text() == text
    assert [p.name for p in file.parent.iterdir() if p.name.startswith(".")] == []
