"""`lifecycle bake`: VERSION's proven warm caches baked into its engine image, one layer per
cache, labelled with where each tree came from; with --push, pushed and recorded by digest."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from lifecycle.archive.config import optional_location
from lifecycle.archive.layout import short_key
from lifecycle.archive.location import ArchiveLocation
from lifecycle.bake.choose import Chosen, Refused, choose, release
from lifecycle.bake.image import (
    MCV_LABEL,
    bake_labels,
    build_baked,
    dockerfile,
    settle_killed_bakes,
)
from lifecycle.bake.mcv import KINDS, build_mcv
from lifecycle.bake.provenance import measured_on, statement
from lifecycle.boot.engine import engine_image
from lifecycle.boot.spec import pick_profile
from lifecycle.build.engine import Pushed
from lifecycle.build.plan import BAKED_LABEL, DIGEST_LABEL, image_tag, key_factors
from lifecycle.commands import verbs
from lifecycle.commands.build import publish
from lifecycle.commands.context import Context
from lifecycle.commands.teardown import connect_services
from lifecycle.dockerd import DockerUnavailable
from lifecycle.errors import EXIT_ENVIRONMENT, EXIT_NO, EXIT_OK
from lifecycle.faults import Checkpoint
from lifecycle.ledger import Ledger
from lifecycle.ledger.builds import (
    BakeRecord,
    McvRecord,
    bake_attempt,
    record_bake,
    record_mcv_image,
)
from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.report import Report, plain
from lifecycle.table import lines_text, visible
from lifecycle.teardown.containers import NAME_LABEL
from lifecycle.teardown.survey import ArchiveVerifier, archived_boots
from lifecycle.withheld import secrets_on_host


@dataclass(frozen=True)
class BakeReport(Report):
    """The choice for each cache; and, unless refused or a dry run, the image it made."""

    FORMAT: ClassVar[str] = "lifecycle-bake/1"
    ref: str
    profile: str
    engine_image_id: str
    choices: tuple[Chosen | Refused, ...]
    tag: str
    image_id: str | None = None  # None: a dry run, or refused
    pushed: Pushed | None = None
    image_record: str | None = None
    not_recorded: str | None = None
    provenance: dict[str, Any] | None = None  # the in-toto Statement (lifecycle.bake.provenance)
    mcv: tuple[tuple[str, str, str], ...] = ()  # --format mcv: (cache name, tag, image id)
    unreachable: tuple[str, ...] = ()  # an archive whose S3 server did not answer, and why

    @property
    def refused(self) -> tuple[Refused, ...]:
        return tuple(c for c in self.choices if isinstance(c, Refused))

    @property
    def exit_code(self) -> int:
        # A cache whose archive could not be asked is not proven, nor found unproven.
        if self.refused and self.unreachable:
            return EXIT_ENVIRONMENT
        return EXIT_NO if self.refused or self.not_recorded else EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        # Said on stderr with --json too: exit 3 names what was out of reach.
        lost = self.unreachable if self.refused else ()
        unasked = tuple(f"lifecycle: {visible(why)}; nothing was baked" for why in lost)
        return unasked + ((f"lifecycle: {self.not_recorded}",) if self.not_recorded else ())

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.FORMAT,
            "manifest": self.ref,
            "profile": self.profile,
            "engine_image_id": self.engine_image_id,
            "caches": [
                {"name": c.name, "refused": c.why}
                if isinstance(c, Refused)
                else {**plain(c.baked), "host_path": str(c.host_path)}
                for c in self.choices
            ],
            "tag": self.tag,
            "image_id": self.image_id,
            "pushed_reference": self.pushed.reference if self.pushed else None,
            "image_record": self.image_record,
            "provenance": self.provenance,
            "mcv": [{"cache": c, "tag": t, "image_id": i} for c, t, i in self.mcv],
        }

    def text(self) -> str:
        lines = []
        for choice in self.choices:
            if isinstance(choice, Refused):
                lines.append(f"{choice.name}: refused: {choice.why}")
            else:
                baked = choice.baked
                lines.append(
                    f"{baked.name}: {baked.cache_id} tree {baked.tree_digest[:12]} -> {baked.path}"
                    f" (last boot {baked.boot_id} ok; archived {short_key(baked.record['key'])})"
                )
        if self.refused:
            refused = f"{len(self.refused)} of {len(self.choices)} caches refused"
            lines.append(f"nothing baked: {refused}")
        elif self.image_id is None:
            lines.append(f"would bake {self.tag} FROM {self.engine_image_id[:19]} (dry run)")
        else:
            lines.append(f"baked {self.tag} ({self.image_id[:19]})")
        lines += [f"mcv image of {c}: {t} ({i[:19]})" for c, t, i in self.mcv]
        if self.pushed is not None:
            lines.append(f"pushed {self.pushed.reference}")
        if self.image_record:
            lines.append(f"  recorded at {self.image_record}")
        return lines_text(lines)  # why a cache was refused: a record's host, a file's name


def run(ctx: Context, request: verbs.Bake) -> BakeReport:
    """Choose (each chosen cache under its lease until the end), build FROM the engine image
    by id, check each layer, record; push if asked."""
    loaded = load_manifest(find_manifest(ctx.manifests_dir, request.version))
    manifest = loaded.manifest
    profile = pick_profile(manifest, request.profile)
    digest = manifest_digest(loaded)
    tag = f"{image_tag(manifest.name, manifest.engine.vllm, digest)}-{profile}-baked"
    where = optional_location(None, ctx.environ, ctx.project) if request.push else None
    services = connect_services(ctx.environ, ctx.say)
    if services.docker is None:  # asked once: a second connect would wait its limit again
        raise DockerUnavailable(services.docker_problem or "no Docker engine")
    client = services.docker
    # A home where nothing is recorded has no cache to bake: refused, making no ledger there.
    with ctx.reading() as ledger:
        if not request.dry_run:
            settle_killed_bakes(client, ledger, ctx.home, ctx.note)  # what a killed bake left
        engine = engine_image(client, ledger, digest, request.version, pull_from=None)
        verify = ArchiveVerifier(services.s3, services.s3_problem, archived_boots(ledger))
        choices = choose(
            ledger, ctx.home, manifest.active_caches(), engine.labels, digest, ctx.gpu_arch,
            verify, secrets_on_host(ledger, ctx.environ),
        )  # fmt: skip
        try:
            unreachable = tuple(f"{url}: {why}" for url, why in sorted(verify.unreachable.items()))
            report = BakeReport(
                request.version, profile, engine.id, tuple(choices), tag, unreachable=unreachable
            )
            if report.refused or request.dry_run:
                return report
            return _bake(ctx, request, client, ledger, report, engine.labels, digest, where)
        finally:
            release(choices)  # the trees are in the image now, or nothing was built


def _bake(
    ctx: Context,
    request: verbs.Bake,
    client: Any,
    ledger: Ledger,
    report: BakeReport,
    engine_labels: dict[str, str],
    digest: str,
    where: ArchiveLocation | None,
) -> BakeReport:
    """Build, check each layer, record; the MCV images; the provenance, and the push."""
    chosen = [c for c in report.choices if isinstance(c, Chosen)]
    baked, engine_id, tag = [c.baked for c in chosen], report.engine_image_id, report.tag
    at = ctx.now().isoformat(timespec="seconds")
    factors = key_factors(engine_labels, "", digest, ctx.gpu_arch)
    del factors["cache_name"]  # the one factor that differs: each cache's own, in its entry
    labels = bake_labels(baked, engine_id, report.profile, at, factors)
    trees = {c.baked.name: c.host_path for c in chosen}
    checkpoint = ctx.checkpoint()
    bake = BakeRecord(
        "", tag, engine_labels["lifecycle.manifest.name"], digest, engine_id, report.profile,
        ctx.gpu_arch, labels[BAKED_LABEL], at,
    )  # fmt: skip
    # Attempted before dockerd is asked: a bake killed from here on left images the next
    # bake records (or removes), never one no ledger knows; its MCV images too.
    with bake_attempt(ledger, ctx.home, bake):
        text = dockerfile(engine_id, baked, labels)
        image_id = build_baked(client, tag, text, trees, baked, ctx.say)
        checkpoint("bake-built")
        recorded = replace(bake, image_id=image_id)
        record_bake(ledger, recorded)
        # And the manifest's labels an engine image, and so a bake, carries: teardown --images
        # lists images by them.
        manifest_labels = {key: engine_labels[key] for key in (DIGEST_LABEL, NAME_LABEL)}
        mcv = tuple(
            _mcv(ctx, client, ledger, recorded, c, labels | manifest_labels, checkpoint)
            for c in chosen
            if request.format == "mcv" and c.baked.name in KINDS
        )
    checkpoint("bake-recorded")
    measured = measured_on(ledger, baked)
    image_labels = dict(client.images.get(image_id).labels or {})

    def provenance(pushed: Pushed | None = None) -> dict[str, Any]:
        """The Statement; once pushed, its subject is the registry's digest too."""
        named = {tag: image_id.removeprefix("sha256:")}
        if pushed is not None:
            named[pushed.reference.partition("@")[0]] = pushed.digest.removeprefix("sha256:")
        return statement(
            named, image_labels, baked, measured, ref=report.ref, profile=report.profile,
            arch=ctx.gpu_arch, at=at,
        )  # fmt: skip

    pushed, record, not_recorded = None, None, None
    if request.push is not None:  # recorded with the push: the archive's image record holds
        pushed, record, not_recorded = publish(  # the Statement, and so does this home
            ctx, client, ledger, image_id, digest, tag, request.push, where, provenance
        )
        checkpoint("bake-pushed")
        body = json.dumps(provenance(pushed), indent=2, sort_keys=True).encode()
        ledger.keep_evidence("bakes", ctx.home.provenance(image_id).name, body)
    return replace(
        report, image_id=image_id, pushed=pushed, image_record=record, not_recorded=not_recorded,
        provenance=provenance(pushed), mcv=mcv,
    )  # fmt: skip


def _mcv(
    ctx: Context,
    client: Any,
    ledger: Ledger,
    bake: BakeRecord,
    chosen: Chosen,
    labels: dict[str, str],
    checkpoint: Checkpoint,
) -> tuple[str, str, str]:
    """One cache's MCV image (cache name, tag, id), recorded with its bake; its target this
    host's GPU as MCV spells a CUDA arch (digits: `90a` is `90`)."""
    name, tag = chosen.baked.name, f"{bake.tag}-mcv-{chosen.baked.name}"
    arch = "".join(ch for ch in ctx.gpu_arch if ch.isdigit()) or ctx.gpu_arch
    image_id = build_mcv(
        client, tag, chosen.baked, chosen.host_path, backend="cuda", arch=arch, warp_size=32,
        labels_extra={**labels, MCV_LABEL: name}, on_line=ctx.say,
    )  # fmt: skip
    checkpoint("bake-mcv-built")
    record_mcv_image(ledger, McvRecord(image_id, bake.image_id, name, tag))
    return name, tag, image_id
