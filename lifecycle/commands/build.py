"""`lifecycle build`: manifest → labelled image, recorded in the ledger with its log; with
`--push`, the image in a registry, recorded by digest (the ledger, and the archive when one is
set, so another host can pull it by the manifest it has)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lifecycle import __version__, proc
from lifecycle.archive.config import optional_location
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import publish_image
from lifecycle.archive.store import ArchiveError, BlobStore
from lifecycle.build.engine import (
    BuildResult,
    Pushed,
    base_image_digest,
    build_image,
    push_image,
    settle_interrupted,
)
from lifecycle.build.plan import BuildPlan, SourceInfo, plan_build
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import EXIT_NO, EXIT_OK
from lifecycle.ledger import Ledger
from lifecycle.ledger.builds import RegistryImage, record_registry_image
from lifecycle.manifest import LoadedManifest, find_manifest, load_manifest
from lifecycle.records import IMAGE_FORMAT, ImageRecordV1
from lifecycle.report import Report, plain
from lifecycle.table import lines_text
from lifecycle.withheld import refuse_secrets_in_manifest, secrets_on_host


@dataclass(frozen=True)
class BuildReport(Report):
    """A build done, or found up to date; and where it was pushed, by digest."""

    FORMAT: ClassVar[str] = "lifecycle-build/1"
    build: BuildResult
    pushed: Pushed | None = None
    image_record: str | None = None  # the archive's record of the push
    not_recorded: str | None = None  # why the push is not in the archive

    @property
    def exit_code(self) -> int:
        return EXIT_NO if self.not_recorded else EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        return (f"lifecycle: {self.not_recorded}",) if self.not_recorded else ()

    def to_json(self) -> dict[str, Any]:
        pushed = self.pushed
        return {
            "format": self.FORMAT,
            **plain(self.build),
            "pushed": pushed.tag if pushed else None,
            "pushed_reference": pushed.reference if pushed else None,
            "pushed_digest": pushed.digest if pushed else None,
            "image_record": self.image_record,
        }

    def text(self) -> str:
        """`built TAG (ID) in S s`, or `TAG is up to date (ID)`; then where it was pushed."""
        built = self.build
        if built.outcome == "up-to-date":
            text = f"{built.tag} is up to date ({built.image_id[:19]})\n"
        else:
            text = f"built {built.tag} ({built.image_id[:19]}) in {built.duration_s} s\n"
        if self.pushed:
            text += f"pushed {self.pushed.tag}\n  as {self.pushed.reference}\n"
        if self.image_record:
            text += f"  recorded at {self.image_record}\n"
        return text


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

    def text(self) -> str:
        """The Dockerfile, headed by the tag, the labels and the context's files as comments."""
        lines = ["# dry run: nothing is built", f"# tag {self.tag}"]
        lines += [f"# label {key}={value}" for key, value in self.labels.items()]
        lines.append(
            "# label lifecycle.base.digest: the base image's id, read from dockerd at build"
        )
        lines += [f"# context {name} ({size} bytes)" for name, size in self.context.items()]
        return lines_text(lines) + self.dockerfile  # a label's value, a file's name: a line each


def plan(ctx: Context, loaded: LoadedManifest, base_digest: str | None = None) -> BuildPlan:
    """The plan for a loaded manifest, with the manifests' git revision if any."""
    return plan_build(
        loaded,
        created=ctx.now(),
        source=_source_info(loaded.file.parent),
        base_digest=base_digest,
    )


def run(ctx: Context, request: verbs.Build) -> BuildReport | BuildPlanReport:
    """Build (or find up to date: same manifest, same base image), optionally push; or with
    --dry-run, what would be sent to dockerd."""
    loaded = load_manifest(find_manifest(ctx.manifests_dir, request.version))
    if request.dry_run:
        return dry_run(ctx, loaded)
    push = request.push
    plan(ctx, loaded)  # refuses what cannot be built (an unconfirmed pin) before dockerd is asked
    where = optional_location(None, ctx.environ, ctx.project) if push else None
    client = ctx.docker()  # its settings are checked before the ledger is made
    base = base_image_digest(client, loaded.manifest.engine.base_image)
    build_plan = plan(ctx, loaded, base)
    with ctx.ledger() as ledger:
        refuse_secrets_in_manifest(loaded, secrets_on_host(ledger, ctx.environ))
        settle_interrupted(client, ledger, ctx.home, ctx.note)  # what a killed build left
        result: BuildResult = build_image(
            client,
            build_plan,
            ledger,
            ctx.home,
            force=request.force,
            on_line=ctx.say,
            checkpoint=ctx.checkpoint(),
        )
        if not push:
            return BuildReport(result)
        pushed = publish(
            ctx, client, ledger, result.image_id, result.digest, result.tag, push, where
        )
    return BuildReport(result, *pushed)


def publish(
    ctx: Context,
    client: Any,
    ledger: Ledger,
    image_id: str,
    manifest_digest: str,
    tag: str,
    registry: str,
    where: ArchiveLocation | None,
    provenance: Callable[[Pushed], dict[str, Any]] | None = None,
) -> tuple[Pushed, str | None, str | None]:
    """Push the image to `registry`, record it by digest in the ledger and, with an archive
    location, in the archive (with the `provenance` of what was pushed, for a bake): (where
    it went, the archive's record, why it is not recorded)."""
    pushed = push_image(client, image_id, tag, registry, ctx.checkpoint())
    at = ctx.now().isoformat(timespec="seconds")
    row = RegistryImage(image_id, manifest_digest, pushed.reference, "pushed", at)
    record_registry_image(ledger, row)
    if where is None:
        return pushed, None, None
    record = ImageRecordV1(
        format=IMAGE_FORMAT,
        manifest_digest=manifest_digest,
        image_id=image_id,
        reference=pushed.reference,
        tag=pushed.tag,
        labels=dict(client.images.get(image_id).labels or {}),
        host=socket.gethostname(),
        tool_version=__version__,
        pushed_at=at,
        provenance=provenance(pushed) if provenance else None,
    )
    store = BlobStore(ctx.s3(), where)
    try:
        return pushed, store.where(publish_image(store, record)), None
    except ArchiveError as exc:
        return pushed, None, f"pushed {pushed.reference}, but not recorded at {where.url()}: {exc}"


def dry_run(ctx: Context, loaded: LoadedManifest) -> BuildPlanReport:
    """What `run` would send to dockerd; nothing is built or recorded (and no dockerd is
    asked, so the base image's digest label is left out)."""
    build_plan = plan(ctx, loaded)
    return BuildPlanReport(
        manifest=build_plan.manifest_file,
        digest=build_plan.digest,
        tag=build_plan.tag,
        labels=build_plan.labels,
        dockerfile=build_plan.dockerfile,
        context={name: len(data) for name, data in sorted(build_plan.context.items())},
    )


def _source_info(directory: Path) -> SourceInfo:
    revision = proc.run(["git", "rev-parse", "HEAD"], directory, check=False)
    url = proc.run(["git", "config", "--get", "remote.origin.url"], directory, check=False)
    return SourceInfo(
        url=(url.out.strip() or None) if url.rc == 0 else None,
        revision=revision.out.strip() if revision.rc == 0 else None,
    )
