"""The JIT caches every vLLM engine writes at boot, so manifests need not repeat them."""

from __future__ import annotations

from typing import Any

# Each env var moves one cache root off the container's ephemeral home into a mount we track.
# FlashInfer nests `.cache/flashinfer/<version>/<arch>/` under its base; the others use the
# directory as given. Inductor also spills precompiled headers into $TMPDIR (not tracked).
DEFAULT_CACHES: dict[str, dict[str, Any]] = {
    "vllm": {"path": "/var/cache/lifecycle/vllm", "env": "VLLM_CACHE_ROOT"},
    "flashinfer": {"path": "/var/cache/lifecycle/flashinfer", "env": "FLASHINFER_WORKSPACE_BASE"},
    "triton": {"path": "/var/cache/lifecycle/triton", "env": "TRITON_CACHE_DIR"},
    "inductor": {"path": "/var/cache/lifecycle/inductor", "env": "TORCHINDUCTOR_CACHE_DIR"},
}
