"""`lifecycle boot`: run a built engine with its tracked JIT caches, record everything."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lifecycle.boot.run import BootRequest, dry_run_spec
from lifecycle.build.engine import find_built
from lifecycle.build.plan import image_tag
from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.flows import boot_then_accept
from lifecycle.hooks import select
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import cache_uses
from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.manifest.digest import manifest_digest


def make_request(
    manifests_dir: Path,
    ref: str,
    client: Any | None,
    *,
    profile: str | None,
    cold: bool,
    hook_names: Sequence[str],
    arch: str,
    timeout_s: float | None,
) -> BootRequest:
    """Resolve manifest, image and hooks; with no client (dry run) the tag is derived."""
    loaded = load_manifest(find_manifest(manifests_dir, ref))
    digest = manifest_digest(loaded)
    tag = image_tag(loaded.manifest.name, loaded.manifest.engine.vllm, digest)
    image: dict[str, Any] = {"id": "(not looked up in a dry run)", "tags": [tag], "labels": {}}
    if client is not None:
        built = find_built(client, digest)
        if built is None:
            raise LifecycleError(
                f"{ref} is not built: no image carries manifest digest {digest[:12]}; "
                f"run `lifecycle build {ref}` first"
            )
        image = {"id": built.id, "tags": built.tags, "labels": built.labels}
    hooks = select(manifests_dir.parent / "hooks", hook_names)
    return BootRequest(loaded, digest, image, tag, profile, cold, hooks, arch, timeout_s)


def describe_dry_run(request: BootRequest, host_env: Mapping[str, str]) -> dict[str, Any]:
    """The exact container spec that would be sent (secrets named, not shown)."""
    return dry_run_spec(request, host_env).describe()


def run_boot(
    client: Any,
    ledger: Ledger,
    request: BootRequest,
    host_env: Mapping[str, str],
    on_line: Callable[[str], None],
    checkpoint: Checkpoint = lambda point: None,
) -> dict[str, Any]:
    """Boot and report: the boot record and how each cache was used."""
    record = boot_then_accept(
        client, ledger, request, host_env, on_line=on_line, checkpoint=checkpoint
    )
    report = asdict(record)
    report["caches"] = [asdict(use) for use in cache_uses(ledger, boot_id=record.id)]
    return report
