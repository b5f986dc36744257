"""A bake's provenance as an in-toto Statement (v1) whose predicate is SLSA provenance (v1):
the subject is the baked image; its resolved dependencies are the engine image, each cache
tree (with its archive record), the manifest and each patch, by digest; its byproducts are
the boots and results measured on those very trees. Supply-chain tools read this format
(cosign attestations, SLSA verifiers); lifecycle keeps it with the image's record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lifecycle import __version__
from lifecycle.archive.location import ArchiveLocation
from lifecycle.boot.baked import ENGINE_LABEL, BakedCache
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import baked_uses, boot_by_id, cache_uses
from lifecycle.ledger.results import all_results

STATEMENT = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:lifecycle:bake:v1"  # lifecycle's own: what the parameters below mean
BUILDER = "urn:lifecycle"


@dataclass(frozen=True)
class Measured:
    """A boot that left a baked cache holding its tree, and the results recorded on it."""

    cache_id: str
    boot_id: str
    outcome: str
    results: tuple[tuple[str, str, str], ...]  # (result id, name, status)


def statement(
    subjects: Mapping[str, str],
    labels: Mapping[str, str],
    caches: Sequence[BakedCache],
    measured: Sequence[Measured],
    *,
    ref: str,
    profile: str,
    arch: str,
    at: str,
) -> dict[str, Any]:
    """The Statement: `subjects` name -> sha256 hex of the baked image (its id; its registry
    digest once pushed); `labels` the engine image's (manifest digest, patches)."""
    engine = labels.get(ENGINE_LABEL, "")
    patches = int(labels.get("lifecycle.patch.count", "0"))
    dependencies = [
        {"name": "engine image", "digest": {"sha256": engine.removeprefix("sha256:")}},
        {"name": f"manifest {ref}", "digest": {"sha256": labels["lifecycle.manifest.digest"]}},
        *(
            {
                "name": f"patch {labels[f'lifecycle.patch.{n:02d}.file']}",
                "digest": {"sha256": labels[f"lifecycle.patch.{n:02d}.sha256"]},
            }
            for n in range(1, patches + 1)
        ),
        *(
            {
                "name": f"cache {c.name}",
                "uri": f"s3://{ArchiveLocation.parse(c.record['location']).bucket}/{c.record['key']}",
                "digest": {"sha256": c.tree_digest},
                "annotations": {
                    "cache_id": c.cache_id,
                    "path": c.path,
                    "record_sha256": c.record["sha256"],
                },
            }
            for c in caches
        ),
    ]
    return {
        "_type": STATEMENT,
        "subject": [{"name": n, "digest": {"sha256": d}} for n, d in sorted(subjects.items())],
        "predicateType": SLSA_PROVENANCE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"manifest": ref, "profile": profile, "arch": arch},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": BUILDER, "version": {"lifecycle": __version__}},
                "metadata": {"startedOn": at, "finishedOn": at},
                "byproducts": [
                    {
                        "name": f"boot {m.boot_id}",
                        "annotations": {
                            "cache_id": m.cache_id,
                            "outcome": m.outcome,
                            "results": [{"id": i, "name": n, "status": s} for i, n, s in m.results],
                        },
                    }
                    for m in measured
                ],
            },
        },
    }


def measured_on(ledger: Ledger, caches: Sequence[BakedCache]) -> list[Measured]:
    """Each boot that ran on a tree baked (mounted, leaving the cache holding it; or baked
    into an earlier image), with its results."""
    results = all_results(ledger)
    trees = {(c.cache_id, c.tree_digest) for c in caches}
    found = []
    for use in [*cache_uses(ledger), *(u.as_use() for u in baked_uses(ledger))]:
        if (use.cache_id, use.tree_digest_after) not in trees:
            continue  # most of a ledger's uses: asked nothing more
        boot = boot_by_id(ledger, use.boot_id)
        if boot is None:
            continue
        on = tuple((r.id, r.name, r.status) for r in results if r.boot_id == boot.id)
        found.append(Measured(use.cache_id, boot.id, boot.outcome, on))
    return found
