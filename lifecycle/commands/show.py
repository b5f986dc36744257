"""`lifecycle show`: the resolved manifest (after `extends`) and its digest."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml

from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.manifest.load import (
    canonical_form,
    manifest_digest,
    manifest_ref,
    patch_digests,
    tuned_origins,
)
from lifecycle.manifest.model import TunedValue
from lifecycle.report import Report
from lifecycle.table import lines_text


@dataclass(frozen=True)
class PatchDigest:
    """A patch of the series and the sha256 of its bytes."""

    file: str  # as the manifest names it
    sha256: str


@dataclass(frozen=True)
class ProfileCommand:
    """What a boot of a profile runs: its command and args, then the tuned engine arguments
    it gets (none unless it runs the engine)."""

    engine: bool
    command: tuple[str, ...]  # in full, tuned arguments included
    tuned_args: tuple[str, ...]


@dataclass(frozen=True)
class ShowReport(Report):
    """The resolved manifest of one release and what it is made of."""

    FORMAT: ClassVar[str] = "lifecycle-show/1"
    file: str
    extends_chain: tuple[str, ...]  # the manifests it extends, its parent first
    digest: str
    name: str
    pins: dict[str, str]
    unconfirmed: dict[str, str]  # pin -> why the port could not derive it; build refuses it
    patches: tuple[PatchDigest, ...]
    tuned: dict[str, TunedValue]
    tuned_from: dict[str, str]  # name -> the release whose manifest writes it (may be a parent)
    profiles: dict[str, ProfileCommand]
    manifest: dict[str, Any]  # the canonical resolved manifest
    registry: str | None = None  # where its images are pushed and pulled; not in the digest

    def text(self) -> str:
        """Human form: a header naming what needs re-validation, then the resolved YAML."""
        lines = [
            f"# {self.file}",
            *(f"#   extends {parent}" for parent in self.extends_chain),
            f"# digest sha256:{self.digest}",
        ]
        for name, why in self.unconfirmed.items():
            value = self.pins[name]
            lines.append(
                f"# pin {name}={value} UNCONFIRMED ({why})  <- build refuses it until checked"
            )
        for name, tuned in self.tuned.items():
            flag = "" if tuned.status == "validated" else "  <- NOT re-validated on this release"
            # Where it was measured: an inherited value was validated on the parent, not here.
            origin = f" from {tuned.carried_from}" if tuned.carried_from else ""
            origin = origin or f" on {self.tuned_from[name]}"
            lines.append(f"# tuned {name}={tuned.value} ({tuned.status}{origin}){flag}")
        for patch in self.patches:
            lines.append(f"# patch {patch.file} sha256:{patch.sha256[:16]}")
        for name, profile in self.profiles.items():
            lines.append(f"# profile {name}: {_command_line(profile)}")
        if self.registry is not None:
            lines.append("# registry: where its images are kept, not part of the digest")
        body = yaml.safe_dump(_without_nulls(_with_registry(self)), sort_keys=False, width=100)
        # The header's fields (a patch's file name, a pin's reason) one line each; the YAML
        # quotes what it holds.
        return lines_text(lines) + body


def run(ctx: Context, request: verbs.Show) -> ShowReport:
    """VERSION (or a manifest path) resolved: file, extends chain, digest, patches, what each
    profile runs, manifest."""
    loaded = load_manifest(find_manifest(ctx.manifests_dir, request.version))
    manifest = loaded.manifest
    return ShowReport(
        file=str(loaded.file),
        extends_chain=tuple(str(p) for p in loaded.chain[1:]),
        digest=manifest_digest(loaded),
        name=manifest.name,
        pins={
            "vllm": manifest.engine.vllm,
            "flashinfer": manifest.engine.flashinfer,
            "base_image": manifest.engine.base_image,
        },
        unconfirmed={str(pin): why for pin, why in manifest.engine.unconfirmed.items()},
        patches=tuple(PatchDigest(f, sha) for f, sha in patch_digests(loaded)),
        tuned=dict(manifest.tuned),
        tuned_from={
            name: manifest_ref(file.parent, ctx.manifests_dir)
            for name, file in tuned_origins(loaded).items()
        },
        profiles={
            name: ProfileCommand(
                profile.engine,
                tuple(manifest.boot_command(name)),
                tuple(manifest.tuned_args(name)),
            )
            for name, profile in manifest.profiles.items()
        },
        manifest=canonical_form(loaded),  # a credential in a URL is not in it
        registry=manifest.registry,
    )


def _with_registry(report: ShowReport) -> dict[str, Any]:
    """The manifest with its `registry:` where the manifest keeps it, after `name:`."""
    shown: dict[str, Any] = {}
    for key, value in report.manifest.items():
        shown[key] = value
        if key == "name":
            shown["registry"] = report.registry
    return shown


def _command_line(profile: ProfileCommand) -> str:
    """The command as a shell would take it, its tuned part marked: `vllm serve --model m
    [tuned: --gpu-memory-utilization 0.94]`."""
    own = shlex.join(profile.command[: len(profile.command) - len(profile.tuned_args)])
    if not profile.engine:
        return f"{own} [not the engine: no tuned args]"
    return f"{own} [tuned: {shlex.join(profile.tuned_args)}]" if profile.tuned_args else own


def _without_nulls(data: Any) -> Any:
    """Unset optional keys are noise in the human view (the JSON keeps them)."""
    if isinstance(data, dict):
        return {k: _without_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [_without_nulls(item) for item in data]
    return data
