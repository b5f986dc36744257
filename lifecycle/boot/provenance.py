"""Snapshots a boot keeps of what it ran: the resolved manifest, its patches, the image labels.

They live under `$LIFECYCLE_HOME/evidence/{manifests,patches,images}/`, content-named, so
the archive can carry them to S3 and an audit can answer from them after the checkout or
the image is gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lifecycle.ledger import Ledger
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.digest import canonical_form, patch_digests


def manifest_snapshot_path(home: Path, digest: str) -> Path:
    """`evidence/manifests/<digest>.json`: {"digest", "file", "canonical", "patches"}."""
    return home / "evidence" / "manifests" / f"{digest}.json"


def patch_path(home: Path, sha256: str) -> Path:
    """`evidence/patches/<sha256>.patch`: the patch's bytes."""
    return home / "evidence" / "patches" / f"{sha256}.patch"


def image_snapshot_path(home: Path, image_id: str) -> Path:
    """`evidence/images/<hex>.json`: {"id", "tags", "labels"}."""
    return home / "evidence" / "images" / f"{image_id.removeprefix('sha256:')}.json"


def keep_provenance(
    ledger: Ledger, loaded: LoadedManifest, digest: str, image: dict[str, Any]
) -> None:
    """Write the snapshots once (they are content-named, so an existing one is the same)."""
    home = ledger.home
    patches = patch_digests(loaded)
    for (_, sha256), source in zip(patches, loaded.patch_files, strict=True):
        if not patch_path(home, sha256).is_file():
            ledger.keep_evidence("patches", f"{sha256}.patch", source.read_bytes())
    if not manifest_snapshot_path(home, digest).is_file():
        snapshot = {
            "digest": digest,
            "file": str(loaded.file),
            "canonical": canonical_form(loaded),
            "patches": [{"file": file, "sha256": sha} for file, sha in patches],
        }
        ledger.keep_evidence("manifests", f"{digest}.json", _dumps(snapshot))
    if not image_snapshot_path(home, image["id"]).is_file():
        name = image_snapshot_path(home, image["id"]).name
        ledger.keep_evidence("images", name, _dumps(image))


def _dumps(data: Any) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True).encode()
