"""The cache key: what decides whether a JIT cache's compiled artefacts are valid for a boot.

A key is the sha256 of its factors: the cache's name, the manifest digest (the resolved
manifest and every patch byte), the base image's digest (its id: the config digest, the same
on every host that has it, so it covers the compiler and libraries the engine JITs with), the
pinned engine versions and the GPU arch. Not the engine image's own id, which a rebuild of an
unchanged manifest changes (its `created` label): two hosts that build the same manifest on
the same base get the same key, so a cache one archived boots warm on the other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from lifecycle.build.plan import BASE_DIGEST_LABEL, FLASHINFER_LABEL, VLLM_LABEL

_DOMAIN = "lifecycle/cache-key/v2\n"


def key_factors(
    labels: Mapping[str, str], cache_name: str, manifest_digest: str, arch: str
) -> dict[str, Any]:
    """The factors of a cache key, from the labels of the image a boot runs."""
    return {
        "cache_name": cache_name,
        "manifest_digest": manifest_digest,
        "base_digest": labels.get(BASE_DIGEST_LABEL),
        "vllm": labels.get(VLLM_LABEL, ""),
        "flashinfer": labels.get(FLASHINFER_LABEL, ""),
        "arch": arch,
    }


def cache_key(factors: Mapping[str, Any]) -> str:
    """sha256 over the factors in canonical JSON."""
    text = json.dumps(dict(factors), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((_DOMAIN + text).encode()).hexdigest()
