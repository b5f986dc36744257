"""The JIT caches every vLLM engine writes at boot, so manifests need not repeat them."""

from __future__ import annotations

from typing import Any

# Each env var moves one cache root off the container's ephemeral home into a mount we track.
# FlashInfer nests `.cache/flashinfer/<version>/<arch>/` under its base; the others use the
# directory as given. Inductor writes its precompiled header (~155 MB, torch 2.13) under
# /tmp/torchinductor_<user>/precompiled_headers whatever TORCHINDUCTOR_CACHE_DIR says, so every
# boot rebuilt it; turning precompiled headers off keeps boots warmest (measured on the
# stand-in, torch.compile s cold/warm/warm: untracked 17.7/7.1/7.4, the dir tracked as a cache
# 15.7/3.0/1.9 with 149 MB more to archive, off 14.1/1.7/1.5).
DEFAULT_CACHES: dict[str, dict[str, Any]] = {
    "vllm": {"path": "/var/cache/lifecycle/vllm", "env": "VLLM_CACHE_ROOT"},
    "flashinfer": {"path": "/var/cache/lifecycle/flashinfer", "env": "FLASHINFER_WORKSPACE_BASE"},
    "triton": {"path": "/var/cache/lifecycle/triton", "env": "TRITON_CACHE_DIR"},
    "inductor": {
        "path": "/var/cache/lifecycle/inductor",
        "env": "TORCHINDUCTOR_CACHE_DIR",
        "settings": {"TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0"},
    },
}
# Set by `lifecycle boot` in every container (the provenance plugin logs them); a profile may
# not set them.
BOOT_ENV = ("LIFECYCLE_BOOT_ID", "LIFECYCLE_MANIFEST_DIGEST", "LIFECYCLE_IMAGE")
