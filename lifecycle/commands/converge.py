"""`lifecycle plan` and `lifecycle apply`: what it takes to bring this host's caches and engine
images, and the remote archive, to the policy in lifecycle.yaml (lifecycle.policy); and doing
it, through the same removal invariant teardown keeps and the same sweep gc makes.

A plan saved with `-o FILE` is bound to the state it saw (a digest of every ledger row it
reads, lifecycle.ledger.retention, of the archive's listing, and of the policy); `apply FILE`
refuses it when any of them moved, or when the plan of now (the clock, dockerd, the manifests
move too) would do anything the saved one does not show. Each step is one a re-run completes:
archiving is idempotent, teardown and gc journal what they are about to remove (a gc run a
kill stopped is completed first, as `gc --remote` completes it), so a killed apply, run again,
converges.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lifecycle.archive.config import CONFIG_FILE, optional_location
from lifecycle.archive.copies import RecordCopies
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.run import CacheInUse, archive_caches
from lifecycle.archive.store import BlobStore
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.commands.gc import completed_line
from lifecycle.commands.teardown import connect_services, settle_dead
from lifecycle.durations import parse_duration
from lifecycle.errors import (
    EXIT_ENVIRONMENT,
    EXIT_NO,
    EXIT_OK,
    LifecycleError,
    check_replaceable,
    read_given,
)
from lifecycle.gc import (
    GcPlan,
    Swept,
    gc_lock,
    journal_plan,
    pinned_results,
    plan_gc,
    sweep,
    take_snapshot,
)
from lifecycle.gc import (
    Policy as GcPolicy,
)
from lifecycle.home import write_named
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import CacheRecord, all_caches
from lifecycle.ledger.removal import unfinished_gc
from lifecycle.ledger.retention import state_digest
from lifecycle.policy.facts import image_keeps, live_caches, unknown_releases
from lifecycle.policy.keep import PolicyRules, Verdict, evaluate
from lifecycle.policy.model import Policy, read_policy, seconds
from lifecycle.report import Report, plain
from lifecycle.table import human_bytes, lines_text, some_of, visible
from lifecycle.teardown.containers import image_name
from lifecycle.teardown.plan import Action, TeardownPlan, plan_json, plan_text
from lifecycle.teardown.removal import teardown_lock
from lifecycle.teardown.run import TeardownResult, result_json, run_teardown, summary_text
from lifecycle.teardown.survey import Services, TeardownRequest, is_gone, make_plan

FORMAT = "lifecycle-plan/1"


@dataclass(frozen=True)
class Converge:
    """The whole difference between now and the policy."""

    caches: TeardownPlan  # every cache on this host, and the engine images
    request: TeardownRequest  # the policy as teardown's rules
    verdicts: Mapping[str, Verdict]
    archive: tuple[str, ...]  # caches kept, archived now (idle past archive_after)
    remote: GcPlan | None  # None: the policy keeps the whole archive, or none is configured
    location: str | None
    state: dict[str, str]  # what the plan saw: ledger, archive, policy
    unknown_releases: tuple[str, ...] = ()  # keep_releases entries naming no manifest
    unread: str | None = None  # the archive's records gc could not read, and what it kept
    # Caches the policy archives now that a live boot writes (cache id -> boot): an archive
    # would refuse them, so they wait for the boot to end, and the rest goes on.
    archive_later: Mapping[str, str] = field(default_factory=dict)

    @property
    def notes(self) -> tuple[str, ...]:
        # What was not asked is said on stderr, with --json too (as teardown says it): exit 3.
        unasked = tuple(
            f"lifecycle: {visible(p)}; what it guards was kept" for p in self.caches.unreachable
        )
        unknown = tuple(
            f"keep_releases: {release!r} names no manifest of this project"
            f" (no manifests/{release}/manifest.yaml): it keeps nothing"
            for release in self.unknown_releases
        )
        return unasked + unknown + ((self.unread,) if self.unread else ())

    @property
    def empty(self) -> bool:
        return not (self.caches.has_work or self.archive or (self.remote and self.remote.remove))

    def to_json(self) -> dict[str, Any]:
        """The plan as data, with its digest: what `apply FILE` finds it saved as."""
        body = self._body()
        return body | {"digest": _digest(body)}

    def _body(self) -> dict[str, Any]:
        remote = self.remote
        collect = None
        if remote is not None:
            collect = {"remove": [d.key for d in remote.remove], "bytes": remote.bytes}
            collect |= {"kept": remote.kept, "pinned": list(remote.pinned)}
            collect |= {"unreadable": {f"{self.location}/{k}": w for k, w in remote.unread.items()}}
        return {
            "format": FORMAT,
            "location": self.location,
            "state": self.state,
            "archive": list(self.archive),
            "archive_later": dict(self.archive_later),
            "caches": plan_json(self.caches),
            "remote": collect,
            "unknown_releases": list(self.unknown_releases),
            "empty": self.empty,
        }

    def text(self) -> str:
        # After teardown's plan, lines holding outside text (S3's and dockerd's errors).
        lines = [f"archive (and keep): {cache_id}" for cache_id in self.archive]
        lines += [
            f"archive later: {cache_id}: in use by boot {boot}"
            for cache_id, boot in self.archive_later.items()
        ]
        if self.remote is not None:
            lines.append(
                f"remote {self.location}: remove {len(self.remote.remove)} objects"
                f" ({human_bytes(self.remote.bytes)}), pinned results kept:"
                f" {', '.join(self.remote.pinned) or 'none'}"
            )
        if self.caches.unreachable:  # what it guards was kept, not found as the policy says
            lines.append(f"incomplete: not asked: {'; '.join(self.caches.unreachable)}")
        elif self.empty:
            lines.append("nothing to do: this host and the archive are as the policy says")
        return plan_text(self.caches, dry_run=False) + lines_text(lines)


@dataclass(frozen=True)
class PlanReport(Report):
    FORMAT: ClassVar[str] = FORMAT
    plan: Converge
    saved: Path | None = None

    @property
    def exit_code(self) -> int:
        if self.plan.caches.unreachable:
            return EXIT_ENVIRONMENT
        return EXIT_NO if self.plan.caches.has_problems else EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        return self.plan.notes

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "saved": str(self.saved) if self.saved else None}

    def text(self) -> str:
        saved = (
            f"plan saved to {self.saved}: `lifecycle apply {self.saved}`\n" if self.saved else ""
        )
        return self.plan.text() + saved


def plan(ctx: Context, options: verbs.Plan) -> PlanReport:
    """The plan; with -o FILE, saved with the state it saw."""
    policy = read_policy(ctx.project / CONFIG_FILE)
    if options.out is not None:
        check_replaceable(options.out, "a plan `lifecycle plan -o` saved", f'"format": "{FORMAT}"')
    location = optional_location(None, ctx.environ, ctx.project)
    services = connect_services(ctx.environ, ctx.say)
    with ctx.reading() as ledger:
        made = converge(ctx, ledger, services, policy, location)
    if options.out is not None:
        _save(options.out, made.to_json())
    return PlanReport(made, options.out)


@dataclass(frozen=True)
class ApplyReport(Report):
    FORMAT: ClassVar[str] = "lifecycle-apply/1"
    plan: Converge
    archived: tuple[str, ...] = ()
    teardown: TeardownResult | None = None
    swept: Swept | None = None
    busy: tuple[str, ...] = ()  # caches a boot took since the plan: not archived, and why
    resumed: tuple[Swept, ...] = ()  # gc runs a kill stopped, completed before the plan

    @property
    def exit_code(self) -> int:
        failed = self.teardown is not None and self.teardown.failed
        # Not converged while what dockerd or S3 guards was not asked, whatever else went.
        if self.plan.caches.unreachable or (self.teardown and self.teardown.unreachable):
            return EXIT_ENVIRONMENT
        return EXIT_NO if failed or self.plan.caches.has_problems else EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        return self.plan.notes

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.FORMAT,
            "plan": self.plan.to_json(),
            "archived": list(self.archived),
            "busy": list(self.busy),
            "teardown": result_json(self.teardown) if self.teardown else None,
            "swept": plain(self.swept),
            "resumed": plain(self.resumed),
        }

    def text(self) -> str:
        lines = [f"archived: {cache_id}" for cache_id in self.archived]
        lines += [f"not archived: {why}" for why in self.busy]
        text = lines_text(lines)
        if self.teardown is not None:
            text += summary_text(self.teardown)
        if self.swept is not None:
            removed = f"{self.swept.removed} objects, {human_bytes(self.swept.bytes_freed)}"
            text += f"remote: removed {removed} freed (run {self.swept.run_id})\n"
        return text


def apply(ctx: Context, options: verbs.Apply) -> ApplyReport:
    """Plan again (refused if a saved plan's state moved), agree, carry the plan out."""
    saved = None if options.file is None else _saved(options.file)
    policy = read_policy(ctx.project / CONFIG_FILE)
    location = optional_location(None, ctx.environ, ctx.project)
    services = connect_services(ctx.environ, ctx.say)
    checkpoint = ctx.checkpoint()
    with ctx.ledger() as ledger, teardown_lock(ctx.home), gc_lock(ctx.home):
        resumed: tuple[Swept, ...] = ()
        if location is not None:  # the next gc at a location completes a stopped one first
            store = BlobStore(services.s3, location, RecordCopies(ctx.home, location))
            stopped = unfinished_gc(ledger, location.url())
            resumed = tuple(sweep(ledger, store, run.run_id, ctx.now) for run in stopped)
            if resumed and not options.as_json:  # said now: a stale plan or a no comes after
                ctx.out("".join(completed_line(done) + "\n" for done in resumed))
        made = converge(ctx, ledger, services, policy, location)
        if saved is not None:
            _check_fresh(saved, made)
        if not options.as_json:
            ctx.out(made.text())
        if made.empty:
            return ApplyReport(made, resumed=resumed)
        ctx.agree("carry out this plan?", options, made.to_json)
        # A dead boot's engine may run on, writing caches: stopped before anything is archived.
        at = ctx.now().isoformat(timespec="seconds")
        for line in settle_dead(services.docker, ledger, ctx.home, at):
            ctx.say(line)
        checkpoint("apply-planned")
        archived: tuple[str, ...] = ()
        busy: tuple[str, ...] = ()
        if made.archive and location is not None:
            for cache_id in made.archive:
                with_content = made.verdicts[cache_id].content
                try:
                    archive_caches(
                        ledger, ctx.home, services.s3, location, [cache_id],
                        host_env=ctx.environ, with_content=with_content, dry_run=False,
                        progress=ctx.say,
                    )  # fmt: skip
                except CacheInUse as exc:  # a boot took it since the plan: the next apply
                    busy += (str(exc),)
                    continue
                archived += (cache_id,)
            checkpoint("apply-archived")
        result = None
        if made.caches.has_work:
            result = run_teardown(
                ledger, ctx.home, services, made.caches, made.request, checkpoint=checkpoint,
                progress=ctx.say,
            )  # fmt: skip
        swept = None
        if made.remote is not None and made.remote.remove and location is not None:
            store = BlobStore(services.s3, location)
            run_id = journal_plan(ledger, store, made.remote, _gc_policy(policy), ctx.now())
            checkpoint("gc-planned")
            swept = sweep(ledger, store, run_id, ctx.now, checkpoint=checkpoint)
    return ApplyReport(made, archived, result, swept, busy, resumed)


def converge(
    ctx: Context,
    ledger: Ledger,
    services: Services,
    policy: Policy,
    location: ArchiveLocation | None,
    every: Sequence[CacheRecord] | None = None,
) -> Converge:
    """Read everything the policy is evaluated on and decide; changes nothing. `every`: the
    ledger's caches, when the caller read them already."""
    every = all_caches(ledger) if every is None else every
    # keep_last and keep_releases keep the newest caches there is a dir of, not one gone.
    gone = [c.id for c in every if not c.gone and is_gone(c)]
    verdicts = evaluate(policy, live_caches(ledger, ctx.manifests_dir, gone), ctx.now())
    request = TeardownRequest(
        PolicyRules(verdicts),
        archive_first=location is not None,
        images=True,
        archive_to=location,
        image_keeps=image_keeps(ledger, policy, ctx.manifests_dir),
    )
    caches = make_plan(ledger, ctx.home, services, request, every=every)
    # Nor one recorded as gone: there is nothing of it to archive (its dir vanished).
    going = {d.cache.id for d in caches.decisions if d.action is not Action.KEEP}
    boots = {d.cache.id: d.in_use_by for d in caches.decisions if d.in_use_by}
    due = [c for c, v in verdicts.items() if v.archive and c not in going]
    archive = tuple(c for c in due if c not in boots)
    later = {c: boots[c] for c in due if c in boots}
    if location is not None and archive and services.s3 is None:
        raise LifecycleError(f"cannot archive to {location.url()}: {services.s3_problem}")
    remote, listing, unread = None, "no archive configured", None
    if location is not None:
        # The client teardown's checks use too; records read once per host (.copies).
        store = BlobStore(services.s3, location, RecordCopies(ctx.home, location))
        collects = policy.remote.keep_last is not None or policy.remote.keep_within is not None
        # The plan binds to the listing; only a rule that collects needs every record read
        # (a team's bucket holds thousands: seconds of GETs every `status`).
        snap = take_snapshot(store) if collects else None
        objects = snap.objects if snap else {item.key: item for item in store.list()}
        listing = hashlib.sha256(
            json.dumps(sorted((k, o.etag) for k, o in objects.items())).encode()
        ).hexdigest()
        if snap is not None:
            remote = plan_gc(snap, _gc_policy(policy), pinned_results(ledger, snap), ctx.now())
            unread = remote.unread_note(store.where)
    state = {"ledger": state_digest(ledger), "archive": listing, "policy": policy.digest()}
    where = location.url() if location else None
    unknown = tuple(unknown_releases(policy, ctx.manifests_dir))
    return Converge(
        caches, request, verdicts, archive, remote, where, state, unknown, unread, later
    )


def _gc_policy(policy: Policy) -> GcPolicy:
    remote = policy.remote
    return GcPolicy(remote.keep_last, seconds(remote.keep_within), parse_duration(remote.grace))


def _save(file: Path, plan: dict[str, Any]) -> None:
    """Whole or not at all: a plan cut short by a crash or a full disk is no plan."""
    try:
        write_named(file, (json.dumps(plan, indent=2) + "\n").encode())
    except OSError as exc:
        raise LifecycleError(f"cannot save the plan to {file}: {exc.strerror}") from None


# What a saved plan's state names, as the refusal says it.
_STATE_NAMES = {
    "ledger": "this host's ledger",
    "archive": "the archive's listing",
    "policy": f"the policy in {CONFIG_FILE}",
}


MAX_PLAN_BYTES = 256 * 2**20  # a plan naming a million archive objects is ~150 MiB


def _digest(body: Mapping[str, Any]) -> str:
    """Of a plan as data, its keys sorted: the same of the file it was saved to, read back
    (however indented), and not the same of one edited since."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# Not under a plan's digest: the digest itself, and where `plan --json` says it was saved.
_UNDIGESTED = ("digest", "saved")


def _saved(file: Path) -> tuple[Path, dict[str, Any]]:
    """A plan `plan -o` saved, as it saved it; read before anything is asked of dockerd or S3.
    What apply carries out is the plan of now, never the file's; a file edited since (a cache
    added to what goes, an id changed) is refused all the same: it is not what was reviewed."""
    text = read_given(file, f"the plan {file}", MAX_PLAN_BYTES)
    digest = ""
    try:
        saved: Any = json.loads(text)
        if isinstance(saved, dict):  # as deep as it parses, written again to be digested
            digest = _digest({k: v for k, v in saved.items() if k not in _UNDIGESTED})
    except (ValueError, RecursionError):  # RecursionError: nested deeper than any plan is
        saved = None
    if not (
        isinstance(saved, dict)
        and saved.get("format") == FORMAT
        and isinstance(saved.get("state"), dict)
    ):
        raise LifecycleError(f"{file}: not a plan `lifecycle plan -o FILE` saved")
    if "digest" not in saved:  # saved by a lifecycle before plans had one
        raise LifecycleError(
            f"{file}: a plan with no digest (an older lifecycle's, or edited); plan again"
        )
    if saved["digest"] != digest:
        raise LifecycleError(
            f"{file}: not as `lifecycle plan` saved it (edited since: its digest does not"
            " match what it holds); plan again"
        )
    return file, dict(saved)


def _check_fresh(saved: tuple[Path, Mapping[str, Any]], now: Converge) -> None:
    """A saved plan (its file, what it holds) applies only to the state it saw, and only
    while the plan of now does nothing it does not show: what is carried out is what was
    reviewed, or less."""
    file, saved_plan = saved
    state = saved_plan["state"]
    moved = [_STATE_NAMES[what] for what in _STATE_NAMES if state.get(what) != now.state[what]]
    if moved or saved_plan.get("location") != now.location:
        said = " and ".join(moved) or "the archive location"
        raise LifecycleError(f"plan is stale: {said} changed since {file} was made; plan again")
    # The clock moved (keep_within, archive_after, the archive's grace), or dockerd or the
    # manifests did: none of them is in the state.
    # Both as a file holds them: the plan of now read back as the saved one was.
    unshown = unshown_work(saved_plan, json.loads(json.dumps(now.to_json())))
    if unshown:
        raise LifecycleError(
            f"plan is stale: applied now it would also {unshown}, which {file} does not show;"
            " plan again"
        )


def unshown_work(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """What the plan `now` does that `saved` does not (both as `Converge.to_json` writes
    them), in words; empty when it does nothing more."""
    extra = _work(now) - _work(saved)
    kinds = sorted({kind for kind, _ in extra})
    return "; ".join(
        f"{kind} {some_of(sorted(name for k, name in extra if k == kind))}" for kind in kinds
    )


def _work(plan: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(what, to which) for each thing carrying out `plan` does. A saved file is read as
    found: what does not parse as work shows none, so the plan of now has more to show."""
    teardown = _mapping(plan.get("caches"))
    work = set()
    for cache in _mappings(teardown.get("caches")):
        if cache.get("action") != Action.KEEP.value:
            work.add((str(cache.get("action")), str(cache.get("id"))))
        if cache.get("resumes"):
            work.add(("complete the stopped removal of", str(cache.get("id"))))
    for container in _mappings(teardown.get("containers")):
        work.add(("remove stopped boot container", str(container.get("name"))))
    for image in _mappings(teardown.get("images")):
        if image.get("removes"):
            tags = image.get("tags")
            name = image_name(tuple(map(str, tags)) if isinstance(tags, list) else (), "")
            work.add(("remove image", name or str(image.get("id"))))
    work |= {("archive (and keep)", str(c)) for c in _items(plan.get("archive"))}
    remote = _mapping(plan.get("remote"))
    work |= {("remove from the archive", str(key)) for key in _items(remote.get("remove"))}
    return work


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in _items(value) if isinstance(item, dict)]
