"""Carry out a teardown plan: pre-teardown hooks, archive first, each cache in two journalled
phases (verified again at that moment), then stopped boot containers and engine images."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.transfer import Progress
from lifecycle.errors import LifecycleError
from lifecycle.hooks import Hook, HookRun, hook_session
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of, mark_verified, pins
from lifecycle.ledger.boots import CacheRecord, all_caches, cache_by_id
from lifecycle.ledger.results import results_not_archived_on
from lifecycle.teardown.containers import (
    BootContainer,
    ImageDecision,
    mounted_by,
    remove_container,
    remove_image,
)
from lifecycle.teardown.execute import CacheOutcome, refuse, remove_cache
from lifecycle.teardown.faults import Checkpoint
from lifecycle.teardown.journal import Journal, new_run_id
from lifecycle.teardown.plan import Action, CacheDecision, TeardownPlan
from lifecycle.teardown.survey import (
    Services,
    TeardownRequest,
    archive_one,
    containers_going,
    current_mounts,
    images_going,
)
from lifecycle.teardown.verify import ArchiveVerifier


@dataclass(frozen=True)
class TeardownResult:
    """What one run did."""

    run_id: str
    outcomes: tuple[CacheOutcome, ...]
    containers_removed: tuple[BootContainer, ...]
    images: tuple[ImageDecision, ...]  # removed, or kept and why, decided after the caches went
    evidence: tuple[str, ...]  # archive locations of the removed caches
    notes: tuple[str, ...] = ()  # what dockerd refused while cleaning up
    hook_runs: tuple[HookRun, ...] = ()

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
    services: Services,
    plan: TeardownPlan,
    request: TeardownRequest,
    *,
    hooks: Sequence[Hook] = (),
    checkpoint: Checkpoint = lambda point: None,
    progress: Progress | None = None,
) -> TeardownResult:
    """Carry out `plan` (after the user agreed to it) with the hooks attached to the step."""
    journal = Journal(ledger, new_run_id(services.now()), lambda: _stamp(services.now()))
    context = {
        "run_id": journal.run_id,
        "caches": [d.cache.id for d in plan.removing],
        "archive": plan.archive_to,
    }
    with hook_session(hooks, "teardown", context) as session:
        session.fire("pre-teardown")
        problems = _archive_first(ledger, services, plan, request, progress)
        verify = ArchiveVerifier(services.s3, services.s3_problem)
        outcomes = []
        for decision in plan.decisions:
            outcome = _carry_out(ledger, services, journal, decision, problems, verify, checkpoint)
            if outcome is not None:
                outcomes.append(outcome)
        containers: list[BootContainer] = []
        images: list[ImageDecision] = []
        notes = _clean_docker(ledger, services, request, containers, images)
        removed = {o.cache_id for o in outcomes if o.removed}
        evidence = {a.location for i in removed if (a := archive_of(ledger, i)) is not None}
        result = TeardownResult(
            journal.run_id,
            tuple(outcomes),
            tuple(containers),
            tuple(images),
            tuple(sorted(evidence)),
            notes,
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
    services: Services,
    journal: Journal,
    decision: CacheDecision,
    archive_problems: dict[str, str],
    verify: ArchiveVerifier,
    checkpoint: Checkpoint,
) -> CacheOutcome | None:
    cache, resumes = decision.cache, decision.resumes
    if not decision.removes:
        if resumes is None:
            return None
        # Kept as planned, but a crashed run left it half way: journal why it stays and bring
        # its dir back. Not a failure: the plan said keep.
        return replace(refuse(journal, cache, resumes, list(decision.why)), problem=None)
    archive = archive_of(ledger, cache.id)
    if cache.id in archive_problems or archive is None:
        problem = archive_problems.get(cache.id, "not archived")
        return refuse(journal, cache, resumes, [problem])
    # Asked again now: archiving first may have archived them, or one may have come since.
    if results := results_not_archived_on(ledger, cache.id, archive.location):
        problem = f"result {', '.join(results)} on it not archived at {archive.location}"
        return refuse(journal, cache, resumes, [problem])

    def verify_now() -> list[str]:
        found = verify(archive)
        if not found:
            mark_verified(ledger, cache.id, _stamp(services.now()))
        return found

    return remove_cache(
        journal,
        cache,
        archive,
        resumes=resumes,
        verify=verify_now,
        holders=lambda: _holders(ledger, services, cache),
        checkpoint=checkpoint,
    )


def _holders(ledger: Ledger, services: Services, cache: CacheRecord) -> list[str]:
    """Who holds the cache now: a pin, a boot or a running container that came since the plan."""
    current = cache_by_id(ledger, cache.id)
    held = [f"in use by boot {current.in_use_by}"] if current and current.in_use_by else []
    if reasons := pins(ledger).get(cache.id):
        held.append("pinned: " + "; ".join(reasons))
    mounts, problem = current_mounts(services)
    if problem:
        held.append(f"cannot ask dockerd which containers mount it: {problem}")
    if by := mounted_by(cache.host_path, mounts):
        held.append("mounted by running container " + ", ".join(by))
    return held


def _archive_first(
    ledger: Ledger,
    services: Services,
    plan: TeardownPlan,
    request: TeardownRequest,
    progress: Progress | None,
) -> dict[str, str]:
    """Archive the caches the plan archives first; cache id -> why one is still not archived."""
    wanted = [d.cache.id for d in plan.decisions if d.action is Action.ARCHIVE_THEN_REMOVE]
    problems = {}
    for cache_id in wanted:
        # One cache per call: archive_caches stops at the first failure, and one cache that
        # cannot be archived must not keep the others.
        try:
            archive_one(ledger, services, request, cache_id, dry_run=False, progress=progress)
        except (LifecycleError, BotoCoreError, ClientError, OSError) as exc:
            problems[cache_id] = f"not archived: {exc}"
    return problems


def _clean_docker(
    ledger: Ledger,
    services: Services,
    request: TeardownRequest,
    containers: list[BootContainer],
    images: list[ImageDecision],
) -> tuple[str, ...]:
    """Remove stopped boot containers whose caches are all gone, then (--images) the images no
    remaining cache refers to, appending what went; dockerd's errors come back as notes, since
    the caches are gone and journalled whatever happens here."""
    if services.docker is None:
        return ()
    try:
        gone = {c.id for c in all_caches(ledger) if c.state == "torn-down"}
        for container in containers_going(ledger, services.docker, gone):
            remove_container(services.docker, container)
            containers.append(container)
        if request.images:
            # Decided again now: a cache refused at its moment keeps its image.
            kept = {c.image_id for c in all_caches(ledger) if c.state != "torn-down"}
            for image in images_going(ledger, services.docker, kept, request, containers):
                problem = remove_image(services.docker, image) if image.removes else None
                images.append(replace(image, removes=False, why=problem) if problem else image)
    except Exception as exc:  # the SDK raises several unrelated types
        return (f"dockerd: {exc}",)
    return ()


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")
