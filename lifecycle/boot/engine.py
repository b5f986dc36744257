"""The engine a boot runs: its image (the newest this host built or pulled for the manifest,
else one pulled now by digest; always run by its id, never by a tag someone could move), the
snapshots kept of what it ran (content-named under the home's `evidence/`, so an audit answers
after the checkout or the image is gone), and its container run to its end."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from lifecycle.build.engine import RegistryFailed, find_built, pull_image
from lifecycle.dockerd import dockerd_said
from lifecycle.errors import AnswerNo, LifecycleError
from lifecycle.home import Home
from lifecycle.kept_log import Lines
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import DIED, dead_boots, ended_boots, settle_dead_boot
from lifecycle.ledger.builds import (
    RegistryImage,
    how_gone,
    image_removed_at,
    images_of,
    record_registry_image,
)
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.load import canonical_form, patch_digests
from lifecycle.table import visible

BOOT_LABEL = "lifecycle.boot.id"  # on each boot's container: what dockerd runs for which boot

# Where an image of the manifest may be pulled from, by digest, best first (asked only when
# this host has none), each with where that reference was found.
References = Callable[[], Sequence[tuple[str, str]]]


class NotBuilt(LifecycleError):
    """No image of the manifest here, and none to pull (exit 2: build or pull it first)."""


def engine_image(
    client: Any,
    ledger: Ledger,
    digest: str,
    ref: str,
    *,
    pull_from: References | None,
    say: Callable[[str], None] = lambda line: None,
) -> Any:
    """The image to boot for manifest digest `digest` (`ref` names it in messages); a pull is
    told through `say`: what was pulled, and where that reference was found."""
    built = find_built(client, ledger, digest)
    if built is not None:
        return built
    gone = _gone(ledger, digest)
    if pull_from is None:
        raise NotBuilt(
            not_built(ledger, ref, digest, "or `boot --pull` one pushed by another host")
        )
    tried = []
    for reference, found_in in pull_from():
        try:
            image = pull_image(client, reference, digest)
        except RegistryFailed as exc:
            tried.append(f"{visible(reference)} ({found_in}): {exc}")  # a record's: outside
            continue
        at = datetime.now(UTC).isoformat(timespec="seconds")
        record_registry_image(ledger, RegistryImage(image.id, digest, reference, "pulled", at))
        say(f"pulled {reference} ({found_in}): image {image.id}")
        return image
    why = "; ".join(tried) or "no image of it was pushed where this host looks"
    here = f" ({gone})" if gone else ""
    raise NotBuilt(f"{ref} is not built here{here} and could not be pulled: {why}")


def not_built(ledger: Ledger, ref: str, digest: str, then: str) -> str:
    """Why `ref` cannot run here (no image of it, or the one it had went: how), and what to
    do: build it (again), `then`."""
    gone = _gone(ledger, digest)
    why = gone or f"no image carries manifest digest {digest[:12]}"
    again = "again" if gone else "first"
    return f"{ref} is not built: {why}; run `lifecycle build {ref}` {again}, {then}"


def _gone(ledger: Ledger, digest: str) -> str | None:
    """How the newest image this host built or pulled for `digest` left dockerd (a teardown's
    removal, when one was recorded); None when it recorded none."""
    recorded = images_of(ledger, digest)
    if not recorded:
        return None
    how = how_gone(image_removed_at(ledger, recorded[0]))
    return f"its image {recorded[0][:19]} is not on this Docker engine ({how})"


def existing_tag(image: Any, derived: str) -> str:
    """What a boot names its image by: the tag `build` gives it, when the image has it; else
    (an image pulled by digest has only where it came from) its first tag or reference."""
    tags = [str(tag) for tag in image.tags or []]
    if derived in tags:
        return derived
    found = tags or [str(ref) for ref in image.attrs.get("RepoDigests") or []]
    return found[0] if found else str(image.id)


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


class BootFailed(AnswerNo):
    """The engine's container could not be created or started: dockerd refused it. Raised
    out of a boot once its row is recorded failed; `boot_id` names that boot."""

    boot_id: str | None = None


def run_container(
    container: Any,
    timeout_s: float | None,
    keep: Callable[[str], None],
    show: Callable[[str], None],
) -> tuple[int, bool]:
    """Start, pass each log line to `keep` and `show` until the container exits; its exit code,
    and whether we stopped it at the boot's time limit (then the code is only the signal's:
    137 or 143). dockerd's refusal to start it (a network it does not have) is BootFailed, the
    container removed: it never ran, so it holds nothing to read, and would only pile up."""
    from docker.errors import APIError

    try:
        container.start()
    except APIError as exc:
        said = f"dockerd refused to start the container: {dockerd_said(exc)}"
        raise BootFailed("; ".join(filter(None, (said, remove_container(container))))) from None
    fired = threading.Event()

    def stop_at_limit() -> None:
        fired.set()
        container.stop()

    timer = threading.Timer(timeout_s, stop_at_limit) if timeout_s else None
    if timer:
        timer.start()
    try:
        lines = Lines()
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            for line in lines.feed(chunk):
                keep(line)
                show(line)
        if (last := lines.end()) is not None:
            keep(last)
        code = int(container.wait()["StatusCode"])
        return code, fired.is_set()
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM via the hook session): the engine must not outlive us.
        container.stop(timeout=10)
        raise
    finally:
        if timer:
            timer.cancel()


def remove_container(container: Any) -> str | None:
    """Remove a stopped container; None when gone, else what dockerd said."""
    from docker.errors import APIError, NotFound

    try:
        container.remove(force=True)
    except NotFound:
        return None
    except APIError as exc:
        return f"container {container.id[:12]} not removed: {dockerd_said(exc)}"
    return None


def container_name(container: Any) -> str:
    """The name of a sparse-listed container (the list API gives `Names`, with a slash)."""
    names = container.attrs.get("Names") or [container.id[:12]]
    return str(names[0]).lstrip("/")


def stop_orphans(client: Any, ledger: Ledger, home: Home, at: str) -> list[str]:
    """Stop the engines whose lifecycle process died, then settle their boots; a line for each.

    dockerd, not lifecycle, runs a boot's container: a boot SIGKILLed (the OOM killer, a CI
    job's end, a lost cluster task) leaves its engine serving, holding its GPUs and writing its
    caches, for ever; and its boot holding those caches, so every later boot went cold. A
    running container of this ledger's boots is stopped when its boot has ended or its process
    died (lifecycle.ledger.boots.dead_boots); only then are the dead boots settled, so no cache
    is handed on while an engine still writes it. Other homes' boots are theirs."""
    from lifecycle.dockerd import sdk_errors

    try:
        running = client.containers.list(filters={"label": BOOT_LABEL}, sparse=True)
    except sdk_errors() as exc:  # the boot meets dockerd's problem at once; nothing settled
        return [f"cannot ask dockerd for engines of dead boots: {dockerd_said(exc)}"]
    dead = set(dead_boots(ledger, home))
    by_boot = {(c.attrs.get("Labels") or {}).get(BOOT_LABEL, ""): c for c in running}
    orphans = (by_boot.keys() & dead) | ended_boots(ledger, by_boot.keys())
    said = []
    for boot_id in sorted(orphans):
        container = by_boot[boot_id]
        name = container_name(container)
        try:
            client.api.stop(container.id, timeout=10)
        except sdk_errors() as exc:
            dead.discard(boot_id)  # its engine may write its caches: they stay held
            said.append(f"boot {boot_id}: its engine {name} not stopped: {dockerd_said(exc)}")
            continue
        said.append(f"boot {boot_id}: its engine {name} ran on without it: stopped")
    for boot_id in sorted(dead):
        settle_dead_boot(ledger, home, boot_id, at)
        said.append(f"boot {boot_id}: {DIED}: now interrupted")
    return said
