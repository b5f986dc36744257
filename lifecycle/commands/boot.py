"""`lifecycle boot`: run a built engine with its tracked JIT caches, record everything."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.boot.run import BootRequest, Watch, dry_run_spec
from lifecycle.build.engine import find_built
from lifecycle.build.plan import image_tag
from lifecycle.commands.context import Context
from lifecycle.commands.report import Report, plain
from lifecycle.errors import EXIT_NO, EXIT_OK, LifecycleError
from lifecycle.evidence.verdict import recorded_uses, recorded_warmth
from lifecycle.flows import boot_then_accept
from lifecycle.hooks import select
from lifecycle.ledger.boots import (
    BootRecord,
    CacheUse,
    UntrackedWrite,
    cache_uses,
    untracked_writes,
)
from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.manifest.digest import manifest_digest


@dataclass(frozen=True)
class BootOptions:
    """What the command line asks of a boot."""

    ref: str
    profile: str | None = None
    cold: bool = False
    hook_names: Sequence[str] = ()
    timeout_s: float | None = None


@dataclass(frozen=True)
class HookEntry:
    """A hook attached to a boot, and whether it declared it observes the engine."""

    name: str
    observing: bool  # it declared that it changes what it watches


@dataclass(frozen=True)
class BootReport(Report):
    """One finished boot: its record and how it used each cache."""

    FORMAT: ClassVar[str] = "lifecycle-boot/1"
    boot: BootRecord
    caches: tuple[CacheUse, ...]
    untracked: tuple[UntrackedWrite, ...] = ()  # JIT output written outside the caches

    @property
    def warmth(self) -> tuple[str, str]:
        """(verdict, phrase): `warm-hit`, `warm`; `partial`, `warm (partial: 155.0 MiB
        written outside tracked caches)`; … (lifecycle.evidence.verdict)."""
        writes = [(w.path, w.bytes) for w in self.untracked]
        return recorded_warmth(recorded_uses(self.caches), writes)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.boot.outcome == "ok" else EXIT_NO

    @property
    def hooks(self) -> tuple[HookEntry, ...]:
        """The hooks it ran with (the ledger keeps them as JSON text)."""
        return tuple(HookEntry(**hook) for hook in json.loads(self.boot.hooks))

    def to_json(self) -> dict[str, Any]:
        """The boot's row, with its hooks and secret names as lists, then its caches."""
        row = plain(self.boot)
        row["hooks"] = plain(self.hooks)
        row["secret_names"] = json.loads(self.boot.secret_names)
        verdict, warmth = self.warmth
        return {
            "format": self.FORMAT,
            **row,
            "caches": plain(self.caches),
            "verdict": verdict,
            "warmth": warmth,
            "untracked": [
                {"path": w.path, "change": w.change, "bytes": w.bytes} for w in self.untracked
            ],
        }


@dataclass(frozen=True)
class BootSpecReport(Report):
    """`--dry-run`: the exact container spec that would be sent (secrets named, not shown)."""

    FORMAT: ClassVar[str] = "lifecycle-boot-spec/1"
    spec: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"format": self.FORMAT, **self.spec}


def request(ctx: Context, options: BootOptions, client: Any | None) -> BootRequest:
    """Resolve manifest, image and hooks; with no client (dry run) the tag is derived."""
    loaded = load_manifest(find_manifest(ctx.manifests_dir, options.ref))
    digest = manifest_digest(loaded)
    tag = image_tag(loaded.manifest.name, loaded.manifest.engine.vllm, digest)
    image: dict[str, Any] = {"id": "(not looked up in a dry run)", "tags": [tag], "labels": {}}
    if client is not None:
        built = find_built(client, digest)
        if built is None:
            raise LifecycleError(
                f"{options.ref} is not built: no image carries manifest digest {digest[:12]};"
                f" run `lifecycle build {options.ref}` first"
            )
        image = {"id": built.id, "tags": built.tags, "labels": built.labels}
    hooks = select(ctx.project / "hooks", options.hook_names)
    # The GPU arch is part of the cache key; set LIFECYCLE_GPU_ARCH (e.g. 90a) on GPU hosts.
    arch = ctx.environ.get("LIFECYCLE_GPU_ARCH", "unknown")
    return BootRequest(
        loaded, digest, image, tag, options.profile, options.cold, hooks, arch, options.timeout_s
    )


def run(ctx: Context, options: BootOptions) -> BootReport:
    """Boot once (then the profile's acceptance, if any); the boot as recorded."""
    client = ctx.docker()
    boot_request = request(ctx, options, client)
    with ctx.ledger() as ledger:
        watch = Watch(on_line=ctx.say, checkpoint=ctx.checkpoint())
        record = boot_then_accept(client, ledger, boot_request, ctx.environ, watch)
        uses = cache_uses(ledger, boot_id=record.id)
        writes = untracked_writes(ledger, record.id)
    return report_of(record, uses, writes)


def report_of(
    record: BootRecord, uses: Sequence[CacheUse], writes: Sequence[UntrackedWrite] = ()
) -> BootReport:
    """A boot's record, its uses of caches and its writes outside them as its report."""
    return BootReport(record, tuple(uses), tuple(writes))


def dry_run(ctx: Context, options: BootOptions) -> BootSpecReport:
    """The spec a boot would send; nothing is made, recorded or sent."""
    return BootSpecReport(dry_run_spec(request(ctx, options, None), ctx.environ).describe())


def render(report: BootReport) -> str:
    """`boot ID: OUTCOME (exit N)`, its caches cold or warm, where its evidence is."""
    boot = report.boot
    caches = ", ".join(f"{u.cache_id} {u.mode}" for u in report.caches)
    flag = " [instrumented]" if boot.instrumented else ""
    why = f" ({boot.error})" if boot.outcome == "timeout" and boot.error else ""
    return (
        f"boot {boot.id}: {boot.outcome} (exit {boot.exit_code}){why}{flag}\n"
        f"  caches: {caches}\n  jit: {report.warmth[1]}\n  evidence: {boot.evidence_path}\n"
    )


def render_spec(report: BootSpecReport) -> str:
    """The dry run's spec, as JSON (it is what dockerd would be sent)."""
    return json.dumps(report.to_json(), indent=2) + "\n"
