"""The facts the policy is evaluated on (lifecycle.ledger.retention), as the policy sees them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime
from pathlib import Path

from lifecycle.ledger import Ledger
from lifecycle.ledger.retention import caches_on_host, releases_built
from lifecycle.manifest.load import MANIFEST_NAME, manifest_ref
from lifecycle.policy.keep import Live
from lifecycle.policy.model import Policy


def live_caches(ledger: Ledger, manifests: Path, gone: Collection[str] = ()) -> list[Live]:
    """The caches on this host (live or archived, not torn down); `manifests`: the project's;
    `gone`: those whose dir vanished behind the ledger's back."""
    found = []
    for row in caches_on_host(ledger):
        found.append(
            Live(
                id=row.id,
                manifest=row.manifest_name,
                release=release_of(row.manifest_file, manifests) or row.manifest_digest[:12],
                name=row.cache_name,
                profile=row.profile or "",
                last_used=datetime.fromisoformat(row.started_at or row.created_at),
                good=row.outcome == "ok",
                archived=row.archived,
                seq=row.seq,
                there=row.id not in gone,
            )
        )
    return found


def image_keeps(ledger: Ledger, policy: Policy, manifests: Path) -> dict[str, str]:
    """Engine image id -> why the policy keeps it (lifecycle.ledger.retention's builds)."""
    built = [
        (name, release_of(file, manifests) or digest, digest, image_id)
        for name, file, digest, image_id in releases_built(ledger)
    ]
    return releases_kept(built, policy)


def releases_kept(built: Iterable[tuple[str, str, str, str]], policy: Policy) -> dict[str, str]:
    """Of (manifest name, release, digest, image id), newest first: the images of the newest
    build of each of its manifest's newest N releases (`0.31` and `0.30`, not two builds of
    0.31, which would drop production's way back), N its image rule's keep_last. A build of
    that digest again (the base moved) took the tag: the image it replaced stays too, said so."""
    releases: dict[str, list[str]] = {}  # manifest -> its releases, newest first
    # (manifest, release) -> its newest build's digest and image: two manifests may name a
    # release alike (0.31 of vllm-h100 and of vllm-h200), each its own.
    current: dict[tuple[str, str], tuple[str, str]] = {}
    keeps = {}
    for manifest, release, digest, image_id in built:
        rule = policy.image_rule(manifest)
        seen = releases.setdefault(manifest, [])
        if release not in seen:
            seen.append(release)
            current[manifest, release] = (digest, image_id)
        newest_digest, newest_image = current[manifest, release]
        if rule is None:
            keeps[image_id] = "no policy rule names its manifest"
        elif seen.index(release) < rule.keep_last and newest_digest == digest:
            of = f"its newest build of {release}"
            if image_id != newest_image:
                of = f"an older image of {of} (built again since as {newest_image[:19]})"
            keeps[image_id] = f"keep_last {rule.keep_last}: {of}"
    return keeps


def release_of(manifest_file: str | None, manifests: Path) -> str | None:
    """The ref a release is built and booted by (`0.31`, `demo/0.2`), from its manifest file."""
    return manifest_ref(Path(manifest_file).parent, manifests) if manifest_file else None


def unknown_releases(policy: Policy, manifests: Path) -> list[str]:
    """The keep_releases entries that name no manifest of the project: a typo there would let
    production's newest good cache go (archived first, as ever), so the plan says so."""
    named = {release for rule in policy.caches for release in rule.keep_releases}
    return sorted(r for r in named if not (manifests / r / MANIFEST_NAME).is_file())
