"""A port from start to finish: replay, stop or go on, and `--continue` / `--abort`.

`start` runs a port; `resume` (`--continue`) takes the worktree as the resolution and goes on;
`abort` forgets a stopped port. Nothing is written into the user's repository before the port
finishes, and then only the port branch (see branch.py), so abort has only its own state dir
to remove, once a resolution a person began in its worktree is kept as a patch in the home.
Each holds the port's lock while it runs (state.running), so none of them touches the state
dir of a port that is running; the lock goes with a killed process.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.home import Home, write_atomic
from lifecycle.port import branch as port_branch
from lifecycle.port import export, history, replay, state
from lifecycle.port.classify import Replayed
from lifecycle.port.finish import finish, stopped
from lifecycle.port.git import Git
from lifecycle.port.outcome import Conflict, Drop, DropMethod, PortReport
from lifecycle.port.plan import PortFlags, PortPlan, PortRequest, make_plan
from lifecycle.port.replay import Stop

SERIES_REFS = "refs/lifecycle/series"


def start(request: PortRequest, checkpoint: Checkpoint = lambda point: None) -> PortReport:
    """Run a port; a report with status complete (branch written) or conflicts-pending."""
    plan = make_plan(request)
    base = plan.repo.head if plan.repo else None
    with ExitStack() as cleanup:
        if request.flags.dry_run:
            directory = Path(tempfile.mkdtemp(prefix="lifecycle-port-"))
            cleanup.callback(shutil.rmtree, directory, ignore_errors=True)
        else:
            assert plan.repo is not None  # make_plan refuses a real port outside a repository
            directory = state.state_dir(request.home, plan.repo.root)
            this = f"{plan.old_label} -> {plan.new_label}"
            wait = f"wait for it to end (this run: {this})"
            cleanup.enter_context(state.running(request.home, directory, f"the port {this}", wait))
            state.claim(directory, this)
            cleanup.callback(_remove_unless_stopped, directory)
            checkpoint("port-claimed")
        git = replay.make_scratch(plan.mirror.path, state.worktree(directory))
        old_commits = _old_series(plan, git)
        by_commit = {commit: i for i, commit in enumerate(old_commits)}
        with ThreadPoolExecutor(max_workers=1) as pool:
            # Check out the new release while patch-ids are computed: only objects are read.
            checkout = pool.submit(git.run, "checkout", "--quiet", "--detach", plan.new.commit)
            pre_dropped = _patch_id_drops(git, plan, old_commits)
            checkout.result()
        picks = [c for c in old_commits if by_commit[c] not in pre_dropped]
        stops = replay.cherry_pick(git, picks, by_commit, keep_going=request.flags.keep_going)
        old = dict(enumerate(old_commits))
        replayed = Replayed(old, _new_commits(git, plan), pre_dropped, {}, stops)
        if not stops:
            return _finish_and_remove(plan, git, replayed, base, directory)
        report = stopped(plan, git, replayed)
        if request.flags.dry_run:
            return report
        if request.flags.keep_going:
            replay.restart_at(git, stops[0], picks, by_commit)
        git.run("sparse-checkout", "disable")  # an ordinary worktree, for a person to work in
        _save(directory, git, plan, base, replayed, picks)
        return replace(report, worktree=str(git.cwd))
    raise AssertionError("unreachable")


def locate(manifests_dir: Path, home: Home, cwd: Path) -> Path:
    """The state dir of the port `--continue` and `--abort` mean, run from `cwd`.

    The port whose worktree `cwd` is in; else the port of the repository holding
    `manifests_dir`; else, outside any such repository, the one port in progress.
    """
    ports = state.in_progress(home)
    here = cwd.resolve()
    for directory in ports:
        if here.is_relative_to(directory.resolve()):
            return directory
    repo = port_branch.find_repository(manifests_dir) if manifests_dir.is_dir() else None
    if repo is not None:
        mine = state.state_dir(home, repo.root)
        if mine.is_dir():
            return mine
        elsewhere = f": in progress elsewhere: {_listed(ports)}" if ports else ""
        raise LifecycleError(f"no port in progress in {repo.root}{elsewhere}")
    if len(ports) == 1:
        return ports[0]
    if not ports:
        raise LifecycleError(f"no port in progress (nothing in {home.ports})")
    raise LifecycleError(
        f"{len(ports)} ports are in progress ({_listed(ports)}): run from the repository "
        "of the one you mean, or from its worktree"
    )


def _listed(ports: list[Path]) -> str:
    return "; ".join(state.describe(directory) for directory in ports)


def resume(directory: Path, home: Home, checkpoint: Checkpoint = lambda point: None) -> PortReport:
    """`--continue`: the worktree is the resolution of the stopped patch; go on from there."""
    this = f"the `port --continue` of {state.describe(directory)}"
    with state.running(home, directory, this, "wait for it to end"):
        return _resume(directory, home, checkpoint)


def _resume(directory: Path, home: Home, checkpoint: Checkpoint) -> PortReport:
    saved = state.load(directory)
    request = PortRequest(
        Path(saved.manifests_dir),
        saved.old_manifest,
        saved.new_ref,
        home,
        PortFlags(
            branch=saved.branch,
            release=saved.release,
            allow_dirty=saved.allow_dirty,
            force=saved.force,
        ),
    )
    plan = make_plan(
        request, fetch=False, uncommitted=tuple(saved.uncommitted), releases=saved.releases
    )
    if plan.digest != saved.old_manifest_digest:
        raise LifecycleError(
            f"{plan.loaded.file} changed since the port started: `lifecycle port --abort` and "
            "start again"
        )
    git = Git.scratch(state.worktree(directory))
    by_commit = {commit: i for i, commit in enumerate(saved.old_commits)}
    assert saved.stop is not None
    stop = Stop(saved.stop["index"], Conflict.from_json(saved.stop["conflict"]), saved.stop["head"])
    resolved = {int(k): Conflict.from_json(v) for k, v in saved.resolved.items()}
    pre_dropped = {
        int(k): Drop(DropMethod(v["method"]), v["commit"], v["subject"])
        for k, v in saved.pre_dropped.items()
    }
    old = dict(enumerate(saved.old_commits))
    at = _stop_in_worktree(git, plan, stop, by_commit)
    if at != stop:
        # git went past the saved stop (a person's `git cherry-pick --continue`, or a
        # --continue killed before it saved): that one is resolved, and git's is the port's
        # stop now, reported as the --continue that got there would have. Never taken as
        # resolved unseen: a binary or modify/delete conflict leaves no marker to refuse.
        resolved[stop.index] = stop.conflict
        replayed = Replayed(old, _new_commits(git, plan), pre_dropped, resolved, [at])
        _save(directory, git, plan, saved.base_commit, replayed, saved.picks)
        return replace(stopped(plan, git, replayed), worktree=str(git.cwd))
    stops = replay.resume(git, by_commit)
    checkpoint("port-continued")
    resolved[stop.index] = stop.conflict
    replayed = Replayed(old, _new_commits(git, plan), pre_dropped, resolved, stops)
    if not stops:
        report = finish(plan, git, replayed, saved.base_commit)
        state.remove(directory)
        return report
    _save(directory, git, plan, saved.base_commit, replayed, saved.picks)
    return replace(stopped(plan, git, replayed), worktree=str(git.cwd))


def _stop_in_worktree(git: Git, plan: PortPlan, saved: Stop, by_commit: dict[str, int]) -> Stop:
    """The stop the worktree is at: the saved one; or, once git concluded that one and stopped
    at a later patch, that patch's (its conflict read from the index). A LifecycleError when
    git stopped anywhere else (a pick skipped by hand)."""
    picking = git.commit_of("CHERRY_PICK_HEAD")
    at = by_commit.get(picking) if picking else None
    if picking is None or at == saved.index:
        # At the stop; or no pick stopped at all: all done, or aborted by hand (finish says).
        return saved
    if at is not None and at > saved.index and saved.index in _new_commits(git, plan):
        head = git.out("rev-parse", "HEAD").strip()
        return Stop(at, replay.read_conflict(git, ""), head)
    where = plan.patches[at].file if at is not None else f"commit {picking[:12]}"
    raise LifecycleError(
        f"the worktree's cherry-pick is at {where}, not at {plan.patches[saved.index].file} "
        "where the port stopped (was a patch skipped by hand?): `lifecycle port --abort` and "
        "start again"
    )


def abort(directory: Path, home: Home, *, dry_run: bool = False) -> tuple[str, Path | None]:
    """`--abort`: forget the stopped port (nothing outside its state dir was written); refused
    while the port runs. What it says, and where the worktree's changes beyond the stop (a
    resolution begun by hand) were kept, if it had any; with `dry_run`, what it would do."""
    advice = "--abort removes only a stopped or killed port"
    removed, aborted, are = (
        ("would remove", "would abort", "would be") if dry_run else ("removed", "aborted", "are")
    )
    with state.running(home, directory, "the `port --abort`", advice):
        if not directory.is_dir():  # the port it waited on ended meanwhile
            raise LifecycleError(f"no port in progress (nothing in {directory})")
        if not (directory / "state.json").is_file():
            if not dry_run:
                state.remove(directory)  # a port killed before it could save or clean up
            return f"{removed} the leftovers of an interrupted port: {directory}", None
        saved = state.load(directory)
        edits = _edits(Git.scratch(state.worktree(directory)), saved)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        name = f"{saved.old_ref}-to-{saved.new_ref}-{stamp}.patch".replace("/", "_")
        kept = home.aborted_ports / name if edits else None
        if not dry_run:
            if edits and kept:
                write_atomic(kept, edits[0])  # whole before the worktree goes
            state.remove(directory)
    said = f"{aborted} the port {saved.old_ref} -> {saved.new_ref}; {removed} {directory}"
    if not edits:
        return said, None
    return (
        f"{said}; the worktree's edits since the stop ({_files(edits[1])}) {are} kept in {kept}"
        " (to take them up in the worktree of a port stopped at the same patch: "
        f"`git checkout HEAD -- . && git apply {kept}`)"
    ), kept


def _edits(git: Git, saved: state.PortState) -> tuple[bytes, list[str]] | None:
    """The worktree's changes, as one patch, and the files they touch, when a person made
    some since the port stopped (they differ from what it left); None when not."""
    changes = _changes(git)
    if not changes or hashlib.sha256(changes).hexdigest() == saved.worktree_left:
        return None
    staged = git.out("apply", "--numstat", "-", input=changes.decode("utf-8", "surrogateescape"))
    return changes, [line.split("\t", 2)[2] for line in staged.splitlines()]


def _changes(git: Git) -> bytes:
    """The worktree against its HEAD as one binary patch, new files included: what `--abort`
    would lose. Staged through an index of its own, so git's (a cherry-pick's conflict, for
    `--continue`) stays as it is."""
    with tempfile.TemporaryDirectory() as scratch:
        staged = git.with_env(GIT_INDEX_FILE=str(Path(scratch) / "index"))
        staged.run("read-tree", "HEAD")
        staged.run("add", "--all")
        diff = staged.out("diff", "--cached", "--binary", "HEAD")
    return diff.encode("utf-8", "surrogateescape")


def _files(files: list[str]) -> str:
    shown = ", ".join(files[:3]) + (", …" if len(files) > 3 else "")
    return f"{len(files)} file{'s' if len(files) != 1 else ''}: {shown}"


def _old_series(plan: PortPlan, git: Git) -> list[str]:
    """The old series as commits on the old release: found in the mirror, or made with git am.

    Made, they are written straight into the mirror's object store and named by a ref there,
    so the next port of the same series on the same release (a dry run, then the real one; a
    nightly check) skips git am. They are deterministic: a port finds the commits it would make.
    """
    ref = f"{SERIES_REFS}/{replay.series_key(plan.old.commit, plan.subdir, plan.patches)}"
    head = plan.mirror.git.commit_of(ref)
    if head:
        commits = git.out("rev-list", "--reverse", f"{plan.old.commit}..{head}").split()
        if len(commits) == len(plan.patches):
            return commits
    in_mirror = git.with_env(GIT_OBJECT_DIRECTORY=str((plan.mirror.path / "objects").resolve()))
    commits = replay.apply_series(in_mirror, plan.old.commit, plan.subdir, plan.patches)
    # Sparse again after `git am`, which wrote out every file it patched: the replay that
    # follows then writes none of them.
    git.run("sparse-checkout", "reapply")
    if commits:
        plan.mirror.git.run("update-ref", ref, commits[-1])
    return commits


def _patch_id_drops(git: Git, plan: PortPlan, old_commits: list[str]) -> dict[int, Drop]:
    """Patches an upstream commit between the tags made exactly (git rebase's own rule)."""
    if not old_commits or plan.old.commit == plan.new.commit:
        return {}
    paths = sorted({p for ps in export.touched(git, old_commits).values() for p in ps})
    upstream = history.patch_ids(git, [f"{plan.old.commit}..{plan.new.commit}"], paths)
    by_id = {pid: commit for commit, pid in upstream.items()}  # log is newest first: oldest wins
    ours = history.patch_ids(git, [f"{plan.old.commit}..{old_commits[-1]}"])
    drops = {}
    for i, commit in enumerate(old_commits):
        match = by_id.get(ours.get(commit, ""))
        if match:
            drops[i] = Drop(DropMethod.PATCH_ID, match, history.subject_of(git, match))
    return drops


def _new_commits(git: Git, plan: PortPlan) -> dict[int, str]:
    found = export.patch_indices(git, [f"{plan.new.commit}..HEAD"])
    return {index: commit for commit, index in found.items()}


def _save(
    directory: Path,
    git: Git,
    plan: PortPlan,
    base: str | None,
    replayed: Replayed,
    picks: list[str],
) -> None:
    """Save where the port stopped (its first stop), for `--continue`, and what its worktree
    holds then, for `--abort`."""
    stop = replayed.stops[0]
    left = hashlib.sha256(_changes(git)).hexdigest()
    state.save(
        directory,
        state.PortState(
            old_ref=plan.old_label,
            old_manifest=str(plan.loaded.file),
            new_ref=plan.new_label,
            release=plan.new.version,
            branch=plan.branch,
            manifests_dir=str(plan.request.manifests_dir.resolve()),
            old_manifest_digest=plan.digest,
            base_commit=base,
            old_commits=list(replayed.old.values()),
            picks=picks,
            pre_dropped={str(i): asdict(d) for i, d in replayed.pre_dropped.items()},
            resolved={str(i): c.to_json() for i, c in replayed.resolved.items()},
            stop={"index": stop.index, "conflict": stop.conflict.to_json(), "head": stop.head},
            allow_dirty=plan.request.flags.allow_dirty,
            force=plan.request.flags.force,
            uncommitted=list(plan.uncommitted),
            old_release=asdict(plan.old),
            new_release=asdict(plan.new),
            worktree_left=left,
        ),
    )


def _finish_and_remove(
    plan: PortPlan, git: Git, replayed: Replayed, base: str | None, directory: Path
) -> PortReport:
    """`finish`, removing the scratch clone (hundreds of unlinks: loose objects, one directory
    per id prefix) while the branch is written, once nothing reads the clone any more."""

    def remove() -> None:
        if plan.request.flags.dry_run:
            shutil.rmtree(directory)
        else:
            state.remove(directory)

    with ThreadPoolExecutor(max_workers=1) as pool:
        removal: list[Future[None]] = []
        report = finish(plan, git, replayed, base, lambda: removal.append(pool.submit(remove)))
        for done in removal:
            done.result()
    return report


def _remove_unless_stopped(directory: Path) -> None:
    # A port that finished, failed or was interrupted leaves nothing; only a stop keeps state.
    if directory.exists() and not (directory / "state.json").is_file():
        state.remove(directory)
