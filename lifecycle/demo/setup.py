"""Make the demo upstream repo and its offline images (idempotent, cached per machine)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from lifecycle.demo.images import (
    default_cache_dir,
    ensure_base_image,
    ensure_engine_image,
    ensure_rootfs,
)
from lifecycle.demo.upstream import RELEASES, ensure_upstream_repo

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_REPO = REPO_ROOT / "manifests" / "demo" / "upstream.git"


def ensure_demo(client: Any, say: Callable[[str], None] = lambda line: None) -> None:
    """The upstream repo, rootfs, base image and one engine image per release; `say` gets one
    line per step."""
    cache_dir = default_cache_dir()

    def step(what: str, action: Callable[[], object]) -> None:
        started = time.monotonic()
        result = action()
        say(f"{what}: {result} ({time.monotonic() - started:.1f} s)")

    step("upstream repo", lambda: ensure_upstream_repo(UPSTREAM_REPO))
    step("rootfs", lambda: ensure_rootfs(cache_dir))
    step("base image", lambda: ensure_base_image(client, cache_dir))
    for version in RELEASES:
        step(f"engine {version}", partial(ensure_engine_image, client, UPSTREAM_REPO, version))
