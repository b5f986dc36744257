"""A measured value is written into its manifest in place: only its own block changes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

import lifecycle.night.settle as settling
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.manifest import load_manifest
from lifecycle.manifest.model import Evidence, LadderMethod, Shape, TunedValue, Validity
from lifecycle.night.engine import Pin, RunSummary
from lifecycle.night.journal import BUILDS, NightJournal
from lifecycle.night.ladder import WRITTEN, climb
from lifecycle.night.plan import LoadedPlan, Plan
from lifecycle.night.prepare import prepare
from lifecycle.night.settle import Decision, settle, write_tuned

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


# A tune night of demo/0.2 whose rungs all ran: 0.91 clears the floor cold and warm, 0.92 does not.
TUNE = Plan.model_validate(
    {
        "schema_version": 1,
        "name": "tune-demo-0.2-gpu_memory_utilization",
        "pins": ["demo/0.2"],
        "ladders": [
            {
                "argument": "gpu_memory_utilization",
                "rungs": [0.91, 0.92],
                "shape": {
                    "what": "one request carrying 64 prompts",
                    "args": ["--forced-prompts", "64"],
                    "path": {"log": ["step 1: requests=1 prompts=64 "]},
                },
                "margin": "demo:forced_step_margin_mib",
                "floor_mib": 40,
            }
        ],
    }
)
MARGINS = {0.91: 789.4, 0.92: -29.8}
RUNGS = [f"demo/0.2:gpu_memory_utilization={v}:{s}" for s in ("cold", "warm") for v in MARGINS]


def _pin(manifests: Path, image_id: str) -> Pin:
    """demo/0.2 as `prepare` finds it now, with the image a night would have resolved."""
    pin = prepare(TUNE, manifests.parent, REPO, None).pins["demo/0.2"]
    return replace(pin, image={"id": image_id, "tags": [pin.tag], "labels": {}})


def _begun(tmp_path: Path, pin: Pin) -> NightJournal:
    stamp = lambda: datetime.now(UTC).isoformat(timespec="milliseconds")  # noqa: E731
    ledger = Ledger.open(tmp_path / "home")
    journal = NightJournal.begin(
        ledger, LoadedPlan(tmp_path / "ladder.yaml", TUNE), "tune", REPO, stamp
    )
    journal.event(BUILDS, json.dumps({pin.ref: pin.digest}))
    return journal


def _settled(
    journal: NightJournal, pin: Pin, booted: Mapping[str, str | None] | None = None
) -> Decision:
    """The night's settle once every rung ran cold and warm, each on the pin's image unless
    `booted` (cell id -> image id) says another."""
    ordered = list(prepare(TUNE, pin.loaded.file.parent.parent.parent, REPO, None).cells)
    booted = booted or {}
    runs = {
        (c.id, 1): RunSummary(
            cell=c.id, run=1, attempt=1, boot_id=f"b-{c.id}", host="h", outcome="ok",
            image_id=booted.get(c.id, pin.image["id"]), exit_code=0, instrumented=False,
            hooks=[], args=[], verdict="pass" if MARGINS[c.rung.value] >= 40 else "fail",
            checks=[], margin_mib=MARGINS[c.rung.value],
        )
        for c in ordered if c.rung is not None
    }  # fmt: skip
    ladder = TUNE.ladders[0]
    climbed = climb(ladder, pin.ref, ordered, runs, {})
    return settle(journal, ladder, climbed, pin, revalidate=False, archive=None)


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        (
            "drop_when: never; this is the demo's own patch",
            "drop_when: when upstream takes it",
            "patches",
        ),
        (
            "    status: carried\n",
            "    status: carried\n    note: 0.91 measured by hand\n",
            "tuned.gpu_memory_utilization",
        ),
    ],
    ids=["patch-metadata", "the-tuned-block-by-hand"],
)
def test_a_manifest_edited_while_the_rungs_ran_is_not_written_into(
    manifests: Path, tmp_path: Path, old: str, new: str, what: str
) -> None:
    pin = _pin(manifests, "sha256:measured")
    journal = _begun(tmp_path, pin)
    file = manifests / "0.2/manifest.yaml"
    file.write_text(file.read_text().replace(old, new))  # someone edits it mid-night
    edited = file.read_text()
    decision = _settled(journal, pin)
    assert file.read_text() == edited  # their edit stands; nothing the rungs did not measure
    assert (decision.action, decision.value) == ("proposed", 0.91)
    assert f"changed since the night measured it ({what}: sha256:{pin.digest[:12]}, now" in (
        decision.detail
    )
    assert "0.91 is proposed, not written" in decision.detail
    assert "\n" not in decision.detail


def test_a_tune_killed_between_its_write_and_its_journal_keeps_the_provenance_it_measured(
    manifests: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = manifests / "0.2/manifest.yaml"
    pin = _pin(manifests, "sha256:measured")
    journal = _begun(tmp_path, pin)

    class Killed(BaseException):
        """kill -9 right after the manifest was replaced, before the write is journalled."""

    def write_then_die(*args: object) -> None:
        write_tuned(*args)  # type: ignore[arg-type]
        raise Killed

    monkeypatch.setattr(settling, "write_tuned", write_then_die)
    with pytest.raises(Killed):
        _settled(journal, pin)
    monkeypatch.undo()
    written = file.read_text()
    validity = load_manifest(file).manifest.tuned["gpu_memory_utilization"].validity
    assert validity is not None and validity.manifest_digest == pin.digest
    # The resume: the manifest its write changed is another build, which no rung booted.
    resumed = _pin(manifests, "sha256:rebuilt")
    assert resumed.digest != pin.digest
    decision = _settled(journal, resumed, dict.fromkeys(RUNGS, "sha256:measured"))
    assert (decision.action, decision.value) == ("written", 0.91)
    assert file.read_text() == written  # image, digest and time of what the rungs measured
    assert [e.event for e in journal.events()].count(WRITTEN) == 1


@pytest.mark.parametrize("ours", [True, False], ids=["this-night", "another-night"])
def test_this_nights_own_write_into_the_manifest_this_one_extends_is_no_edit(
    manifests: Path, tmp_path: Path, ours: bool
) -> None:
    # demo/0.2 extends demo/0.1; made to inherit 0.1's block here, 0.2's digest moves when the
    # night writes 0.1's value first. Taken for an edit, 0.2's value was only proposed; a block
    # another night wrote there meanwhile is an edit all the same.
    child = manifests / "0.2/manifest.yaml"
    text = child.read_text()
    child.write_text(text[: text.index("tuned:")])
    pin = _pin(manifests, "sha256:measured")
    journal = _begun(tmp_path, pin)
    parent = manifests / "0.1/manifest.yaml"
    block = load_manifest(parent).manifest.tuned["gpu_memory_utilization"]
    validity = Validity(
        measured_at="t", night=journal.night.id if ours else "n-another",
        image_id="sha256:parent", manifest_digest="d", cache_states=["cold", "warm"],
        observers=[], floor_mib=40, measured_mib={"cold": 46.0, "warm": 50.0},
    )  # fmt: skip
    write_tuned(parent, "gpu_memory_utilization", block.model_copy(update={"validity": validity}))
    decision = _settled(journal, pin)
    expected = ("written", 0.91) if ours else ("proposed", 0.91)
    assert (decision.action, decision.value) == expected, decision.detail


def test_a_write_into_the_parent_is_no_edit_of_a_child_that_declares_the_value(
    manifests: Path, tmp_path: Path
) -> None:
    # demo/0.2 declares its own block (carried): 0.1's new validity is 0.1's alone.
    pin = _pin(manifests, "sha256:measured")
    journal = _begun(tmp_path, pin)
    parent = manifests / "0.1/manifest.yaml"
    block = load_manifest(parent).manifest.tuned["gpu_memory_utilization"]
    assert MEASURED.validity is not None
    validity = MEASURED.validity.model_copy(update={"night": "n-another"})
    write_tuned(parent, "gpu_memory_utilization", block.model_copy(update={"validity": validity}))
    assert (
        load_manifest(manifests / "0.2/manifest.yaml")
        .manifest.tuned["gpu_memory_utilization"]
        .validity
        is None
    )
    decision = _settled(journal, pin)
    assert (decision.action, decision.value) == ("written", 0.91), decision.detail


def test_the_validity_names_the_image_the_rungs_booted_not_the_one_the_tag_names_now(
    manifests: Path, tmp_path: Path
) -> None:
    # Every rung booted sha256:measured; then a rebuild retagged demo/0.2 (same manifest, new
    # image) and the night settled in a resume, whose pin resolves to the rebuilt image.
    pin = _pin(manifests, "sha256:rebuilt")
    journal = _begun(tmp_path, pin)
    decision = _settled(journal, pin, dict.fromkeys(RUNGS, "sha256:measured"))
    assert (decision.action, decision.value) == ("written", 0.91), decision.detail
    file = manifests / "0.2/manifest.yaml"
    validity = load_manifest(file).manifest.tuned["gpu_memory_utilization"].validity
    assert validity is not None and validity.image_id == "sha256:measured"


@pytest.mark.parametrize(
    "last", ["sha256:rebuilt", None], ids=["another-image", "no-record-of-its-image"]
)
def test_rungs_that_did_not_boot_one_recorded_image_propose_their_value(
    manifests: Path, tmp_path: Path, last: str | None
) -> None:
    # Killed in the last rung, rebuilt, resumed: that rung booted the new image (or its
    # summary and the ledger name none). The value was measured on no one build.
    pin = _pin(manifests, "sha256:measured")
    journal = _begun(tmp_path, pin)
    file = manifests / "0.2/manifest.yaml"
    before = file.read_text()
    decision = _settled(journal, pin, {RUNGS[-1]: last})
    assert (decision.action, decision.value) == ("proposed", 0.91)
    assert file.read_text() == before
    booted = f"{last or 'no recorded image'}: 0.92 warm"
    assert f"sha256:measured: 0.91 cold, 0.91 warm, 0.92 cold; {booted}" in decision.detail
    assert "0.91 is proposed, not written" in decision.detail
    assert "\n" not in decision.detail


def test_a_manifest_reached_through_a_link_is_written_where_it_lives(manifests: Path) -> None:
    """A measured value written to a manifest named through a symbolic link replaced the link
    with a file of its own: the manifest it pointed at never got the value, and the two
    diverged from then on. The value goes into the file the link names; the link stays."""
    real = manifests / "0.2/manifest.yaml"
    (manifests / "current").mkdir()
    link = manifests / "current/manifest.yaml"
    link.symlink_to(real)
    write_tuned(link, "gpu_memory_utilization", MEASURED)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert load_manifest(real).manifest.tuned["gpu_memory_utilization"] == MEASURED
    leftovers = [*real.parent.glob(".manifest.yaml.*"), *link.parent.glob(".*")]
    assert not leftovers
