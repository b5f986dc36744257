"""Survey the host for a teardown: gather the facts (ledger, dockerd, S3) and decide the plan.

Only reads: `--dry-run` stops after this. Each archive is verified where it was written, so the
plan tells the truth about what would go (the run verifies again as each cache goes); a location
that does not answer is asked once, not once per cache, and each cache archived there stays.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import server_failing
from lifecycle.archive.record import (
    GcRecords,
    Intents,
    Removal,
    active_until,
    being_collected,
    racing,
)
from lifecycle.archive.run import ArchiveReport, archive_caches
from lifecycle.archive.store import BlobStore, S3Unavailable
from lifecycle.archive.transfer import Progress
from lifecycle.archive.verify import VerifiedRecord, fetch_verified
from lifecycle.dockerd import sdk_errors
from lifecycle.errors import LifecycleError, did_you_mean
from lifecycle.home import Home
from lifecycle.leases import lease_held
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import ArchiveRecord, BootArchiveRow, archive_of, boot_archive
from lifecycle.ledger.boots import (
    CacheRecord,
    all_caches,
    boot_ids,
    cache_uses,
    tainted_files,
    used_pairs,
)
from lifecycle.ledger.builds import (
    IMAGE_MADE,
    UP_TO_DATE,
    all_bakes,
    all_builds,
    mcv_images,
    pulled_images,
)
from lifecycle.ledger.removal import pins
from lifecycle.ledger.results import (
    ResultArchiveRecord,
    result_archives_on,
    results_not_archived_on,
)
from lifecycle.results.archive import record_problem, with_results
from lifecycle.table import human_bytes
from lifecycle.teardown.containers import (
    BootContainer,
    ImageDecision,
    mounted_by,
    plan_images,
    running_mounts,
    stopped_boot_containers,
)
from lifecycle.teardown.plan import (
    Action,
    CacheDecision,
    Facts,
    Rules,
    Selection,
    TeardownPlan,
    decide,
)
from lifecycle.teardown.removal import scan_where_it_is, trash_path, unfinished_runs


@dataclass(frozen=True)
class TeardownRequest:
    """What the user asked for."""

    selection: Rules = field(default_factory=Selection)
    archive_first: bool = False
    with_content: bool = False
    images: bool = False
    archive_to: ArchiveLocation | None = None  # where --archive writes
    drop_withheld: bool = False  # remove caches holding files no archive may hold (secrets)
    image_keeps: Mapping[str, str] = field(default_factory=dict)  # image id -> why (a policy)


@dataclass(frozen=True)
class Services:
    """The side effects teardown talks to; None where one is not reachable, with the reason."""

    docker: Any | None
    s3: Any | None
    host_env: Mapping[str, str]  # whose secrets an archive first masks and looks for
    docker_problem: str | None = None
    s3_problem: str | None = None
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


def make_plan(
    ledger: Ledger,
    home: Home,
    services: Services,
    request: TeardownRequest,
    *,
    preview: bool = False,
    every: Sequence[CacheRecord] | None = None,
) -> TeardownPlan:
    """Decide every cache's fate; reads the ledger, dockerd and S3, changes nothing.

    With `preview` (a dry run), what --archive would upload is worked out too, read-only.
    `every`: the ledger's caches, when the caller read them already (status).
    """
    every = all_caches(ledger) if every is None else every
    notes = _named(request.selection.cache_ids, every)
    caches = [c for c in every if not c.gone]
    listed, docker_problem = listed_containers(services, every=True)  # one request serves all
    mounts = running_mounts(listed)
    archives = {c.id: a for c in caches if (a := archive_of(ledger, c.id)) is not None}
    unfinished = unfinished_runs(ledger, caches)
    pairs = used_pairs(ledger)  # (boot, cache): read once for the caches and the containers
    used_by: dict[str, list[str]] = {}
    for boot_id, cache_id in pairs:
        used_by.setdefault(cache_id, []).append(boot_id)
    verify = ArchiveVerifier(
        services.s3, services.s3_problem, archived_boots(ledger), archived_results(ledger)
    )
    to = request.archive_to
    facts = Facts(
        now=services.now(),
        pins=pins(ledger),
        archives=archives,
        unfinished=unfinished,
        mounted_by={c.id: mounted_by(c.host_path, mounts) for c in caches},
        docker_problem=docker_problem,
        results_not_archived={
            cache_id: waiting
            for cache_id, a in archives.items()
            if (waiting := results_not_archived_on(ledger, cache_id, a.location))
        },
        used_by=used_by,
        gone=frozenset(c.id for c in caches if c.id not in unfinished and is_gone(c)),
        # Boots the ledger says hold a cache whose lease nobody holds: their process died.
        dead_boots=frozenset(
            c.in_use_by for c in caches if c.in_use_by and not lease_held(home, c.id)
        ),
        archive_to_problem=verify.problem_with(to) if request.archive_first and to else None,
        tainted={c.id: tainted_files(ledger, c.id) for c in caches},
    )
    decisions = tuple(
        decide(
            c,
            request.selection,
            facts,
            archive_first=request.archive_first,
            want_content=request.with_content,
            verify=verify,
            rescan=lambda cache: scan_where_it_is(cache, unfinished.get(cache.id)),
            drop_withheld=request.drop_withheld,
        )
        for c in caches
    )
    # A cache recorded as gone (its dir vanished) is gone as a removed one is: nothing boots
    # from it, so it holds neither its boots' containers nor its image.
    gone = {c.id for c in every if c.gone}
    gone |= {d.cache.id for d in decisions if d.action is not Action.KEEP}
    docker = None if docker_problem else services.docker
    containers, with_image = containers_going(ledger, listed, gone, pairs)
    images: tuple[ImageDecision, ...] = ()
    if request.images and docker is not None:
        kept = {d.cache.image_id for d in decisions if d.action is Action.KEEP}
        users = containers + with_image
        images = tuple(images_going(ledger, docker, listed, kept, request, users))
        containers += with_their_images(with_image, images)
    elif request.images:
        notes += (f"images not considered: {docker_problem}",)
    if preview:
        going = [d for d in decisions if d.action is Action.ARCHIVE_THEN_REMOVE]
        notes += tuple(_preview(ledger, home, services, request, d) for d in going)
    unreachable = tuple(filter(None, [docker_problem, services.s3_problem]))
    unreachable += tuple(f"{url}: {why}" for url, why in sorted(verify.unreachable.items()))
    where = to.url() if to else None
    return TeardownPlan(decisions, containers, images, notes, where, unreachable)


def archive_one(
    ledger: Ledger,
    home: Home,
    services: Services,
    request: TeardownRequest,
    decision: CacheDecision,
    *,
    dry_run: bool,
    progress: Progress | None,
) -> ArchiveReport:
    """Archive one cache where --archive writes, with its files when its decision says so
    (a dry run only reads, and reports)."""
    if request.archive_to is None or services.s3 is None:
        raise LifecycleError(f"cannot archive: {services.s3_problem or 'no archive location'}")
    archived = archive_caches(
        ledger,
        home,
        services.s3,
        request.archive_to,
        [decision.cache.id],
        host_env=services.host_env,
        with_content=decision.content,
        dry_run=dry_run,
        progress=progress,
    )
    (report,) = with_results(
        ledger, services.s3, request.archive_to, archived, progress, services.host_env
    )
    return report


def _preview(
    ledger: Ledger, home: Home, services: Services, request: TeardownRequest, d: CacheDecision
) -> str:
    try:
        report = archive_one(ledger, home, services, request, d, dry_run=True, progress=None)
    except (LifecycleError, BotoCoreError, ClientError, OSError) as exc:
        return f"would archive {d.cache.id}, but: {exc}"
    return (
        f"would archive {d.cache.id} to {report.location}: {report.blobs} blobs"
        f" ({human_bytes(report.bytes_total)}), {report.blobs_present} already there,"
        f" {report.blobs_uploaded} not yet ({human_bytes(report.bytes_uploaded)})"
    )


def is_gone(cache: CacheRecord) -> bool:
    """Whether the cache's dir is not there, and not in a teardown's trash either."""
    return not os.path.lexists(cache.host_path) and not trash_path(cache).exists()


def listed_containers(services: Services, *, every: bool) -> tuple[list[Any], str | None]:
    """dockerd's containers in one request (`every`: the stopped ones too; else the running),
    or why dockerd could not be asked."""
    if services.docker is None:
        return [], services.docker_problem or "no docker client"
    try:
        return services.docker.containers.list(all=every, sparse=True), None
    except sdk_errors() as exc:  # not there, or refusing: nothing it guards can go
        return [], str(exc)


def current_mounts(services: Services) -> tuple[dict[str, list[str]], str | None]:
    """Running containers' mounts by host path, now, or why dockerd could not be asked."""
    listed, problem = listed_containers(services, every=False)
    return running_mounts(listed), problem


Containers = tuple[BootContainer, ...]


def containers_going(
    ledger: Ledger, listed: Iterable[Any], gone: set[str], pairs: Iterable[tuple[str, str]]
) -> tuple[Containers, Containers]:
    """Stopped containers of this ledger's boots whose every cache is (to be) torn down; and
    those of its boots that mounted no cache (a bake's, or a profile's with every cache off):
    each goes with its image, if that goes (else it would hold the image for ever)."""
    mounted: dict[str, set[str]] = {}  # boot id -> the caches it mounted
    for boot_id, cache_id in pairs:  # (boot, cache) of every use: used_pairs
        mounted.setdefault(boot_id, set()).add(cache_id)
    ours = set(boot_ids(ledger))
    going, with_image = [], []
    for container in stopped_boot_containers(listed):  # other homes' boots too: not ours
        caches = mounted.get(container.boot_id)
        if caches and caches <= gone:
            going.append(container)
        elif not caches and container.boot_id in ours:
            with_image.append(container)
    return tuple(going), tuple(with_image)


def with_their_images(containers: Containers, images: Sequence[ImageDecision]) -> Containers:
    """Those of the containers whose image goes."""
    going = {image.id for image in images if image.removes}
    return tuple(container for container in containers if container.image_id in going)


def images_going(
    ledger: Ledger,
    docker: Any,
    listed: Iterable[Any],
    kept: set[str],
    request: TeardownRequest,
    containers: Sequence[BootContainer],
) -> list[ImageDecision]:
    """With --images: engine images, bakes and their MCV images (of --manifest, if given) and
    whether each goes."""
    baked_from = {bake.image_id: bake.engine_image_id for bake in all_bakes(ledger)}
    mcv_of = {mcv.image_id: mcv.bake_image_id for mcv in mcv_images(ledger)}
    built, found = _built_and_found(ledger)
    pulled = pulled_images(ledger)
    # A bake `boot --baked --pull` pulled is recorded as a bake, yet another home baked it.
    baked = baked_from.keys() - pulled.keys()
    return plan_images(
        docker,
        listed,
        built_here=built | baked | mcv_of.keys(),
        kept_image_ids=kept,
        manifest=request.selection.manifest,
        removed_containers={c.id for c in containers},
        keeps=request.image_keeps,
        baked_from=baked_from,
        mcv_of=mcv_of,
        pulled=pulled,
        found=found,
    )


def _built_and_found(ledger: Ledger) -> tuple[set[str], set[str]]:
    """The engine images this home built (dockerd built them for its `build`: `built`, or
    `interrupted` with the image its build's tag and labels name), and those it only found on
    dockerd (`up-to-date` alone: another home on the same dockerd built them)."""
    built: set[str] = set()
    recorded: set[str] = set()
    for build in all_builds(ledger):
        if build.image_id and build.outcome in IMAGE_MADE:
            recorded.add(build.image_id)
            if build.outcome != UP_TO_DATE:
                built.add(build.image_id)
    return built, recorded - built


def _named(cache_ids: Sequence[str], caches: Sequence[CacheRecord]) -> tuple[str, ...]:
    """Unknown cache ids are an error; ones already torn down are only noted."""
    known = {c.id: c for c in caches}
    problems = []
    for name in cache_ids:
        if name not in known:
            problems.append(f"unknown cache {name!r}{did_you_mean(name, known)}")
    if problems:
        raise LifecycleError("\n".join(problems))
    return tuple(f"{i}: already torn down" for i in cache_ids if known[i].state == "torn-down")


# HeadBucket answers that mean "the server is there, these credentials may not list": the
# objects themselves are still checked one by one.
_ANSWERED = {"403", "AccessDenied"}


class ArchiveVerifier:
    """`verifier(archive)` -> the record now, with one problem per object that does not verify:
    the cache's record and its blobs, its boots' records (`boots_for`), and the record of each
    result standing on it (`results_for`: one read each, not their blobs)."""

    def __init__(
        self,
        client: Any | None,
        client_problem: str | None = None,
        boots_for: Callable[[ArchiveRecord], Sequence[BootArchiveRow]] = lambda archive: (),
        results_for: Callable[[ArchiveRecord], Sequence[ResultArchiveRecord]] = lambda a: (),
    ) -> None:
        self._client = client
        self._client_problem = client_problem or "no S3 client"
        self._boots_for = boots_for
        self._results_for = results_for
        self._reachable: dict[str, str | None] = {}  # location url -> why not, or None
        self.unreachable: dict[str, str] = {}  # location url -> why its server is out of reach
        self._intents: Intents = {}  # gc intents read (lifecycle.archive.record)
        self._gc = GcRecords()  # gc's records of what it removed, read once per location

    def __call__(
        self, archive: ArchiveRecord, *, results: bool = True, collecting: bool = True
    ) -> VerifiedRecord:
        """With `collecting`, a cache about to be removed: what a gc may still remove of its
        archive is a problem too (not for one whose files are gone already)."""
        location = ArchiveLocation.parse(archive.location)
        url = location.url()
        if self._client is None:
            return _unverified(f"cannot reach S3 to verify {url}: {self._client_problem}")
        unreachable = self.problem_with(location)
        if unreachable:
            return _unverified(unreachable)
        try:
            store = BlobStore(self._client, location)
            checked = fetch_verified(store, archive, self._boots_for(archive), gc=self._gc)
            rows = self._results_for(archive) if results else ()
            lost, collected = list(checked.problems), list(checked.collected)
            for row in rows:
                found = record_problem(store, row, self._gc)
                if isinstance(found, Removal):  # by a gc's rule: said so, never "missing"
                    where = store.url(row.record_key)
                    collected.append(f"result {row.result_id}: {where}: {found.describe()}")
                elif found is not None:
                    lost.append(f"result {row.result_id}: {found}")
            problems = tuple(lost)
            if collecting and checked.document is not None and not problems and not collected:
                relied = checked.relied | {store.relative(r.record_key) for r in rows}
                problems = _being_collected(store, relied, self._intents)
            return replace(checked, problems=problems, collected=tuple(collected))
        except S3Unavailable as exc:  # the server went away since the probe: ask it no more
            self._reachable[url] = self.unreachable[url] = str(exc)
            return _unverified(str(exc))
        except LifecycleError as exc:  # the store's other one-line errors
            return _unverified(str(exc))
        except (BotoCoreError, ClientError) as exc:
            return _unverified(f"cannot verify s3://{location.bucket}/{archive.record_key}: {exc}")

    def problem_with(self, location: ArchiveLocation) -> str | None:
        """Why the location cannot be used now (asked once per run), or None."""
        if self._client is None:
            return f"cannot reach S3: {self._client_problem}"
        if location.url() not in self._reachable:
            self._reachable[location.url()] = self._probe(location)
        return self._reachable[location.url()]

    def _probe(self, location: ArchiveLocation) -> str | None:
        assert self._client is not None
        try:
            self._client.head_bucket(Bucket=location.bucket)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _ANSWERED:
                return None
            if not server_failing(exc):
                return f"S3 bucket of {location.url()} not usable: {exc}"
            return self._unreachable(location, exc)
        except BotoCoreError as exc:
            return self._unreachable(location, exc)
        return None

    def _unreachable(self, location: ArchiveLocation, exc: Exception) -> str:
        why = BlobStore(self._client, location).error(exc, "")
        self.unreachable[location.url()] = str(why)
        return f"cannot reach S3 for {location.url()}: {why}"


def _being_collected(store: BlobStore, relied: Iterable[str], read: Intents) -> tuple[str, ...]:
    """A problem when a gc sweep may still remove an object the archive relies on: a recent
    intent lists it, or one cannot be read (it may list it), and the object is older than that
    intent (one sent again since is not the one it planned), or it went meanwhile. Read after
    the archive's own records were written, so a sweep whose intent is not here yet looks at
    the archive after them, and spares what they name."""
    collecting = being_collected(store, read)
    found = racing(store, relied, collecting)
    if found is None:
        return ()
    return (f"{found.said(store)}: kept; teardown again after {active_until(found.intent)}",)


def _unverified(problem: str) -> VerifiedRecord:
    return VerifiedRecord((problem,), None, answered=False)


def archived_results(ledger: Ledger) -> Callable[[ArchiveRecord], list[ResultArchiveRecord]]:
    """For a cache's archive: where this host wrote, at the same location, the record of each
    result standing on the cache."""
    return lambda archive: result_archives_on(ledger, archive.cache_id, archive.location)


def archived_boots(ledger: Ledger) -> Callable[[ArchiveRecord], list[BootArchiveRow]]:
    """For a cache's archive: the records, at the same location, of the boots that used it."""

    def boots_for(archive: ArchiveRecord) -> list[BootArchiveRow]:
        uses = cache_uses(ledger, cache_id=archive.cache_id)
        rows = [boot_archive(ledger, u.boot_id, archive.location) for u in uses]
        return [row for row in rows if row is not None]

    return boots_for
