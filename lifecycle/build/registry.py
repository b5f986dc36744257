"""Engine images in a registry, by digest: pushed after a build, pulled by a host that boots.

A tag can be moved; a digest (`REGISTRY/REPOSITORY@sha256:…`, the sha256 of the image's
manifest in the registry) cannot, so that is what is recorded and what is pulled. A pulled
image is used only once its labels say it is the manifest's image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lifecycle.build.plan import DIGEST_LABEL
from lifecycle.errors import AnswerNo, EnvironmentFailure


class RegistryFailed(AnswerNo):
    """A push or a pull dockerd refused, or an image that is not what it was pulled for."""


@dataclass(frozen=True)
class Pushed:
    """Where an image went."""

    tag: str  # REGISTRY/REPOSITORY:TAG
    reference: str  # REGISTRY/REPOSITORY@sha256:…: what to pull
    digest: str  # sha256:…, the registry's digest of the image's manifest


def push_image(client: Any, image_id: str, tag: str, registry: str) -> Pushed:
    """Tag the image as REGISTRY/name:tag, push it, and return where it went, by digest."""
    repository, _, version = tag.rpartition(":")
    target = f"{registry.rstrip('/')}/{repository}"
    client.images.get(image_id).tag(target, version)
    digest = None
    for chunk in _calling(lambda: client.api.push(target, version, stream=True, decode=True)):
        if "error" in chunk:
            raise _refusal(f"push of {target}:{version} failed: {chunk['error']}")
        digest = (chunk.get("aux") or {}).get("Digest") or digest
    if digest is None:  # an engine that does not say: what it now knows the image by
        found = client.images.get(image_id).attrs.get("RepoDigests") or []
        digest = next((d.partition("@")[2] for d in found if d.startswith(f"{target}@")), None)
    if digest is None:
        raise RegistryFailed(f"push of {target}:{version}: the registry gave no digest")
    return Pushed(f"{target}:{version}", f"{target}@{digest}", digest)


def registry_digest(client: Any, reference: str) -> str:
    """The digest a registry has for a tag now (`sha256:…`), asked without pulling."""
    try:
        return str(_calling(lambda: client.images.get_registry_data(reference)).id)
    except RegistryFailed as exc:
        raise RegistryFailed(f"{reference}: the registry does not have it ({exc})") from None


def pull_image(client: Any, reference: str, manifest_digest: str) -> Any:
    """Pull `REGISTRY/REPOSITORY@sha256:…`; the image, once its labels prove it is the image of
    `manifest_digest` (otherwise it is removed again and refused)."""
    if "@sha256:" not in reference:
        raise RegistryFailed(f"{reference}: not a reference by digest (REPOSITORY@sha256:…)")
    image = _calling(lambda: client.images.pull(reference))
    found = (image.labels or {}).get(DIGEST_LABEL)
    if found != manifest_digest:
        # By the reference pulled: the same image may be here under other names, which stay.
        _calling(lambda: client.images.remove(reference))
        raise RegistryFailed(
            f"{reference} is not the image of manifest {manifest_digest[:12]}: its label"
            f" {DIGEST_LABEL} is {found!r}; removed again"
        )
    return image


def _calling(call: Any) -> Any:
    """dockerd's answer, or its refusal as one line (a registry that does not answer: exit 3)."""
    from docker.errors import APIError, DockerException

    try:
        return call()
    except APIError as exc:
        raise _refusal(str(exc.explanation or exc)) from None
    except DockerException as exc:
        raise RegistryFailed(str(exc)) from None


def _refusal(text: str) -> AnswerNo | EnvironmentFailure:
    """A registry that cannot be reached is the environment (exit 3); anything else a no."""
    if any(words in text for words in ("connection refused", "no such host", "i/o timeout")):
        return EnvironmentFailure(f"the registry does not answer: {' '.join(text.split())}")
    return RegistryFailed(" ".join(text.split()))
