"""The teardown plan and result as text for a terminal and as JSON for scripts."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from lifecycle.table import human_bytes, render
from lifecycle.teardown.plan import CacheDecision, TeardownPlan

if TYPE_CHECKING:
    from lifecycle.teardown.run import TeardownResult


def plan_json(plan: TeardownPlan) -> dict[str, Any]:
    """The plan: each cache with its action and reasons, containers, images, bytes to free."""
    return {
        "caches": [_decision_json(d) for d in plan.decisions],
        "containers": [asdict(c) for c in plan.containers],
        "images": [asdict(i) for i in plan.images],
        "notes": list(plan.notes),
        "archive_to": plan.archive_to,
        "caches_to_remove": len(plan.removing),
        "bytes_to_free": plan.bytes_to_free,
    }


def result_json(result: TeardownResult) -> dict[str, Any]:
    """What the run did, cache by cache."""
    return {
        "run_id": result.run_id,
        "caches": [asdict(o) for o in result.outcomes],
        "removed": len(result.removed),
        "bytes_freed": sum(o.bytes_freed for o in result.removed),
        "containers_removed": [asdict(c) for c in result.containers_removed],
        "images": [asdict(i) for i in result.images],
        "evidence": list(result.evidence),
        "notes": list(result.notes),
        "hooks": [asdict(r) for r in result.hook_runs],
    }


def plan_text(plan: TeardownPlan, *, dry_run: bool) -> str:
    """A table of every cache (kept ones with every reason), then containers, images, totals."""
    rows = [
        [
            d.cache.id,
            d.cache.manifest_name,
            d.cache.cache_name,
            human_bytes(d.cache.bytes),
            d.archive_state,
            d.action.value,
            "; ".join(d.why + ((d.resumes.describe(),) if d.resumes else ())),
        ]
        for d in plan.decisions
    ]
    header = ["CACHE", "MANIFEST", "NAME", "SIZE", "ARCHIVE", "ACTION", "WHY"]
    lines = [render(header, rows).rstrip("\n")]
    lines += [f"note: {note}" for note in plan.notes]
    lines += [
        f"stopped boot container {c.name} (boot {c.boot_id}): remove" for c in plan.containers
    ]
    for image in plan.images:
        action = "remove" if image.removes else "keep"
        lines.append(f"image {_image_name(image.tags, image.id)}: {action} ({image.why})")
    verb = "would remove" if dry_run else "to remove"
    archiving = sum(1 for d in plan.removing if d.archive is None)
    first = f", {archiving} archived first to {plan.archive_to}" if archiving else ""
    kept = len(plan.decisions) - len(plan.removing)
    lines.append(
        f"{verb}: {_count(len(plan.removing), 'cache')}, {human_bytes(plan.bytes_to_free)}{first};"
        f" kept: {kept}" + ("  (dry run: nothing changed)" if dry_run else "")
    )
    return "\n".join(lines) + "\n"


def summary_text(result: TeardownResult) -> str:
    """'removed 63 caches, 20.1 GiB freed; evidence at s3://…', then what did not go and why."""
    freed = sum(o.bytes_freed for o in result.removed)
    where = f"; evidence at {', '.join(result.evidence)}" if result.evidence else ""
    lines = [f"removed {_count(len(result.removed), 'cache')}, {human_bytes(freed)} freed{where}"]
    for outcome in result.outcomes:
        back = "; its dir is back from the trash" if outcome.restored else ""
        if outcome.settled:
            lines.append(f"recorded {outcome.cache_id} as {outcome.settled}: its dir was gone")
        elif outcome.problem:
            lines.append(f"kept {outcome.cache_id}: {outcome.problem}{back}")
        elif back:
            lines.append(f"kept {outcome.cache_id} as planned{back}")
    if result.containers_removed:
        names = ", ".join(c.name for c in result.containers_removed)
        count = _count(len(result.containers_removed), "stopped boot container")
        lines.append(f"removed {count}: {names}")
    for image in result.images:
        name = _image_name(image.tags, image.id)
        done = f"removed image {name}" if image.removes else f"kept image {name}: {image.why}"
        lines.append(done)
    lines += [f"note: {note}" for note in result.notes]
    lines.append(f"journal: run {result.run_id}")
    return "\n".join(lines) + "\n"


def _decision_json(decision: CacheDecision) -> dict[str, Any]:
    cache = decision.cache
    return {
        "id": cache.id,
        "manifest": cache.manifest_name,
        "name": cache.cache_name,
        "bytes": cache.bytes,
        "host_path": cache.host_path,
        "state": cache.state,
        "archive_state": decision.archive_state,
        "archive": asdict(decision.archive) if decision.archive else None,
        "action": decision.action.value,
        "why": list(decision.why),
        "problem": decision.problem,
        "resumes": asdict(decision.resumes) if decision.resumes else None,
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _image_name(tags: tuple[str, ...], image_id: str) -> str:
    return ", ".join(tags) if tags else image_id[:19]
