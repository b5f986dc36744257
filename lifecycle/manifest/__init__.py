"""Manifests: one pinned engine release, its patch series and its tuned values."""

from __future__ import annotations

from lifecycle.manifest.load import LoadedManifest, find_manifest, load_manifest
from lifecycle.manifest.model import Manifest

__all__ = ["LoadedManifest", "Manifest", "find_manifest", "load_manifest"]
