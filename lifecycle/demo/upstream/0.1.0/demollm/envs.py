"""Cache roots, resolved from the same environment variables (and defaults) as the real tools."""

from __future__ import annotations

import getpass
import os
from pathlib import Path


def vllm_cache_root() -> Path:
    """`VLLM_CACHE_ROOT`, else `${XDG_CACHE_HOME:-~/.cache}/vllm`."""
    if root := os.environ.get("VLLM_CACHE_ROOT"):
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "vllm"


def triton_cache_dir() -> Path:
    """`TRITON_CACHE_DIR`, else `~/.triton/cache`."""
    return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def inductor_cache_dir() -> Path:
    """`TORCHINDUCTOR_CACHE_DIR`, else `/tmp/torchinductor_<user>`."""
    if root := os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(root)
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry for this uid, as in many containers
        user = "unknown"
    return Path("/tmp") / f"torchinductor_{user}"


def compile_cache_disabled() -> bool:
    """`VLLM_DISABLE_COMPILE_CACHE=1` turns the compile cache off."""
    return os.environ.get("VLLM_DISABLE_COMPILE_CACHE", "0") == "1"
