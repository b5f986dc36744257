"""`lifecycle boot`: run a built engine with its tracked JIT caches, record everything."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from lifecycle.boot.baked import (
    ENGINE_LABEL,
    FACTORS_LABEL,
    PROFILE_LABEL,
    baked_arch,
    baked_caches,
)
from lifecycle.boot.engine import engine_image, existing_tag
from lifecycle.boot.run import BootRequest, Watch, dry_run_spec
from lifecycle.boot.spec import pick_profile
from lifecycle.build.plan import BAKED_LABEL, image_tag
from lifecycle.commands import verbs
from lifecycle.commands.boot_report import BootReport
from lifecycle.commands.context import Context
from lifecycle.errors import AnswerNo, LifecycleError
from lifecycle.flows import boot_then_accept
from lifecycle.hooks import select
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    baked_uses,
    cache_uses,
    damage_found_by,
    untracked_writes,
)
from lifecycle.ledger.builds import (
    BakeRecord,
    RegistryImage,
    bakes_of,
    record_bake,
    record_registry_image,
)
from lifecycle.manifest import LoadedManifest, find_manifest, load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.report import Report, unread_lines
from lifecycle.table import visible


@dataclass(frozen=True)
class BootSpecReport(Report):
    """`--dry-run`: the exact container spec that would be sent (secrets named, not shown)."""

    FORMAT: ClassVar[str] = "lifecycle-boot-spec/1"
    spec: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"format": self.FORMAT, **self.spec}


def request(
    ctx: Context, options: verbs.Boot, client: Any | None, ledger: Ledger | None
) -> BootRequest:
    """Resolve manifest, image and hooks; with no client (dry run) the tag is derived. The
    image is found (or, with --pull or a manifest `registry:`, pulled by digest) and run by
    its id."""
    loaded = load_manifest(find_manifest(ctx.manifests_dir, options.version))
    digest = manifest_digest(loaded)
    tag = image_tag(loaded.manifest.name, loaded.manifest.engine.vllm, digest)
    image: dict[str, Any] = {"id": "(not looked up in a dry run)", "tags": [tag], "labels": {}}
    if client is not None and ledger is not None and not options.baked:
        pulls = options.pull or loaded.manifest.registry is not None
        pull_from = (lambda: _references(ctx, client, loaded, digest, tag)) if pulls else None
        built = engine_image(
            client, ledger, digest, options.version, pull_from=pull_from, say=ctx.say
        )
        tag = existing_tag(built, tag)
        image = _described(built)
    hooks = select(ctx.project / "hooks", options.hook_names)
    arch = ctx.gpu_arch  # part of the cache key: set LIFECYCLE_GPU_ARCH on GPU hosts
    made = BootRequest(
        loaded, digest, image, tag, options.profile, options.cold, hooks, arch, ctx.home,
        options.timeout,
    )  # fmt: skip
    return _baked(ctx, client, ledger, made, options.pull) if options.baked else made


def _baked(
    ctx: Context, client: Any | None, ledger: Ledger | None, made: BootRequest, pull: bool
) -> BootRequest:
    """The request for this host's newest bake of the manifest and profile whose image is here
    (with `pull`, else the newest the archive records a push of, pulled by digest): run by its
    id, its caches as its own label lists them (each layer checked at boot)."""
    if made.cold:
        raise LifecycleError("--baked and --cold: a baked image holds its caches; leave one out")
    profile = pick_profile(made.loaded.manifest, made.profile)
    if client is None or ledger is None:  # a dry run: the spec of the newest bake is not read
        return replace(made, profile=profile)
    from docker.errors import ImageNotFound  # the SDK is loaded: client is its client

    # Its caches were compiled for the GPU arch its label names: on another, never booted.
    found, tag, other_archs, gone = None, "", set(), []
    for bake in bakes_of(ledger, made.digest, profile):
        try:
            image = client.images.get(bake.image_id)
        except ImageNotFound:
            gone.append(bake)
            continue
        arch = baked_arch(image.labels or {})
        if arch == made.arch:
            found, tag = image, bake.tag
            _older_than(ctx, gone, bake)
            break
        other_archs.add(str(arch))
    if found is None and pull:
        found, tag = _pull_bake(ctx, client, ledger, made, profile)
    if found is None:
        others = f" (only for GPU arch {', '.join(sorted(other_archs))})" if other_archs else ""
        raise AnswerNo(
            f"no bake of {made.loaded.manifest.name} (digest {made.digest[:12]}), profile"
            f" {profile}, for GPU arch {made.arch} is on this Docker engine{others}:"
            " `lifecycle bake` it (or `boot --baked --pull`)"
        )
    image = _described(found)
    baked = tuple(baked_caches(image["labels"]))
    return replace(made, image=image, image_tag=tag, profile=profile, baked=baked)


def _older_than(ctx: Context, gone: Sequence[BakeRecord], booted: BakeRecord) -> None:
    """One line when a newer bake than the one booted is gone from dockerd: the boot is not of
    the newest bake, which is what `--baked` says it runs."""
    if gone:
        newest = gone[0]
        ctx.note(
            f"the newest bake {newest.tag} ({newest.image_id[:19]}, baked {newest.baked_at}) is"
            f" not on this Docker engine ({visible(newest.gone)}): booting the bake of"
            f" {booted.baked_at} ({booted.image_id[:19]})"
        )


def _described(image: Any) -> dict[str, Any]:
    """An image as a boot records it: its id, tags, labels and registry digests."""
    return {
        "id": image.id,
        "tags": image.tags,
        "labels": dict(image.labels or {}),
        "repo_digests": image.attrs.get("RepoDigests") or [],
    }


def _pull_bake(
    ctx: Context, client: Any, ledger: Ledger, made: BootRequest, profile: str
) -> tuple[Any | None, str]:
    """The newest bake of the manifest and profile for this host's GPU arch whose push the
    archive records, pulled by digest once it is the very image recorded (its id and labels),
    then recorded as this host's; (None, "") when there is none to pull."""
    from lifecycle.archive.config import optional_location
    from lifecycle.archive.record import pushed_images
    from lifecycle.archive.store import BlobStore
    from lifecycle.build.engine import RegistryFailed, pull_image

    location = optional_location(None, ctx.environ, ctx.project)
    if location is None:
        return None, ""
    pushed, unread = pushed_images(BlobStore(ctx.s3(), location), made.digest)
    _left_out(ctx, unread)
    records = [
        r
        for r in pushed
        if BAKED_LABEL in r.labels
        and r.labels.get(PROFILE_LABEL) == profile
        and baked_arch(r.labels) == made.arch
    ]
    tried = []
    for record in records:
        reference, labels = record.reference, record.labels
        baked = {key: labels[key] for key in (BAKED_LABEL, PROFILE_LABEL, FACTORS_LABEL)}
        try:
            image = pull_image(
                client, reference, made.digest, image_id=record.image_id, labels=baked
            )
        except RegistryFailed as exc:
            tried.append(f"{visible(reference)}: {exc}")  # the record's: outside
            continue
        at = ctx.now().isoformat(timespec="seconds")
        record_registry_image(ledger, RegistryImage(image.id, made.digest, reference, "pulled", at))
        # made.arch is the arch its label names: only a bake of this host's arch is pulled.
        bake = BakeRecord(
            image.id, reference, made.loaded.manifest.name, made.digest,
            labels.get(ENGINE_LABEL, ""), profile, made.arch, labels[BAKED_LABEL], at,
        )  # fmt: skip
        record_bake(ledger, bake)
        ctx.say(f"pulled {reference} (pushed, as {location.url()} records): image {image.id}")
        return image, reference
    if tried:
        raise AnswerNo("no bake could be pulled: " + "; ".join(tried))
    return None, ""


def _left_out(ctx: Context, unread: Mapping[str, str]) -> None:
    """A line for each image record a pull could not read: left out, the rest pulled."""
    for line in unread_lines(unread):
        ctx.note(line)


def run(ctx: Context, options: verbs.Boot) -> BootReport | BootSpecReport:
    """Boot once (then the profile's acceptance, if any); the boot as recorded. With --dry-run,
    the spec a boot would send; nothing is made, recorded or sent."""
    if options.dry_run:
        spec = dry_run_spec(request(ctx, options, None, None), ctx.environ, baked=options.baked)
        return BootSpecReport(spec.describe())
    client = ctx.docker()
    with ctx.ledger() as ledger:
        boot_request = request(ctx, options, client, ledger)
        watch = Watch(on_line=ctx.say, checkpoint=ctx.checkpoint())
        record = boot_then_accept(client, ledger, boot_request, ctx.environ, watch)
        uses = tuple(cache_uses(ledger, boot_id=record.id))
        writes = tuple(untracked_writes(ledger, record.id))
        passed_over = tuple(damage_found_by(ledger, record.id))
        baked = tuple(baked_uses(ledger, record.id))
    return BootReport(record, uses, writes, passed_over, baked)


def _references(
    ctx: Context, client: Any, loaded: LoadedManifest, digest: str, tag: str
) -> list[tuple[str, str]]:
    """Where this manifest's engine image can be pulled by digest: what the archive recorded of
    its pushes (not its bakes'), newest first; then the digest the manifest's `registry:` has
    for its tag now."""
    # Here, not at the top: only a boot that pulls loads the archive's record models (~35 ms).
    from lifecycle.archive.config import optional_location
    from lifecycle.archive.record import pushed_images
    from lifecycle.archive.store import BlobStore
    from lifecycle.build.engine import RegistryFailed, registry_digest

    found = []
    location = optional_location(None, ctx.environ, ctx.project)
    if location is not None:
        pushed, unread = pushed_images(BlobStore(ctx.s3(), location), digest)
        _left_out(ctx, unread)
        found += [
            (r.reference, f"pushed, as {location.url()} records")
            for r in pushed
            if BAKED_LABEL not in r.labels
        ]
    registry = loaded.manifest.registry
    if registry is not None:
        tagged = f"{registry.rstrip('/')}/{tag}"
        try:
            reference = f"{tagged.rpartition(':')[0]}@{registry_digest(client, tagged)}"
        except RegistryFailed:
            return found
        found.append((reference, f"the digest of {tagged} now"))
    return found
