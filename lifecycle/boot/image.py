"""Which image a boot runs: the newest this host built or pulled for the manifest, else one
pulled now by digest, and always run by its id (never by a tag someone could move)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from lifecycle.build.engine import find_built
from lifecycle.build.registry import RegistryFailed, pull_image
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.builds import RegistryImage, record_registry_image

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
    if pull_from is None:
        raise NotBuilt(
            f"{ref} is not built: no image carries manifest digest {digest[:12]};"
            f" run `lifecycle build {ref}` first, or `boot --pull` one pushed by another host"
        )
    tried = []
    for reference, found_in in pull_from():
        try:
            image = pull_image(client, reference, digest)
        except RegistryFailed as exc:
            tried.append(f"{reference} ({found_in}): {exc}")
            continue
        at = datetime.now(UTC).isoformat(timespec="seconds")
        record_registry_image(ledger, RegistryImage(image.id, digest, reference, "pulled", at))
        say(f"pulled {reference} ({found_in}): image {image.id}")
        return image
    why = "; ".join(tried) or "no image of it was pushed where this host looks"
    raise NotBuilt(f"{ref} is not built here and could not be pulled: {why}")
