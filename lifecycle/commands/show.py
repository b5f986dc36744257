"""`lifecycle show`: the resolved manifest (after `extends`) and its digest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.manifest.digest import canonical_form, manifest_digest, patch_digests


def show(manifests_dir: Path, ref: str) -> dict[str, Any]:
    """The report `show --json` prints: file, extends chain, digest, patches, manifest."""
    loaded = load_manifest(find_manifest(manifests_dir, ref))
    manifest = loaded.manifest
    return {
        "file": str(loaded.file),
        "extends_chain": [str(p) for p in loaded.chain[1:]],
        "digest": manifest_digest(loaded),
        "name": manifest.name,
        "pins": {
            "vllm": manifest.engine.vllm,
            "flashinfer": manifest.engine.flashinfer,
            "base_image": manifest.engine.base_image,
        },
        "unconfirmed": dict(manifest.engine.unconfirmed),
        "patches": [{"file": f, "sha256": sha} for f, sha in patch_digests(loaded)],
        "tuned": {k: v.model_dump(mode="json") for k, v in manifest.tuned.items()},
        "manifest": canonical_form(loaded),
    }


def render_text(report: dict[str, Any]) -> str:
    """Human form: a header naming what needs re-validation, then the resolved YAML."""
    lines = [
        f"# {report['file']}",
        *(f"#   extends {parent}" for parent in report["extends_chain"]),
        f"# digest sha256:{report['digest']}",
    ]
    for name, why in report["unconfirmed"].items():
        value = report["pins"][name]
        lines.append(f"# pin {name}={value} UNCONFIRMED ({why})  <- build refuses it until checked")
    for name, tuned in report["tuned"].items():
        flag = "" if tuned["status"] == "validated" else "  <- NOT re-validated on this release"
        origin = f" from {tuned['carried_from']}" if tuned.get("carried_from") else ""
        lines.append(f"# tuned {name}={tuned['value']} ({tuned['status']}{origin}){flag}")
    for patch in report["patches"]:
        lines.append(f"# patch {patch['file']} sha256:{patch['sha256'][:16]}")
    body = yaml.safe_dump(_without_nulls(report["manifest"]), sort_keys=False, width=100)
    return "\n".join(lines) + "\n" + body


def _without_nulls(data: Any) -> Any:
    """Unset optional keys are noise in the human view (the JSON keeps them)."""
    if isinstance(data, dict):
        return {k: _without_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [_without_nulls(item) for item in data]
    return data
