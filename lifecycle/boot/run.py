"""One boot, start to finish: intent recorded, hooks, container, scans, evidence, outcome.

The order is what makes a crash safe: the intent (boot row, new caches, which caches it
holds) is one transaction before the container starts; the outcome, the caches' new tree
digests and their release are one transaction after it stops. Caches are scanned only
after the container has exited, never while the engine may be writing a `.so`.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle.boot.baked import BakedCache, baked_writes, plan_baked
from lifecycle.boot.caches import CachePlan, plan_caches
from lifecycle.boot.engine import (
    BOOT_LABEL,
    BootFailed,
    keep_provenance,
    remove_container,
    run_container,
    stop_orphans,
)
from lifecycle.boot.judge import judge
from lifecycle.boot.log import boot_log
from lifecycle.boot.observe import AccessWatch, CacheAccess, NotObserved
from lifecycle.boot.owner import give_back
from lifecycle.boot.spec import (
    BAKED,
    CacheMount,
    ContainerSpec,
    build_spec,
    check_secrets,
    pick_profile,
)
from lifecycle.boot.untracked import read_untracked
from lifecycle.crash import handed_secrets
from lifecycle.dockerd import dockerd_said
from lifecycle.errors import DiskFull, LifecycleError, not_yours
from lifecycle.evidence import collect_evidence
from lifecycle.faults import Checkpoint
from lifecycle.fingerprint import Fingerprint, scan
from lifecycle.home import Home
from lifecycle.hooks import Hook, HookFailed, HookSession, engine_env, hook_session, instrumented
from lifecycle.kept_log import KeptLog
from lifecycle.leases import while_alive
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    SCAN_FAILED,
    BakedUse,
    BootRecord,
    CacheRecord,
    CacheUse,
    HookRunRecord,
    TaintedFile,
    UntrackedWrite,
    finish_boot,
    start_boot,
)
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.checks import BOOT_ENV
from lifecycle.redact import redact, redact_values
from lifecycle.withheld import refuse_secrets_in_manifest, secrets_in_cache, secrets_on_host

SPEC_JSON = "spec.json"  # in the boot's evidence dir: the container spec as `describe` shows it


@dataclass(frozen=True)
class BootRequest:
    """What the user asked for, resolved: manifest, built image, profile, hooks."""

    loaded: LoadedManifest
    digest: str
    image: dict[str, Any]  # {"id", "tags", "labels"} as dockerd reported them
    image_tag: str
    profile: str | None
    cold: bool
    hooks: Sequence[Hook]
    arch: str
    home: Home  # where its caches, leases and evidence are
    timeout_s: float | None = None
    extra_args: tuple[str, ...] = ()  # after the profile's and the tuned values' (a night's cell)
    baked: tuple[BakedCache, ...] = ()  # the image is a bake: its caches are in its layers


@dataclass
class _Progress:
    """What is known so far; whatever happens, `_finish` records it."""

    log: KeptLog  # redacted as it comes, bounded whatever the engine prints
    session: HookSession | None = None  # its runs, on-exit included, are recorded
    container_id: str | None = None
    exit_code: int | None = None
    error: str | None = None
    interrupted: bool = False
    aborted: bool = False  # a pre-boot hook said no
    timed_out: bool = False  # stopped by us at the boot's --timeout
    untracked: list[UntrackedWrite] = field(default_factory=list)  # JIT output outside caches
    access: dict[str, CacheAccess] | None = None  # what the engine opened and wrote, per cache
    # baked cache name -> files written under its path; None: the container's layer unread
    baked_written: dict[str, frozenset[str]] | None = field(default_factory=dict)
    not_observed: str | None = None  # why `access` is None
    not_given_back: str | None = None  # why the caches the engine wrote stay its user's

    def outcome(self) -> str:
        if self.interrupted:
            return "interrupted"
        if self.aborted:
            return "aborted"
        if self.timed_out:
            return "timeout"
        return "ok" if self.exit_code == 0 and not self.error else "failed"


def dry_run_spec(
    request: BootRequest, host_env: Mapping[str, str], *, baked: bool = False
) -> ContainerSpec:
    """The spec a boot would send, with placeholder host dirs (`baked`: no dir, each cache in
    a layer of the newest bake, which is looked up at boot); nothing is made or recorded."""
    manifest = request.loaded.manifest
    profile = pick_profile(manifest, request.profile)
    mode = "cold" if request.cold else "warm if a live cache matches, else cold"
    image = request.image_tag
    if baked:
        image = f"(the newest bake of {manifest.name} {request.digest[:12]}, profile {profile})"
    mounts = [
        CacheMount(
            "(chosen at boot)", name, f"$LIFECYCLE_HOME/caches/{name}-…", c.path, c.env, mode
        )
        if not baked
        else CacheMount("(the bake's)", name, "(a layer of the image)", c.path, c.env, BAKED)
        for name, c in manifest.active_caches().items()
    ]
    return _spec(request, profile, image, mounts, host_env, "(dry run)")


@dataclass(frozen=True)
class Watch:
    """Who is told what while a boot runs: each line of the engine's output (redacted), and the
    test-only checkpoints (lifecycle.faults)."""

    on_line: Callable[[str], None] = lambda line: None
    checkpoint: Checkpoint = lambda point: None


def boot(
    client: Any, ledger: Ledger, request: BootRequest, host_env: Mapping[str, str], watch: Watch
) -> BootRecord:
    """Run the engine once with its caches; returns the finished boot record."""
    home = request.home
    on_line, checkpoint = watch.on_line, watch.checkpoint
    manifest = request.loaded.manifest
    profile = pick_profile(manifest, request.profile)
    check_secrets(manifest, profile, host_env)  # before any cache dir is made
    # What the caches are scanned with, and the boot's output redacted of: every value this
    # host knows, not only the profile's. A cache is any profile's (its key holds none), and
    # a boot given no secret may move, copy or rewrite a file another boot wrote one into.
    own = {name: host_env[name] for name in manifest.profiles[profile].secrets}
    handed_secrets(own)  # masked in any line this process prints, whatever their names
    secrets_by_name = {**secrets_on_host(ledger, host_env), **own}
    refuse_secrets_in_manifest(request.loaded, secrets_by_name)
    now = datetime.now(UTC)
    boot_id = f"b-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    for line in stop_orphans(client, ledger, home, _stamp(now)):
        on_line(line)  # before the caches are picked: a dead boot's are warm again
    if request.baked:
        attrs = client.images.get(request.image["id"]).attrs
        plan = plan_baked(attrs, manifest, list(request.baked))
    else:
        plan = plan_caches(
            ledger,
            home,
            manifest,
            request.digest,
            request.image["id"],
            labels=request.image["labels"],
            arch=request.arch,
            boot_id=boot_id,
            cold=request.cold,
            now=_stamp(now),
            secret_values=secrets_by_name,
        )
    # Held from before the intent is recorded until the outcome is: a `running` boot whose
    # lock nobody holds died (dead_boots), caches or none (a baked boot holds none).
    with while_alive(home.boot_lock(boot_id)):
        try:
            checkpoint("boot-caches-picked")
            spec = _spec(request, profile, request.image["id"], plan.mounts, host_env, boot_id)
            record = _intent(request, profile, boot_id, now, spec)
            keep_provenance(ledger, home, request.loaded, request.digest, request.image)
            start_boot(ledger, record, plan.new_caches, plan.uses)
        except BaseException:
            plan.release()
            raise
        try:
            checkpoint("boot-recorded")
            record = _run(client, ledger, home, request, record, plan, spec, secrets_by_name, watch)
        finally:
            plan.release()  # only once the end-of-boot scan is recorded (or failed to be)
    return record


def _spec(
    request: BootRequest,
    profile: str,
    image: str,
    mounts: list[CacheMount],
    host_env: Mapping[str, str],
    boot_id: str,
) -> ContainerSpec:
    """The profile's spec with the boot's labels, its provenance (BOOT_ENV: the provenance
    plugin of the production patches logs it, so a result can be matched to its build from
    the log), a cell's arguments and the hooks' engine environment."""
    labels = {
        BOOT_LABEL: boot_id,
        "lifecycle.manifest.digest": request.digest,
        "lifecycle.manifest.name": request.loaded.manifest.name,
    }
    boot_env = dict(zip(BOOT_ENV, (boot_id, request.digest, request.image_tag), strict=True))
    manifest = request.loaded.manifest
    return build_spec(
        manifest,
        profile,
        image,
        mounts,
        host_env,
        labels,
        boot_env,
        extra_args=request.extra_args,
        engine_env=engine_env(request.hooks),
    )


def _intent(
    request: BootRequest, profile: str, boot_id: str, now: datetime, spec: ContainerSpec
) -> BootRecord:
    """The boot row recorded before the container starts."""
    manifest = request.loaded.manifest
    return BootRecord(
        id=boot_id,
        started_at=_stamp(now),
        ended_at=None,
        exit_code=None,
        outcome="running",
        error=None,
        host=socket.gethostname(),
        profile=profile,
        manifest_name=manifest.name,
        manifest_digest=request.digest,
        image_id=request.image["id"],
        image_tag=request.image_tag,
        container_id=None,
        hooks=json.dumps([{"name": h.name, "observing": h.observing} for h in request.hooks]),
        instrumented=instrumented(request.hooks),
        secret_names=json.dumps(list(spec.secret_names)),
        log_path=None,
        evidence_path=None,
    )


def _run(
    client: Any,
    ledger: Ledger,
    home: Home,
    request: BootRequest,
    record: BootRecord,
    plan: CachePlan,
    spec: ContainerSpec,
    secrets_by_name: Mapping[str, str],
    watch: Watch,
) -> BootRecord:
    """Hooks and the container; whatever happens, `_finish` records how it ended (its scans
    mask and look for `secrets_by_name`, and what it keeps is redacted of them)."""
    evidence_dir = home.boot_bundle(record.id)
    # The spec as recorded (secrets named, never valued): `why` compares two boots' env.
    spec_json = json.dumps(spec.describe(), indent=1, sort_keys=True).encode()
    context = {
        "boot_id": record.id,
        "manifest": record.manifest_name,
        "profile": record.profile,
        "image": request.image_tag,
        "evidence_dir": str(evidence_dir / "hooks"),
        "caches": {m.name: {"id": m.cache_id, "mode": m.mode} for m in plan.mounts},
    }
    progress = _Progress(boot_log(secrets_by_name, [m.container_path for m in plan.mounts]))
    container = None
    try:
        # In the try: a full disk here is the boot's failure, its outcome recorded as any.
        ledger.keep_evidence(f"boots/{record.id}", SPEC_JSON, spec_json)
        with hook_session(request.hooks, "boot", context) as session:
            progress.session = session
            session.fire("pre-boot", {})
            container = _create(client, spec)
            progress.container_id = container.id
            files_watch = _watch(plan, progress)
            try:
                progress.exit_code, progress.timed_out = run_container(
                    container,
                    request.timeout_s,
                    # What is shown is what is kept, redacted: the engine may print a secret.
                    progress.log.add,
                    lambda line: watch.on_line(progress.log.last),
                )
            finally:
                if files_watch is not None:
                    progress.access = files_watch.stop()
                if progress.exit_code is not None:
                    # Before the post-boot hooks and the scans: what the engine wrote as
                    # another user, lifecycle's user may not read (lifecycle.boot.owner).
                    roots = [Path(m.host_path) for m in plan.mounts if m.mode != BAKED]
                    owner = (os.getuid(), os.getgid())
                    image = request.image["id"]
                    progress.not_given_back = give_back(client, image, roots, owner)
            if progress.timed_out:
                progress.error = (
                    f"timed out: stopped after the --timeout of {request.timeout_s:g} s"
                )
            after = {"container_id": container.id, "exit_code": progress.exit_code}
            session.fire("post-boot", after)
    except (KeyboardInterrupt, SystemExit) as exc:
        progress.interrupted, progress.error = True, type(exc).__name__
        raise
    except BaseException as exc:
        progress.error = str(exc) or type(exc).__name__
        progress.aborted = isinstance(exc, HookFailed) and progress.container_id is None
        if isinstance(exc, BootFailed):
            exc.boot_id = record.id  # recorded failed below: a night judges that boot
        raise
    finally:
        if container is not None and progress.exit_code is not None:
            # Read before the container goes: its changes are lost with it.
            progress.untracked, problem = read_untracked(client, container, record.id, plan.mounts)
            progress.error = _join(progress.error, problem)
            progress.baked_written = baked_writes(container.attrs, plan.mounts)
        if container is not None and spec.secret_names:
            # The container's config (docker inspect) and its log keep the values in clear.
            progress.error = _join(progress.error, remove_container(container))
        watch.checkpoint("boot-engine-ended")
        record = _finish(ledger, record, plan, progress, evidence_dir, secrets_by_name)
    return record


def _watch(plan: CachePlan, progress: _Progress) -> AccessWatch | None:
    """Start watching the caches' files; where the kernel will not, say why and go on."""
    try:
        watch = AccessWatch({m.name: Path(m.host_path) for m in plan.mounts})
        watch.start()
    except (NotObserved, OSError) as exc:
        progress.not_observed = str(exc)
        return None
    return watch


def _masked(
    access: dict[str, CacheAccess] | None, secrets_by_name: Mapping[str, str]
) -> dict[str, CacheAccess] | None:
    """The paths the engine touched, spelled as the scans spell them: a path holding a
    secret's value masked (lifecycle.redact), so the two compare, and neither is kept."""
    if access is None or not secrets_by_name:
        return access
    return {
        name: CacheAccess(
            {redact_values(p, secrets_by_name) for p in seen.opened},
            {redact_values(p, secrets_by_name) for p in seen.written},
            seen.complete,
        )
        for name, seen in access.items()
    }


def _create(client: Any, spec: ContainerSpec) -> Any:
    """Create the boot's container; dockerd's refusal is one line, not a traceback."""
    from docker.errors import APIError

    try:
        return client.containers.create(**spec.docker_kwargs())
    except APIError as exc:
        raise BootFailed(f"dockerd refused to create the container: {dockerd_said(exc)}") from None


def _unread(exc: LifecycleError | OSError) -> str:
    """Why a cache could not be scanned, a file lifecycle may not read named with the way out
    (the check for secrets reads files with open(), not the scan's own reader)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: cannot read: {exc.strerror}{not_yours(exc.filename, exc)}"
    return str(exc)


def _join(first: str | None, second: str | None) -> str | None:
    return "; ".join(filter(None, (first, second))) or None


def _finish(
    ledger: Ledger,
    record: BootRecord,
    plan: CachePlan,
    progress: _Progress,
    evidence_dir: Path,
    secrets_by_name: Mapping[str, str],
) -> BootRecord:
    """Keep the log, scan every cache, collect evidence, record the outcome: one transaction.

    Runs in a `finally`: what fails here is added to the boot's error, never raised over the
    error that brought us here, so the boot row always reaches a final state.
    """
    log_text = progress.log.text()  # redacted line by line as it came
    problems = [progress.error] if progress.error else []
    # Lifecycle's own scan failing is no fault of the engine's: the boot ends as its engine
    # did, the cache is not judged, and no boot mounts it warm (ledger.boots.warm_candidates).
    unscanned: list[str] = []
    log_path: Path | None = None
    try:
        log_path = ledger.keep_evidence("boots", f"{record.id}.log", log_text.encode())
    except (LifecycleError, OSError) as exc:  # a full disk: the outcome is recorded without it
        problems.append(f"log not kept: {exc}")
    uses, scanned, tainted, scans = [], [], [], {}
    mounted = [m for m in plan.mounts if m.mode != BAKED]
    for mount, use in zip(mounted, plan.uses, strict=True):
        try:
            use, cache, after, written = _scan_cache(
                ledger,
                record.id,
                plan.records[mount.name],
                use,
                mount,
                plan.before.get(mount.name),
                secrets_by_name,
            )
            found = secrets_in_cache(Path(cache.host_path), after, written, secrets_by_name)
            tainted += [
                TaintedFile(cache.id, path, sha, name, record.id) for path, sha, name in found
            ]
        except (LifecycleError, OSError) as exc:
            unscanned.append(SCAN_FAILED.format(mount.cache_id) + _unread(exc))
            if progress.not_given_back:  # said once, with the first scan it explains
                unscanned.append(
                    f"the caches the engine wrote stay its user's: {progress.not_given_back}"
                )
                progress.not_given_back = None
            continue
        uses.append(use)
        scanned.append(cache)
        scans[mount.name] = (after, written)
    baked = [m for m in plan.mounts if m.mode == BAKED]
    if baked and progress.baked_written is None:
        problems.append("writes into the baked caches not read: the container's layer is unread")
    for mount in baked:  # judged as a warm cache: its layer's tree, and what the engine wrote
        written = (progress.baked_written or {}).get(mount.name, frozenset())
        scans[mount.name] = (plan.before[mount.name], written)
        uses.append(CacheUse(record.id, mount.cache_id, "warm"))
    # A path can hold a secret's value as well as a file can (a JIT named by a token).
    untracked = [replace(w, path=redact(w.path, secrets_by_name)) for w in progress.untracked]
    access = _masked(progress.access, secrets_by_name)
    uses, per_cache, judged = judge(
        plan.mounts, uses, scans, log_text.splitlines(), untracked, access
    )
    if progress.not_observed:
        judged["not_observed"] = progress.not_observed
    if (cut := progress.log.cut()) is not None:
        judged["log_cut"] = cut.as_json()
    caches = {m.name: Path(m.host_path) for m in plan.mounts}
    try:
        collect_evidence(
            caches,
            log_text,
            evidence_dir / "bundle",
            secret_values=secrets_by_name,
            judged=per_cache,
            boot=judged,
        )
    except (OSError, ValueError) as exc:
        problems.append(f"evidence bundle not written: {exc}")
    # A boot whose log, evidence or writes outside the caches were not kept has no trustworthy
    # record: not "ok". Its scan failures come last: `scan_failure` reads each to the next.
    said = problems + unscanned
    final = replace(
        record,
        ended_at=_stamp(datetime.now(UTC)),
        exit_code=progress.exit_code,
        outcome="failed" if problems and progress.outcome() == "ok" else progress.outcome(),
        error=redact("; ".join(said), secrets_by_name) if said else None,
        container_id=progress.container_id,
        log_path=str(log_path) if log_path else None,
        evidence_path=str(evidence_dir),
    )
    runs = [
        HookRunRecord(record.id, run.name, run.event, run.exit_code, run.duration_s)
        for run in (progress.session.runs if progress.session else [])
    ]
    uses, in_layers = _baked_apart(uses, baked, plan, scans)
    try:
        finish_boot(ledger, final, uses, scanned, runs, tainted, untracked, in_layers)
    except DiskFull as exc:
        # The row stays `running` with nobody holding its lock: the next boot, archive or
        # teardown settles it as interrupted, and lets its caches go.
        ended = f"exit {progress.exit_code}" if progress.exit_code is not None else final.outcome
        raise exc.within(f"boot {record.id} ended ({ended}), its outcome not recorded") from exc
    return final


def _baked_apart(
    uses: list[CacheUse],
    baked: list[CacheMount],
    plan: CachePlan,
    scans: dict[str, tuple[Fingerprint, frozenset[str]]],
) -> tuple[list[CacheUse], list[BakedUse]]:
    """The judged uses of mounted caches, and those of baked ones as their own rows (a baked
    cache is no cache row of this host's)."""
    by_id = {m.cache_id: m for m in baked}
    rows = []
    for use in uses:
        if (mount := by_id.get(use.cache_id)) is not None:
            tree, written = plan.before[mount.name].tree_digest, scans[mount.name][1]
            row = BakedUse(use.boot_id, mount.name, use.cache_id, tree, use.verdict)
            rows.append(replace(row, files_read=use.files_read, files_written=len(written)))
    return [u for u in uses if u.cache_id not in by_id], rows


def _scan_cache(
    ledger: Ledger,
    boot_id: str,
    cache: CacheRecord,
    use: CacheUse,
    mount: CacheMount,
    previous: Fingerprint | None,
    secrets_by_name: Mapping[str, str],
) -> tuple[CacheUse, CacheRecord, Fingerprint, frozenset[str]]:
    """Fingerprint one cache after the boot (a path holding a secret's value masked); compare
    with `previous`, the tree it held when mounted warm (None: cold). Also the paths the boot
    wrote (added or changed; every path when cold)."""
    after = scan(Path(mount.host_path), previous, secrets=secrets_by_name)
    scan_path = ledger.keep_evidence(
        f"scans/{cache.id}", f"{boot_id}.json", after.to_json().encode()
    )
    diff = previous.diff(after) if previous is not None else None
    dirs = {e.path for e in after.entries if e.kind == "dir"}
    added = diff.added if diff is not None else tuple(e.path for e in after.entries)
    changed = diff.changed if diff is not None else ()
    use = replace(
        use,
        tree_digest_before=previous.tree_digest if previous else None,
        tree_digest_after=after.tree_digest,
        # Files (links and FIFOs too) apart from dirs: a JIT's new dir is not a compiled file.
        files_added=sum(1 for path in added if path not in dirs),
        dirs_added=sum(1 for path in added if path in dirs),
        files_changed=len(changed),
        files_removed=len(diff.removed) if diff is not None else 0,
    )
    cache = replace(
        cache,
        tree_digest=after.tree_digest,
        files=after.files,
        bytes=after.bytes,
        scan_path=str(scan_path),
        scanned_at=_stamp(datetime.now(UTC)),
        in_use_by=None,
        state="live",  # whatever it was, a boot used it: any archive is now out of date
    )
    return use, cache, after, frozenset((*added, *changed))


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")
