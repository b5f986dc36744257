"""Carry out a teardown plan: pre-teardown hooks, archive first, each cache in two journalled
phases (verified again at that moment), then stopped boot containers and engine images; and
what the run did, as text and JSON."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from contextlib import nullcontext, suppress
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.store import S3Unavailable
from lifecycle.archive.transfer import Progress
from lifecycle.dockerd import sdk_errors
from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.home import Home
from lifecycle.hooks import Hook, HookRun, hook_session
from lifecycle.leases import try_lease
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of, mark_verified
from lifecycle.ledger.boots import (
    CacheRecord,
    all_caches,
    cache_by_id,
    cache_uses,
    settle_dead_boots,
    tainted_files,
    used_pairs,
)
from lifecycle.ledger.builds import all_bakes, image_removed, mcv_images
from lifecycle.ledger.removal import pins
from lifecycle.ledger.results import results_not_archived_on
from lifecycle.table import count_of, human_bytes, lines_text
from lifecycle.teardown.containers import (
    BootContainer,
    ImageDecision,
    empty_as_root,
    mounted_by,
    remove_image,
)
from lifecycle.teardown.plan import (
    Action,
    CacheDecision,
    TeardownPlan,
    holders,
    image_lines,
)
from lifecycle.teardown.removal import (
    CacheOutcome,
    Journal,
    Verdict,
    archive_gaps,
    refuse,
    remove_cache,
    scan_now,
    withheld_paths,
    withheld_reason,
)
from lifecycle.teardown.survey import (
    ArchiveVerifier,
    Services,
    TeardownRequest,
    archive_one,
    archived_boots,
    archived_results,
    containers_going,
    current_mounts,
    images_going,
    with_their_images,
)


@dataclass(frozen=True)
class TeardownResult:
    """What one run did."""

    run_id: str  # t-<UTC time>-<random>: the journal's steps of this run carry it
    outcomes: tuple[CacheOutcome, ...]
    containers_removed: tuple[BootContainer, ...]
    images: tuple[ImageDecision, ...]  # removed, or kept and why, decided after the caches went
    evidence: tuple[str, ...]  # archive locations of the removed caches
    notes: tuple[str, ...] = ()  # what dockerd refused while cleaning up
    hook_runs: tuple[HookRun, ...] = ()
    unreachable: tuple[str, ...] = ()  # S3 stopped answering during the run: why (exit 3)

    @property
    def removed(self) -> tuple[CacheOutcome, ...]:
        """Caches torn down by this run."""
        return tuple(o for o in self.outcomes if o.removed)

    @property
    def failed(self) -> tuple[CacheOutcome, ...]:
        """Caches the plan meant to remove that this run refused or could not finish."""
        return tuple(o for o in self.outcomes if not o.removed and o.problem)


def run_teardown(
    ledger: Ledger,
    home: Home,
    services: Services,
    plan: TeardownPlan,
    request: TeardownRequest,
    *,
    hooks: Sequence[Hook] = (),
    checkpoint: Checkpoint = lambda point: None,
    progress: Progress | None = None,
) -> TeardownResult:
    """Carry out `plan` (after the user agreed to it) with the hooks attached to the step."""
    run_id = f"t-{services.now():%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"  # like boot ids
    journal = Journal(ledger, run_id, lambda: _stamp(services.now()))
    context = {
        "run_id": journal.run_id,
        "caches": [d.cache.id for d in plan.removing],
        "archive": plan.archive_to,
    }
    with hook_session(hooks, "teardown", context) as session:
        session.fire("pre-teardown")
        checkpoint("teardown-planned")
        settle_dead_boots(ledger, home, _stamp(services.now()))
        problems = _archive_first(ledger, home, services, plan, request, progress)
        verify = ArchiveVerifier(
            services.s3, services.s3_problem, archived_boots(ledger), archived_results(ledger)
        )
        outcomes = []
        for decision in plan.decisions:
            outcome = _carry_out(
                ledger, home, services, journal, decision, request, problems, verify, checkpoint
            )
            if outcome is not None:
                outcomes.append(outcome)
        containers: list[BootContainer] = []
        images: list[ImageDecision] = []
        notes = _clean_docker(ledger, services, request, containers, images, checkpoint)
        removed = {o.cache_id for o in outcomes if o.removed}
        evidence = {a.location for i in removed if (a := archive_of(ledger, i)) is not None}
        result = TeardownResult(
            journal.run_id,
            tuple(outcomes),
            tuple(containers),
            tuple(images),
            tuple(sorted(evidence)),
            notes,
            unreachable=tuple(
                sorted({p for p in problems.values() if p.startswith(_GONE)})
                + sorted(set(verify.unreachable.values()))
            ),
        )
        session.fire(
            "post-teardown",
            {
                "removed": sorted(removed),
                "bytes_freed": sum(o.bytes_freed for o in result.removed),
                "refused": {o.cache_id: o.problem for o in result.failed},
            },
        )
    return replace(result, hook_runs=tuple(session.runs))


def _carry_out(
    ledger: Ledger,
    home: Home,
    services: Services,
    journal: Journal,
    decision: CacheDecision,
    request: TeardownRequest,
    archive_problems: dict[str, str],
    verify: ArchiveVerifier,
    checkpoint: Checkpoint,
) -> CacheOutcome | None:
    cache, resumes = decision.cache, decision.resumes
    if decision.action is Action.SETTLE:
        return _settle(ledger, home, journal, cache, verify)
    if not decision.removes:
        if resumes is None:
            return None
        # Kept as planned, but a crashed run left it half way: journal why it stays and bring
        # its dir back. Not a failure: the plan said keep.
        return replace(refuse(journal, cache, resumes, list(decision.why)), problem=None)
    if cache.id in archive_problems:
        return refuse(journal, cache, resumes, [archive_problems[cache.id]])

    def check(where: Path | None) -> Verdict:
        """Everything again, now, under the lease (lifecycle.teardown.removal)."""
        current = cache_by_id(ledger, cache.id)
        archive = archive_of(ledger, cache.id)
        if current is None or archive is None:
            return Verdict(["not archived"])
        # Who holds it now: a pin, a boot or a running container that came since the plan.
        mounts, docker_problem = current_mounts(services)
        by = mounted_by(current.host_path, mounts)
        problems = holders(pins(ledger).get(cache.id, ()), by, docker_problem, current.in_use_by)
        # Asked again now: archiving first may have archived them, or one may have come since.
        if results := results_not_archived_on(ledger, cache.id, archive.location):
            problems.append(f"result {', '.join(results)} on it not archived at {archive.location}")
        checked = verify(archive)
        problems += [f"archive does not verify: {p}" for p in checked.problems]
        problems += checked.collected  # by a gc's rule since the plan: kept, and said so
        if problems or checked.document is None:
            return Verdict(problems or ["archive does not verify"])
        tree = None if where is None else scan_now(current, where)
        used_by = [u.boot_id for u in cache_uses(ledger, cache_id=cache.id)]
        # As the plan decided (the flag, or the policy), or as an earlier archive did.
        want_content = decision.content or archive.with_content
        gaps = archive_gaps(checked.document, tree, used_by, want_content=want_content)
        if want_content and not request.drop_withheld:
            withheld = withheld_paths(tree, tainted_files(ledger, cache.id))
            gaps += [withheld_reason(withheld)] if withheld else []
        if gaps:
            return Verdict(gaps)
        mark_verified(ledger, cache.id, _stamp(services.now()))
        digest = checked.document.tree_digest
        proof = f"{archive.location.rstrip('/')} {archive.record_key}"
        scanned = tree.fingerprint.tree_digest if tree and tree.fingerprint else None
        return Verdict([], f"{proof} sha256:{archive.record_sha256} tree:{digest}", scanned)

    docker = services.docker
    return remove_cache(
        journal,
        cache,
        resumes=resumes,
        lease=lambda: try_lease(home, cache.id),
        check=check,
        checkpoint=checkpoint,
        empty_as_root=(lambda trash: empty_as_root(docker, trash, cache.image_id))
        if docker is not None
        else None,
    )


def _settle(
    ledger: Ledger, home: Home, journal: Journal, cache: CacheRecord, verify: ArchiveVerifier
) -> CacheOutcome:
    """A cache whose dir vanished behind the ledger's back: record it as gone, never as live.

    Torn down when its archive verifies and lists every boot that used it (nothing was lost),
    else `missing`: its files went without their evidence."""
    with try_lease(home, cache.id) or nullcontext():
        journal.step(cache.id, "intent", f"{cache.host_path} is gone")
        archive = archive_of(ledger, cache.id)
        # Its files are gone already: whether its results' records stand changes nothing here.
        checked = None if archive is None else verify(archive, results=False, collecting=False)
        used_by = {u.boot_id for u in cache_uses(ledger, cache_id=cache.id)}
        record = checked.document if checked is not None and not checked.problems else None
        safe = record is not None and used_by <= record.boot_ids
        detail = f"its dir {cache.host_path} was gone before this run; nothing removed; " + (
            "its archive verifies" if safe else "its files are lost without a verified archive"
        )
        journal.step(cache.id, "done", detail, 0, cache_state="torn-down" if safe else "missing")
    return CacheOutcome(cache.id, removed=False, settled="torn-down" if safe else "missing")


def _archive_first(
    ledger: Ledger,
    home: Home,
    services: Services,
    plan: TeardownPlan,
    request: TeardownRequest,
    progress: Progress | None,
) -> dict[str, str]:
    """Archive the caches the plan archives first; cache id -> why one is still not archived."""
    wanted = [d for d in plan.decisions if d.action is Action.ARCHIVE_THEN_REMOVE]
    problems: dict[str, str] = {}
    for decision in wanted:
        cache_id = decision.cache.id
        # One cache per call: archive_caches stops at the first failure, and one cache that
        # cannot be archived must not keep the others. A server that does not answer is not
        # asked again for each of the rest.
        if unreachable := next((p for p in problems.values() if p.startswith(_GONE)), None):
            problems[cache_id] = unreachable
            continue
        try:
            archive_one(ledger, home, services, request, decision, dry_run=False, progress=progress)
        except S3Unavailable as exc:
            problems[cache_id] = f"{_GONE}: {exc}"
        except (LifecycleError, BotoCoreError, ClientError, OSError) as exc:
            problems[cache_id] = f"not archived: {exc}"
    return problems


_GONE = "not archived, S3 did not answer"


def _clean_docker(
    ledger: Ledger,
    services: Services,
    request: TeardownRequest,
    containers: list[BootContainer],
    images: list[ImageDecision],
    checkpoint: Checkpoint,
) -> tuple[str, ...]:
    """Remove stopped boot containers whose caches are all gone, then (--images) the images no
    remaining cache refers to, each after the stopped containers of its boots that mounted no
    cache; appending what went, each image recorded removed once dockerd confirmed it gone.
    dockerd's errors come back as notes, since the caches are gone and journalled whatever
    happens here."""
    client = services.docker
    if client is None:
        return ()
    from docker.errors import NotFound  # the SDK is loaded: services.docker is its client

    def remove(going: Sequence[BootContainer]) -> None:
        for container in going:
            with suppress(NotFound):  # one already gone is fine
                client.containers.get(container.id).remove()
            containers.append(container)

    try:
        caches = all_caches(ledger)  # nothing here changes a cache's state
        gone = {c.id for c in caches if c.gone}  # torn down, or recorded missing
        listed = client.containers.list(all=True, sparse=True)
        going, with_image = containers_going(ledger, listed, gone, used_pairs(ledger))
        remove(going)
        if request.images:
            # Decided again now: a cache refused at its moment keeps its image; one recorded
            # as gone (its dir vanished) keeps it no more than one removed, as the plan said.
            kept = {c.image_id for c in caches if not c.gone}
            users = [*containers, *with_image]
            deleted: set[str] = set()  # by dockerd, this run
            decided = images_going(ledger, client, listed, kept, request, users)
            stays = _staying(ledger, decided)
            for image in decided:
                remove(with_their_images(with_image, [image]))  # before the image they hold
                going_now = image.removes and image.id not in deleted  # else it went with one
                problem = remove_image(client, image, deleted, stays) if going_now else None
                images.append(replace(image, removes=False, why=problem) if problem else image)
                # One someone else removed since the listing (ALREADY_GONE) is not stamped:
                # removed_at says a teardown or apply removed it (how_gone); unstamped, it is
                # said to be gone by hand, as it was.
                if image.removes and not problem:
                    # Killed here, the image is gone with no record: said so as one removed
                    # by hand (how_gone), never as there.
                    checkpoint("teardown-image-removed")
                    image_removed(ledger, image.id, _stamp(services.now()))
    except sdk_errors() as exc:
        return (f"dockerd: {exc}",)
    return ()


def _staying(ledger: Ledger, decided: Sequence[ImageDecision]) -> set[str]:
    """The images no removal may take with it: those this run keeps, and what each bake and
    MCV image is built on (an engine image another home built is in no plan here) unless it
    goes too."""
    under = {bake.engine_image_id for bake in all_bakes(ledger)}
    under |= {mcv.bake_image_id for mcv in mcv_images(ledger)}
    return ({image.id for image in decided} | under) - {i.id for i in decided if i.removes}


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


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


def summary_text(result: TeardownResult) -> str:
    """'removed 63 caches, 20.1 GiB freed; evidence at s3://…', then what did not go and why."""
    freed = sum(o.bytes_freed for o in result.removed)
    where = f"; evidence at {', '.join(result.evidence)}" if result.evidence else ""
    lines = [f"removed {count_of(len(result.removed), 'cache')}, {human_bytes(freed)} freed{where}"]
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
        count = count_of(len(result.containers_removed), "stopped boot container")
        lines.append(f"removed {count}: {names}")
    lines += image_lines(result.images, done=True)
    lines += [f"note: {note}" for note in result.notes]
    lines.append(f"journal: run {result.run_id}")
    return lines_text(lines)  # a cache's problem, a note: dockerd's, S3's words
