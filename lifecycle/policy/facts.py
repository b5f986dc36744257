"""The facts the policy is evaluated on (lifecycle.ledger.retention), as the policy sees them."""

from __future__ import annotations

from datetime import datetime
from pathlib import PurePath

from lifecycle.ledger import Ledger
from lifecycle.ledger.retention import caches_on_host, releases_built
from lifecycle.policy.keep import Live
from lifecycle.policy.model import Policy


def live_caches(ledger: Ledger) -> list[Live]:
    """The caches on this host (live or archived, not torn down)."""
    found = []
    for row in caches_on_host(ledger):
        file = PurePath(row.manifest_file or "")  # manifests/NAME/VERSION/manifest.yaml
        release = f"{file.parent.parent.name}/{file.parent.name}" if row.manifest_file else None
        found.append(
            Live(
                id=row.id,
                manifest=row.manifest_name,
                release=release or row.manifest_digest[:12],
                name=row.cache_name,
                profile=row.profile or "",
                last_used=datetime.fromisoformat(row.started_at or row.created_at),
                good=row.outcome == "ok",
                archived=row.archived,
                seq=row.seq,
            )
        )
    return found


def image_keeps(ledger: Ledger, policy: Policy) -> dict[str, str]:
    """Engine image id -> why the policy keeps it: among the newest N releases (manifest
    digests, by their newest build) of its manifest, N its image rule's keep_last."""
    releases: dict[str, list[str]] = {}  # manifest -> its digests, newest first
    keeps = {}
    for manifest, digest, image_id in releases_built(ledger):
        rule = policy.image_rule(manifest)
        seen = releases.setdefault(manifest, [])
        if digest not in seen:
            seen.append(digest)
        if rule is None:
            keeps[image_id] = "no policy rule names its manifest"
        elif seen.index(digest) < rule.keep_last:
            keeps[image_id] = f"keep_last {rule.keep_last}: one of its newest releases"
    return keeps
