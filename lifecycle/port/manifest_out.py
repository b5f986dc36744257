"""The new manifest: derived from the old one with `extends`, carried values written out.

The rule: the new manifest extends the ROOT of the old one's chain (the manifest that extends
nothing), and writes what the old manifest itself wrote over that root, with the engine pins,
the patch series and every tuned value replaced. So `port 0.30 0.31` writes `extends:
../0.30/manifest.yaml` and only what differs, like the hand-written 0.31; `port 0.31 0.32`
also extends 0.30 (carrying 0.31's own overrides), and chains never grow past two files: an
old release directory can be retired once nothing extends it.

Tuned values are written in full even where the root holds the same measurement, with
`status: carried` and `carried_from`, so that the file itself says they were not re-measured.
`carried_from` names the release the value was measured on: that of the manifest of the chain
that validated it (an inherited value was measured on the parent, not on OLD), or, for a value
carried already, the release it names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.load import deep_merge, manifest_ref, tuned_origins
from lifecycle.manifest.model import Patch, TunedValue
from lifecycle.manifest.repository import is_remote
from lifecycle.manifest.source import read_yaml
from lifecycle.port.outcome import TunedFate
from lifecycle.port.plan import PortPlan
from lifecycle.port.upstream import PinChange, base_image_pin, declaring_file

_ORDER = ("schema_version", "extends", "name", "engine", "upstream", "patches", "tuned")
_VERSIONISH = re.compile(r"[0-9][0-9A-Za-z.+!_-]*")


@dataclass(frozen=True)
class NewValues:
    """The new release's pins, engine keys and tuned values, as the new manifest writes them."""

    pins: tuple[PinChange, ...]  # vllm, flashinfer, base_image
    engine: dict[str, Any]
    tuned: dict[str, TunedValue]
    fates: dict[str, TunedFate]


def new_values(plan: PortPlan, flashinfer: PinChange) -> NewValues:
    """The pins (FlashInfer's read from the release by the caller) and tuned values of NEW."""
    engine = plan.loaded.manifest.engine
    image = base_image_pin(engine.base_image, plan.old.version, plan.new.version)
    vllm = PinChange("vllm", engine.vllm, plan.new.version, f"tag {plan.new.tag}")
    new_engine: dict[str, Any] = {"vllm": vllm.new, "flashinfer": flashinfer.new}
    if image.new != image.old:
        new_engine["base_image"] = image.new
    unconfirmed = {
        pin.name: f"{pin.new} carried from {plan.old_label}: {pin.reason}; check it, then "
        "delete this entry"
        for pin in (flashinfer, image)
        if pin.flagged
    }
    if unconfirmed:
        new_engine["unconfirmed"] = unconfirmed
    measured_in = {
        name: manifest_ref(file.parent, plan.request.manifests_dir)
        for name, file in tuned_origins(plan.loaded).items()
    }
    tuned = carry_tuned(plan.loaded.manifest.tuned, measured_in, plan.validated)
    fates = {
        name: TunedFate("validated", plan.new_label)
        if value.status == "validated"
        else TunedFate("carried", str(value.carried_from))
        for name, value in tuned.items()
    }
    return NewValues((vllm, flashinfer, image), new_engine, tuned, fates)


def carry_tuned(
    tuned: dict[str, TunedValue],
    measured_in: dict[str, str],
    validated: dict[str, TunedValue] | None = None,
) -> dict[str, TunedValue]:
    """Every tuned value as `carried` from the release it was measured on: the one whose
    manifest validated it (`measured_in`: name → release), or, for a value carried already,
    the release it names. But a value the existing NEW `validated` is kept as it is."""
    carried = {
        name: value.model_copy(
            update={"status": "carried", "carried_from": value.carried_from or measured_in[name]}
        )
        for name, value in tuned.items()
    }
    return {**carried, **(validated or {})}  # a validated one replaces its carried one in place


def manifest_data(
    loaded: LoadedManifest,
    new_dir: Path,
    engine: dict[str, Any],
    patches: list[Patch],
    tuned: dict[str, TunedValue],
) -> dict[str, Any]:
    """The new manifest's own keys (plain data), extending the root of the old chain."""
    # Both ends real paths: `extends` must not go through a symlink (`current -> 0.30`) that
    # may later point elsewhere, nor up through one the manifests were reached by.
    root, new_dir = loaded.chain[-1].resolve(), new_dir.resolve()
    own: dict[str, Any] = {}
    for file in reversed(loaded.chain[:-1]):  # from the root's child down to the old manifest
        own = deep_merge(own, read_yaml(file).data)
    own.pop("extends", None)
    _rebase_upstream(own, loaded, new_dir)
    data: dict[str, Any] = {
        **own,
        "schema_version": loaded.manifest.schema_version,
        "extends": Path(os.path.relpath(root, new_dir)).as_posix(),
        # OLD's own unconfirmed pins were about OLD's values: NEW lists only its own.
        "engine": {**_without(own.get("engine", {}), "unconfirmed"), **engine},
        "patches": [p.model_dump(mode="json", exclude_none=True) for p in patches],
        "tuned": {name: _tuned_data(value) for name, value in tuned.items()},
    }
    ordered = {key: data[key] for key in _ORDER if key in data}
    return {**ordered, **{k: v for k, v in data.items() if k not in ordered}}


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


def _tuned_data(value: TunedValue) -> dict[str, Any]:
    # status and carried_from first after the value: what a reader must see before the rest.
    data = value.model_dump(mode="json", exclude_none=True)
    first: dict[str, Any] = {
        k: data.pop(k) for k in ("value", "status", "carried_from") if k in data
    }
    return {**first, **data}


def tuned_block(name: str, value: TunedValue, indent: int) -> str:
    """One tuned value as the YAML lines of its key, at `indent`, laid out as a ported manifest
    writes it (`lifecycle tune` writes the values it measures so)."""
    text = yaml.dump(
        {name: _tuned_data(value)},
        Dumper=_Dumper,
        sort_keys=False,
        width=88 - indent,
        allow_unicode=True,
    )
    pad = " " * indent
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def render(data: dict[str, Any], header: list[str]) -> str:
    """YAML text: a comment header, then the keys in manifest order."""
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=88, allow_unicode=True)
    return "".join(f"# {line}\n".replace("# \n", "#\n") for line in header) + body


def _rebase_upstream(own: dict[str, Any], loaded: LoadedManifest, new_dir: Path) -> None:
    # A local upstream path is relative to the manifest that writes it; the copy moves.
    upstream = own.get("upstream")
    if not isinstance(upstream, dict) or "repository" not in upstream:
        return
    repository = str(upstream["repository"])
    if is_remote(repository) or Path(repository).is_absolute():
        return
    absolute = (declaring_file(loaded).parent / repository).resolve()  # what the port fetched
    own["upstream"] = {**upstream, "repository": os.path.relpath(absolute, new_dir)}


class _Dumper(yaml.SafeDumper):
    """Safe YAML laid out like the hand-written manifests: no aliases, list items indented."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Versions double-quoted (YAML reads 0.30 as 0.3); long prose folded, as people write it.
    style = None
    if _VERSIONISH.fullmatch(value):
        style = '"'
    elif "\n" in value:
        style = "|"
    elif len(value) > 72 and value == value.strip():
        style = ">"
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)
