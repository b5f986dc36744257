"""Snapshots a boot keeps of what it ran: the resolved manifest, its patches, the image labels.

They live under `$LIFECYCLE_HOME/evidence/{manifests,patches,images}/` (lifecycle.home),
content-named, so the archive can carry them to S3 and an audit can answer from them after
the checkout or the image is gone.
"""

from __future__ import annotations

import json
from typing import Any

from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.load import canonical_form, patch_digests


def keep_provenance(
    ledger: Ledger, home: Home, loaded: LoadedManifest, digest: str, image: dict[str, Any]
) -> None:
    """Write the snapshots (the manifest's and the patches' once: they are content-named)."""
    patches = patch_digests(loaded)
    for (_, sha256), source in zip(patches, loaded.patch_files, strict=True):
        if not home.patch_copy(sha256).is_file():
            ledger.keep_evidence("patches", f"{sha256}.patch", source.read_bytes())
    if not home.manifest_snapshot(digest).is_file():
        snapshot = {
            "digest": digest,
            "file": str(loaded.file),
            "canonical": canonical_form(loaded),
            "patches": [{"file": file, "sha256": sha} for file, sha in patches],
        }
        ledger.keep_evidence("manifests", f"{digest}.json", _dumps(snapshot))
    # Named by the image's id, but what dockerd knows of it grows (a push, a pull by digest):
    # the snapshot follows it.
    kept = home.image_snapshot(image["id"])
    if not kept.is_file() or kept.read_bytes() != _dumps(image):
        ledger.keep_evidence("images", kept.name, _dumps(image))


def _dumps(data: Any) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True).encode()
