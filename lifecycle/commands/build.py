"""`lifecycle build`: manifest → labelled image, recorded in the ledger with its log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from lifecycle import proc
from lifecycle.build.engine import BuildResult, build_image, push_image
from lifecycle.build.plan import BuildPlan, SourceInfo, plan_build
from lifecycle.commands.context import Context
from lifecycle.commands.report import Report, plain
from lifecycle.manifest import find_manifest, load_manifest


@dataclass(frozen=True)
class BuildReport(Report):
    """A build done, or found up to date; and where it was pushed."""

    FORMAT: ClassVar[str] = "lifecycle-build/1"
    build: BuildResult
    pushed: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": self.FORMAT, **plain(self.build), "pushed": self.pushed}


@dataclass(frozen=True)
class BuildPlanReport(Report):
    """`--dry-run`: what would be sent to dockerd."""

    FORMAT: ClassVar[str] = "lifecycle-build-plan/1"
    manifest: str
    digest: str
    tag: str
    labels: dict[str, str]
    dockerfile: str
    context: dict[str, int]  # path in the build context -> its size in bytes


def plan(ctx: Context, ref: str) -> BuildPlan:
    """The plan for VERSION (or a manifest path), with the manifests' git revision if any."""
    loaded = load_manifest(find_manifest(ctx.manifests_dir, ref))
    return plan_build(loaded, created=datetime.now(UTC), source=_source_info(loaded.file.parent))


def run(ctx: Context, ref: str, *, force: bool, push: str | None) -> BuildReport:
    """Build (or find up to date), optionally push."""
    build_plan = plan(ctx, ref)
    client = ctx.docker()  # its settings are checked before the ledger is made
    with ctx.ledger() as ledger:
        result: BuildResult = build_image(client, build_plan, ledger, force=force, on_line=ctx.say)
    pushed = push_image(client, result.tag, push) if push else None
    return BuildReport(result, pushed)


def dry_run(ctx: Context, ref: str) -> BuildPlanReport:
    """What `run` would send to dockerd; nothing is built or recorded."""
    build_plan = plan(ctx, ref)
    return BuildPlanReport(
        manifest=build_plan.manifest_file,
        digest=build_plan.digest,
        tag=build_plan.tag,
        labels=build_plan.labels,
        dockerfile=build_plan.dockerfile,
        context={name: len(data) for name, data in sorted(build_plan.context.items())},
    )


def render(report: BuildReport) -> str:
    """`built TAG (ID) in S s`, or `TAG is up to date (ID)`; then where it was pushed."""
    built = report.build
    if built.outcome == "up-to-date":
        text = f"{built.tag} is up to date ({built.image_id[:19]})\n"
    else:
        text = f"built {built.tag} ({built.image_id[:19]}) in {built.duration_s} s\n"
    return text + (f"pushed {report.pushed}\n" if report.pushed else "")


def render_plan(report: BuildPlanReport) -> str:
    """The Dockerfile, headed by the tag, the labels and the context's files as comments."""
    lines = ["# dry run: nothing is built", f"# tag {report.tag}"]
    lines += [f"# label {key}={value}" for key, value in report.labels.items()]
    lines += [f"# context {name} ({size} bytes)" for name, size in report.context.items()]
    return "\n".join(lines) + "\n" + report.dockerfile


def _source_info(directory: Path) -> SourceInfo:
    revision = proc.run(["git", "rev-parse", "HEAD"], directory, check=False)
    url = proc.run(["git", "config", "--get", "remote.origin.url"], directory, check=False)
    return SourceInfo(
        url=(url.out.strip() or None) if url.rc == 0 else None,
        revision=revision.out.strip() if revision.rc == 0 else None,
    )
