"""A finished ladder's value, written into its manifest with the conditions it was measured in.

Once per pin and argument (journalled), whatever resumes ask. Only the value's own block under
`tuned:` is rewritten, so the diff a reviewer reads is the measurement; the file is replaced only
once the result loads as a valid manifest. `--revalidate` proposes instead of overwriting.

The value is written only into the manifest the rungs measured: one whose digest moved since the
night began (edited while it ran) gets the value proposed, not written. A night killed between
its write and its journal finds its own block on resume and journals it, never writes it again
with the provenance of the rewritten manifest's build, which no rung booted.

The image a value is valid for is the one its rungs' boots recorded, not the one the pin's tag
names when the night settles: a rebuild retags it, and a resumed night boots the new image. Rungs
that booted different images measured no single build: their value is proposed, not written.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.ledger.boots import boot_by_id
from lifecycle.manifest import LoadedManifest, load_manifest
from lifecycle.manifest.load import canonical_form, manifest_digest
from lifecycle.manifest.model import TunedValue, Validity
from lifecycle.manifest.source import read_yaml
from lifecycle.night.engine import Pin
from lifecycle.night.journal import NightJournal
from lifecycle.night.ladder import STATES, WRITTEN, PinLadderView
from lifecycle.night.plan import Ladder
from lifecycle.port.manifest_out import tuned_block

PROPOSED = "ladder:proposed"


@dataclass(frozen=True)
class Decision:
    """What a pin's ladder led to."""

    pin: str
    argument: str
    action: str  # written | proposed | none | pending
    value: float | None
    detail: str
    file: str | None = None


def settle(
    journal: NightJournal,
    ladder: Ladder,
    climbed: PinLadderView,
    pin: Pin,
    *,
    revalidate: bool,
    archive: str | None,
    checkpoint: Checkpoint = lambda point: None,
) -> Decision:
    """Write (or propose) the pin's value; once per pin and argument, however often it is asked."""
    name = ladder.argument
    if not climbed.complete:
        return Decision(pin.ref, name, "pending", None, "not every rung has run cold and warm")
    done = _journalled(journal, pin.ref, name)
    if done is not None:
        return done
    measured = journal.builds().get(pin.ref, pin.digest)
    now = load_manifest(pin.loaded.file)
    if (ours := _written_by(journal, now, name, measured)) is not None:
        return _journal(journal, Decision(pin.ref, name, "written", *ours, str(now.file)))
    current = pin.loaded.manifest.tuned.get(name)
    target = climbed.chosen
    if revalidate and current is not None:
        carried = float(current.value) if isinstance(current.value, int | float) else None
        rung = climbed.rung(carried) if carried is not None else None
        if rung is None or not rung.clears:
            detail = (
                f"carried {current.value} does not clear {ladder.floor_mib:g} MiB cold and warm;"
                f" proposed {target:g}: {climbed.why}"
                if target is not None
                else f"carried {current.value} does not clear, and no rung does"
            )
            return _journal(journal, Decision(pin.ref, name, "proposed", target, detail))
        target = carried
    if target is None:
        return Decision(pin.ref, name, "none", None, climbed.why)
    image, booted = _booted_image(journal, climbed)
    if image is None:
        detail = (
            f"the rungs of {pin.ref} did not all boot one recorded image ({booted}); {target:g}"
            " is proposed, not written: tune again with --new to measure every rung on one image"
        )
        return _journal(journal, Decision(pin.ref, name, "proposed", target, detail))
    if (moved := _moved(pin, now, measured, journal.night.id)) is not None:
        detail = (
            f"{now.file} changed since the night measured it ({moved}); {target:g} is proposed,"
            f" not written: write it by hand, or `lifecycle build {pin.ref}` and tune again to"
            " measure the manifest as it is now"
        )
        return _journal(journal, Decision(pin.ref, name, "proposed", target, detail))
    value = validated(ladder, climbed, pin, target, journal, archive, image)
    write_tuned(pin.loaded.file, name, value)
    checkpoint("night-written")
    detail = f"{target:g} validated: {value.margin}"
    return _journal(
        journal, Decision(pin.ref, name, "written", target, detail, str(pin.loaded.file))
    )


def validated(
    ladder: Ladder,
    climbed: PinLadderView,
    pin: Pin,
    value: float,
    journal: NightJournal,
    archive: str | None,
    image_id: str,
) -> TunedValue:
    """The tuned value as the manifest records it: measured, and valid for what it saw (the
    image `image_id`, which its rungs booted)."""
    rung = climbed.rung(value)
    assert rung is not None and rung.clears, "only a clearing rung is written"
    margins = {s: m.margin_mib for s in STATES if (m := rung.measured[s]).margin_mib is not None}
    engine = pin.loaded.manifest.engine
    rungs = ", ".join(f"{r:g}" for r in ladder.rungs)
    return TunedValue(
        value=value,
        status="validated",
        measured_on=(
            f"{engine.vllm_dist} {engine.vllm} + {engine.flashinfer_dist} {engine.flashinfer}"
            f" on {pin.tag}"
        ),
        method=(
            f"{ladder.argument} ladder ({rungs}) at the forced shape ({ladder.shape.what}), each"
            " rung cold and warm, no observing hook attached; the highest value whose margin"
            f" clears {ladder.floor_mib:g} MiB in both"
        ),
        margin=", ".join(f"{margins[s]:.1f} MiB {s}" for s in STATES)
        + f" at {ladder.shape.what} (floor {ladder.floor_mib:g} MiB)",
        measure=ladder.method(),
        validity=Validity(
            measured_at=journal.stamp(),
            night=journal.night.id,
            image_id=image_id,
            manifest_digest=pin.digest,
            cache_states=["cold", "warm"],
            observers=[],
            floor_mib=ladder.floor_mib,
            predicted_mib=rung.predicted_mib,
            measured_mib={"cold": margins["cold"], "warm": margins["warm"]},
            archive=archive,
        ),
    )


def _booted_image(journal: NightJournal, climbed: PinLadderView) -> tuple[str | None, str]:
    """The image every boot of the climb ran, as the boots recorded it (None when they ran
    several, or one is not recorded), and which image booted which rungs, in words."""
    booted: dict[str, list[str]] = {}
    for rung in climbed.rungs:
        for state, measured in rung.measured.items():
            if measured.boot_id is None:  # nothing booted (a pre-boot hook said no)
                continue
            image = measured.image_id or _recorded_image(journal, measured.boot_id)
            booted.setdefault(image, []).append(f"{rung.value:g} {state}")
    said = "; ".join(f"{_short(image)}: {', '.join(rungs)}" for image, rungs in booted.items())
    one = len(booted) == 1 and UNRECORDED not in booted
    return next(iter(booted)) if one else None, said


UNRECORDED = "no recorded image"


def _recorded_image(journal: NightJournal, boot_id: str) -> str:
    """The image the boot's ledger row names: a summary journalled before summaries carried it
    (a night resumed across an upgrade). On a cluster the row is on the node: unrecorded."""
    record = boot_by_id(journal.ledger, boot_id)
    return record.image_id if record is not None else UNRECORDED


def _short(image: str) -> str:
    return image[: len("sha256:") + 12] if image.startswith("sha256:") else image


def _written_by(
    journal: NightJournal, now: LoadedManifest, name: str, measured: str
) -> tuple[float | None, str] | None:
    """(value, detail) of the block this night already wrote (killed before journalling it):
    its validity names this night and the digest it measured."""
    tuned = now.manifest.tuned.get(name)
    validity = tuned.validity if tuned is not None else None
    if tuned is None or validity is None:
        return None
    if (validity.night, validity.manifest_digest) != (journal.night.id, measured):
        return None
    value = float(tuned.value) if isinstance(tuned.value, int | float) else None
    return value, f"{tuned.value} validated: {tuned.margin}"


def _moved(pin: Pin, now: LoadedManifest, measured: str, night: str) -> str | None:
    """What changed in the manifest since the night measured it (`measured`, its digest at the
    night's start), in words; None when it is still the manifest the rungs booted, or only
    `night`'s own writes moved it."""
    digest = manifest_digest(now)
    if digest == measured and pin.digest == measured:
        return None
    moved = f"sha256:{measured[:12]}, now {digest[:12]}"
    if pin.digest != measured:  # this resume loaded it after the change: no before to compare
        return moved
    before, after = canonical_form(pin.loaded), canonical_form(now)
    tuned_now = after.get("tuned", {})
    tuned = _changed(before.get("tuned", {}), tuned_now)
    changed = [k for k in _changed(before, after) if k != "tuned"] + [f"tuned.{t}" for t in tuned]
    # This night's own writes: a value it wrote into the manifest this one extends (0.2 of 0.1,
    # written first) moves this digest too; that is no edit behind the rungs' back.
    ours = [t for t in tuned if _night_of(tuned_now.get(t)) == night]
    if changed and len(ours) == len(changed):
        return None
    return f"{', '.join(changed) or 'a patch file'}: {moved}"


def _night_of(tuned: dict[str, Any] | None) -> str | None:
    """The night a tuned block's validity names (as canonical_form has it), if any."""
    validity = (tuned or {}).get("validity") or {}
    night = validity.get("night")
    return night if isinstance(night, str) else None


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The keys whose values differ, either side."""
    return [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]


def _journalled(journal: NightJournal, pin: str, argument: str) -> Decision | None:
    for event in journal.events():
        if event.event in (WRITTEN, PROPOSED) and event.detail:
            detail = json.loads(event.detail)
            if (detail["pin"], detail["argument"]) == (pin, argument):
                return Decision(**detail)
    return None


def _journal(journal: NightJournal, decision: Decision) -> Decision:
    event = WRITTEN if decision.action == "written" else PROPOSED
    journal.event(event, json.dumps(decision.__dict__))
    return decision


INDENT = 2


def write_tuned(file: Path, name: str, value: TunedValue) -> None:
    """Set `tuned.<name>` in `file` to `value`; LifecycleError when the file's layout does not
    allow it (a flow-style mapping) or the result would not be a valid manifest. A file named
    through a link is written where it lives: replacing the link would leave the manifest it
    names without the value (and its patches, relative to it, unfound)."""
    file = file.resolve()
    text = file.read_text()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    located = read_yaml(file)
    key = located.keys.get(("tuned", name))
    tuned = located.keys.get(("tuned",))
    if key is not None:
        start, indent = key.line - 1, key.col - 1
        _refuse_flow(located.values.get(("tuned", name)), key.line, file)
        end = _block_end(lines, start, indent)
        lines[start:end] = [tuned_block(name, value, indent)]
    elif tuned is not None:
        start, indent = tuned.line - 1, tuned.col - 1
        _refuse_flow(located.values.get(("tuned",)), tuned.line, file)
        end = _block_end(lines, start, indent)
        lines[end:end] = [tuned_block(name, value, indent + INDENT)]
    else:
        lines.append("\ntuned:\n" + tuned_block(name, value, INDENT))
    _replace(file, "".join(lines))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The line after the block a key at `start` opens: the next line as little indented as
    the key, less the blank and comment lines just before it (they belong to what follows)."""
    end = start + 1
    while end < len(lines):
        stripped = lines[end].strip()
        if stripped and not stripped.startswith("#") and _indent(lines[end]) <= indent:
            break
        end += 1
    while end - 1 > start and _loose(lines[end - 1], indent):
        end -= 1
    return end


def _loose(line: str, indent: int) -> bool:
    stripped = line.strip()
    return not stripped or (stripped.startswith("#") and _indent(line) <= indent)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _refuse_flow(value_mark: object, key_line: int, file: Path) -> None:
    line = getattr(value_mark, "line", None)
    if line == key_line:
        raise LifecycleError(
            f"{file}:{key_line}: tuned values written on one line ({{...}}) cannot be rewritten"
            " in place; write them as a block, one key a line"
        )


def _replace(file: Path, text: str) -> None:
    fd, temp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as out:  # a full disk fails here: nothing is left beside it
            out.write(text)
            out.flush()
            os.fsync(out.fileno())  # the value on disk before the name is, whatever comes
        Path(temp).chmod(file.stat().st_mode & 0o777)
        load_manifest(Path(temp))  # what is written must load, extends and patches included
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    Path(temp).replace(file)
