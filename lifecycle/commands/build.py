"""`lifecycle build`: manifest → labelled image, recorded in the ledger with its log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import proc
from lifecycle.build.engine import build_image, push_image
from lifecycle.build.plan import BuildPlan, SourceInfo, plan_build
from lifecycle.ledger import Ledger
from lifecycle.manifest import find_manifest, load_manifest


def make_plan(manifests_dir: Path, ref: str) -> BuildPlan:
    """The plan for VERSION (or a manifest path), with the manifests' git revision if any."""
    loaded = load_manifest(find_manifest(manifests_dir, ref))
    return plan_build(loaded, created=datetime.now(UTC), source=_source_info(loaded.file.parent))


def describe_plan(plan: BuildPlan) -> dict[str, Any]:
    """`--dry-run` output: what would be sent to dockerd."""
    return {
        "manifest": plan.manifest_file,
        "digest": plan.digest,
        "tag": plan.tag,
        "labels": plan.labels,
        "dockerfile": plan.dockerfile,
        "context": {name: len(content) for name, content in sorted(plan.context.items())},
    }


def build(
    plan: BuildPlan,
    client: Any,
    ledger: Ledger,
    *,
    force: bool,
    push: str | None,
    on_line: Callable[[str], None],
) -> dict[str, Any]:
    """Build (or find up to date), optionally push; returns the report `--json` prints."""
    result = build_image(client, plan, ledger, force=force, on_line=on_line)
    report = asdict(result)
    if push:
        report["pushed"] = push_image(client, result.tag, push)
    return report


def _source_info(directory: Path) -> SourceInfo:
    revision = proc.run(["git", "rev-parse", "HEAD"], directory, check=False)
    url = proc.run(["git", "config", "--get", "remote.origin.url"], directory, check=False)
    return SourceInfo(
        url=(url.out.strip() or None) if url.rc == 0 else None,
        revision=revision.out.strip() if revision.rc == 0 else None,
    )
