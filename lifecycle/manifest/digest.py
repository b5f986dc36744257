"""The manifest digest: what an image, a cache and a result are traced back to."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from lifecycle.manifest.load import LoadedManifest

_DOMAIN = b"lifecycle/manifest/v1\n"


def canonical_form(loaded: LoadedManifest) -> dict[str, Any]:
    """The resolved manifest as JSON data; `extends` is where it came from and `registry` where
    its images are kept, not what it is."""
    return loaded.manifest.model_dump(mode="json", exclude={"extends", "registry"})


def manifest_digest(loaded: LoadedManifest) -> str:
    """sha256 over the canonical resolved manifest, then each patch's bytes in series order.

    Key order, comments and YAML layout do not enter it; one patch byte or the order does.
    Every part is length-prefixed so that no two different inputs concatenate alike.
    """
    canonical = json.dumps(
        canonical_form(loaded), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    digest = hashlib.sha256(_DOMAIN)
    digest.update(b"%d\n" % len(canonical) + canonical)
    for patch_file in loaded.patch_files:
        content = patch_file.read_bytes()
        digest.update(b"%d\n" % len(content) + content)
    return digest.hexdigest()


def patch_digests(loaded: LoadedManifest) -> list[tuple[str, str]]:
    """(file as written in the manifest, sha256 of its bytes) for each patch, in order."""
    return [
        (patch.file, hashlib.sha256(path.read_bytes()).hexdigest())
        for patch, path in zip(loaded.manifest.patches, loaded.patch_files, strict=True)
    ]
