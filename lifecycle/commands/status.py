"""`lifecycle status`: the one screen a release engineer reads in the morning. This host's
caches per manifest (how many, how big, how many a warm boot would take), the newest bake of
each manifest and profile, what the policy would do now (lifecycle.commands.converge), whether
a night left production down, and the last night with its verdicts (from its report) and the
tuned values it proposed instead of writing (from its journal)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lifecycle.archive.config import CONFIG_FILE, optional_location
from lifecycle.build.engine import find_built
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.commands.converge import Converge, converge
from lifecycle.commands.teardown import connect_services
from lifecycle.dockerd import sdk_errors
from lifecycle.errors import LifecycleError
from lifecycle.home import read_record
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord, all_caches, not_reusable
from lifecycle.ledger.builds import BakeRecord, all_bakes, mcv_images
from lifecycle.ledger.nights import events, newest_night, production_left_down
from lifecycle.night.settle import PROPOSED
from lifecycle.policy.model import read_policy
from lifecycle.report import Report
from lifecycle.table import count_of, human_bytes, lines_text, render
from lifecycle.teardown.plan import NO_CACHES


@dataclass(frozen=True)
class ManifestCaches:
    manifest: str
    caches: int
    bytes: int
    warm_ready: int  # a warm boot would take them (last boot ok, scanned, unchanged, free)
    # Would be warm-ready, but no engine image of theirs is on dockerd for a boot to run
    # (removed: by another home that built it, by hand): `lifecycle build` brings one back.
    image_gone: int = 0


@dataclass(frozen=True)
class NewestBake:
    manifest: str
    profile: str
    image_id: str
    tag: str
    baked_at: str
    removed_at: str | None  # when a teardown (or apply) removed its image, as recorded
    on_dockerd: bool | None  # None: dockerd was not asked (it did not answer)
    # Its MCV images (bake --format mcv): cache, tag, image_id, removed_at, on_dockerd each.
    mcv: list[dict[str, Any]] = field(default_factory=list)
    # When it is gone from dockerd: the newest older bake still there (tag, image_id,
    # baked_at), the one `boot --baked` runs instead; None when there is none, or no need.
    runs_instead: dict[str, str] | None = None


@dataclass(frozen=True)
class StatusReport(Report):
    FORMAT: ClassVar[str] = "lifecycle-status/1"
    caches: list[ManifestCaches]
    policy: dict[str, int] | None  # what apply would do now, counted
    policy_problem: str | None  # why the policy could not be evaluated
    production: str  # up (no night left it down) | down since …
    night: dict[str, Any] | None = field(default=None)  # the last night, from its report
    bakes: list[NewestBake] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.FORMAT,
            "caches": [vars(m) for m in self.caches],
            "bakes": [vars(b) for b in self.bakes],
            "policy": self.policy,
            "policy_problem": self.policy_problem,
            "production": self.production,
            "night": self.night,
        }

    def text(self) -> str:
        rows = [
            [m.manifest, str(m.caches), human_bytes(m.bytes), str(m.warm_ready)]
            for m in self.caches
        ]
        header = ["MANIFEST", "CACHES", "SIZE", "WARM-READY"]
        # After the table, lines of outside text: a manifest's names, S3's or dockerd's
        # errors, a night report's verdicts.
        lines = []
        for bake in self.bakes:
            where = f"; removed {bake.removed_at}" if bake.removed_at else ""
            where = where or ("; no longer on dockerd" if bake.on_dockerd is False else "")
            if older := bake.runs_instead:
                where += f"; boot --baked runs the older {older['image_id'][:19]}"
                where += f" (baked {older['baked_at']})"
            lines.append(
                f"bake {bake.manifest} {bake.profile}: {bake.tag} ({bake.image_id[:19]}),"
                f" baked {bake.baked_at}{where}"
            )
            for mcv in bake.mcv:
                gone = f"; removed {mcv['removed_at']}" if mcv["removed_at"] else ""
                gone = gone or ("; no longer on dockerd" if mcv["on_dockerd"] is False else "")
                lines.append(
                    f"  mcv image of {mcv['cache']}: {mcv['tag']} ({mcv['image_id'][:19]}){gone}"
                )
        if self.policy is not None:
            done = ", ".join(f"{n} {what}" for what, n in self.policy.items() if n)
            if self.policy_problem:  # what dockerd or S3 guards was kept, not found in order
                said = f"policy: {done + '; ' if done else ''}incomplete: not asked:"
                said += f" {self.policy_problem}"
            else:
                said = f"policy: {done or 'nothing to do'}" + ("; `lifecycle plan`" * bool(done))
            lines.append(said)
        else:
            lines.append(f"policy: not evaluated: {self.policy_problem}")
        # All the ledger knows is whether a night took production down and did not bring it
        # back; that nothing else stopped it, only production's own status hook can say.
        known = "no night left it down" if self.production == "up" else self.production
        lines.append(f"production: {known}")
        night = self.night
        if night is None:
            lines.append("last night: none on this host")
        else:
            lines.append(f"last night: {night['id']} ({night['plan']}, {night['state']})")
            lines += [f"  pin {pin}: {verdict}" for pin, verdict in night["pins"].items()]
            lines += [
                f"  {p['pin']} {p['argument']}: proposed: {p['detail']}" for p in night["proposed"]
            ]
        unbootable = [
            f"{m.manifest}: {count_of(m.image_gone, 'cache')} not warm-ready: image gone"
            " (no engine image of its manifest on dockerd; `lifecycle build` it again)"
            for m in self.caches
            if m.image_gone
        ]
        return render(header, rows, empty=NO_CACHES) + lines_text([*unbootable, *lines])


NOTHING_RECORDED = "nothing is recorded on this host yet"


def run(ctx: Context, options: verbs.Status) -> StatusReport:
    """Read the ledger, the policy's plan (dockerd and S3 if they answer) and the last report;
    in a home where nothing is recorded yet, that (and a note), making no ledger."""
    policy = read_policy(ctx.project / CONFIG_FILE)
    location = optional_location(None, ctx.environ, ctx.project)
    if not ctx.recorded():
        return StatusReport([], None, NOTHING_RECORDED, "up")
    with ctx.ledger(create=False) as ledger:
        every = all_caches(ledger)
        caches = [c for c in every if c.state in ("live", "archived")]
        passed_over = not_reusable(ledger)
        services = connect_services(ctx.environ)
        unbootable = _no_image(services.docker, ledger, caches)
        per: dict[str, ManifestCaches] = {}
        for cache in caches:
            was = per.get(cache.manifest_name, ManifestCaches(cache.manifest_name, 0, 0, 0))
            ready = cache.id not in passed_over
            gone = ready and cache.manifest_digest in unbootable
            per[cache.manifest_name] = ManifestCaches(
                was.manifest, was.caches + 1, was.bytes + (cache.bytes or 0),
                was.warm_ready + (ready and not gone), was.image_gone + gone,
            )  # fmt: skip
        counts, problem, images = None, None, None
        try:
            made = converge(ctx, ledger, services, policy, location, every)
            counts, problem = _counted(made), "; ".join(made.caches.unreachable) or None
            if services.docker is not None:  # the plan's images: every engine image and bake
                images = {image.id for image in made.caches.images}
        except LifecycleError as exc:
            problem = str(exc)
        baked: dict[tuple[str, str], list[BakeRecord]] = {}
        for bake in all_bakes(ledger):  # oldest first
            baked.setdefault((bake.manifest_name, bake.profile), []).append(bake)
        newest = {key: each[-1] for key, each in baked.items()}

        def on_dockerd(image_id: str) -> bool | None:
            return None if images is None else image_id in images

        def instead(each: list[BakeRecord]) -> dict[str, str] | None:
            if on_dockerd(each[-1].image_id) is not False:
                return None  # there, or dockerd was not asked
            there = (b for b in reversed(each[:-1]) if on_dockerd(b.image_id))
            older = next(there, None)
            return (
                None
                if older is None
                else {"tag": older.tag, "image_id": older.image_id, "baked_at": older.baked_at}
            )

        bakes = [
            NewestBake(
                b.manifest_name, b.profile, b.image_id, b.tag, b.baked_at, b.removed_at,
                on_dockerd(b.image_id),
                [
                    {"cache": m.cache_name, "tag": m.tag, "image_id": m.image_id,
                     "removed_at": m.removed_at, "on_dockerd": on_dockerd(m.image_id)}
                    for m in mcv_images(ledger, b.image_id)
                ],
                instead(baked[key]),
            )
            for key, b in sorted(newest.items())
        ]  # fmt: skip
        down = production_left_down(ledger)
        production = f"down since {down[-1].at} (night {down[-1].night_id})" if down else "up"
        night = newest_night(ledger)
        proposed = _proposed(ledger, night.id) if night else []
    return StatusReport(
        sorted(per.values(), key=lambda m: m.manifest), counts, problem, production,
        _night(ctx, night.id, night.plan_name, proposed) if night else None, bakes,
    )  # fmt: skip


def _no_image(docker: Any | None, ledger: Ledger, caches: Iterable[CacheRecord]) -> set[str]:
    """The manifest digests of `caches` no boot could run now: dockerd has no engine image
    of theirs (as `boot` looks for one: this home's, else any carrying the digest). Empty
    when dockerd does not answer: not known, so the ledger's word stands."""
    if docker is None:
        return set()
    try:
        digests = {cache.manifest_digest for cache in caches}
        return {digest for digest in digests if find_built(docker, ledger, digest) is None}
    except sdk_errors():
        return set()


def _counted(made: Converge) -> dict[str, int]:
    return {
        "caches to archive": len(made.archive),
        "caches to remove": len(made.caches.removing),
        "caches to record as gone": len(made.caches.settling),
        "images to remove": sum(1 for i in made.caches.images if i.removes),
        "archive objects to collect": len(made.remote.remove) if made.remote else 0,
    }


def _night(
    ctx: Context, night_id: str, plan: str, proposed: list[dict[str, Any]]
) -> dict[str, Any]:
    """The night's state and each pin's verdict, as its newest report says; what it proposed."""
    report = ctx.home.night_dir(night_id) / "report.json"
    try:
        # Bounded, and never waiting on a FIFO: `status` is read in the morning, and must answer.
        found = read_record(report)
    except (OSError, ValueError) as exc:
        found = {"state": f"its report {report} cannot be read: {exc}"}
    view: Mapping[str, Any] = found if isinstance(found, dict) else {"state": "no report yet"}
    # A pin with no matrix cell (a tune's, ladders only) has no verdict to read in the morning.
    pins = {p["pin"]: p["verdict"] for p in view.get("pins", []) if p.get("cells")}
    state = view.get("state", "?")
    return {"id": night_id, "plan": plan, "state": state, "pins": pins, "proposed": proposed}


def _proposed(ledger: Ledger, night_id: str) -> list[dict[str, Any]]:
    """The tuned values the night proposed instead of writing (a revalidation whose carried
    value no longer clears, a manifest edited under the rungs), as its journal has them: the
    report's ladders show what was written, not what waits for a hand."""
    proposed = [
        json.loads(e.detail) for e in events(ledger, night_id) if e.event == PROPOSED and e.detail
    ]
    return [{k: d[k] for k in ("pin", "argument", "value", "detail")} for d in proposed]
