"""From replayed commits to per-patch outcomes, by rules that never drop on a hint alone.

A patch leaves the series only on evidence that its change is in the new release:
- `patch-id`: an upstream commit between the tags has the same stable patch-id (git rebase's
  own rule); such patches are not replayed at all;
- `ancestor`: the replay came out empty and the patch's recorded `upstream_commit` is in the
  new tag (and was not in the old);
- `reverse-apply`: the replay came out empty and the patch reverse-applies, no fuzz, to the
  new tag; the commit named is the newest upstream commit between the tags touching its files.
An empty replay with none of these is EMPTIED. A recorded commit in the new tag while the patch
still changes the tree, or upstream commits touching a conflicted file, are hints: they are
reported (as a note, or the conflict's hint) and the patch stays.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lifecycle.errors import LifecycleError
from lifecycle.port import blocking, export, history, patchfile
from lifecycle.port.git import Git
from lifecycle.port.outcome import (
    Conflict,
    ConflictedFile,
    Drop,
    DropMethod,
    PatchOutcome,
    PatchResult,
    Rename,
)
from lifecycle.port.plan import PortPlan
from lifecycle.port.replay import SeriesPatch, Stop


@dataclass(frozen=True)
class Replayed:
    """What the replay left: old and new commit per patch index, drops, resolutions, stops."""

    old: dict[int, str]
    new: dict[int, str]
    pre_dropped: dict[int, Drop] = field(default_factory=dict)
    resolved: dict[int, Conflict] = field(default_factory=dict)
    stops: list[Stop] = field(default_factory=list)


@dataclass(frozen=True)
class _Moved:
    """One replayed patch: its old and new diff (package paths) and the repository paths."""

    patch: SeriesPatch
    old: bytes
    new: bytes
    old_paths: list[str]
    new_paths: list[str]
    resolved: Conflict | None


def classify(
    git: Git, plan: PortPlan, replayed: Replayed
) -> tuple[list[PatchResult], dict[int, bytes]]:
    """Every patch's result, and the bytes of each patch kept in the new series."""
    old_commits, new_commits = list(replayed.old.values()), list(replayed.new.values())
    with ThreadPoolExecutor(max_workers=3) as pool:  # four independent reads of the repository
        old_exports_read = pool.submit(export.export, git, old_commits, plan.subdir)
        old_paths_read = pool.submit(export.touched, git, old_commits)
        new_paths_read = pool.submit(export.touched, git, new_commits)
        new_exports = export.export(git, new_commits, plan.subdir)
    old_exports, old_paths = old_exports_read.result(), old_paths_read.result()
    new_paths = new_paths_read.result()
    stopped = {s.index: s for s in replayed.stops}
    results: list[PatchResult] = []
    kept: dict[int, bytes] = {}
    blockers: dict[int, set[str]] = {}
    for patch in plan.patches:
        i = patch.index
        if i in replayed.pre_dropped:
            drop = replayed.pre_dropped[i]
            results.append(PatchResult(i, patch.file, PatchOutcome.DROPPED_UPSTREAM, drop=drop))
        elif i in stopped:
            # In a --keep-going survey, a conflict is put down to an earlier stopped patch only
            # if forcing that one in makes this one apply (blocking.py); those that share no
            # file with it cannot, and are not tried.
            mine = set(old_paths.get(replayed.old[i], []))
            earlier = [
                (plan.patches[j].file, replayed.old[j])
                for j, theirs in reversed(blockers.items())
                if mine & theirs
            ]
            blocker = blocking.blocker(git, replayed.old[i], stopped[i].head, earlier)
            blockers[i] = mine
            conflict = _with_hint(git, plan, patch, stopped[i].conflict)
            outcome = PatchOutcome.BLOCKED_BY if blocker else PatchOutcome.CONFLICT
            results.append(
                PatchResult(i, patch.file, outcome, conflict=conflict, blocked_by=blocker)
            )
        elif i in replayed.new:
            old, new = replayed.old[i], replayed.new[i]
            resolved = replayed.resolved.get(i)
            moved = _Moved(
                patch,
                old_exports[old],
                new_exports[new],
                old_paths.get(old, []),
                new_paths.get(new, []),
                _in_package(resolved, plan) if resolved else None,
            )
            if moved.new.strip():
                result, kept[i] = _applied(git, plan, moved)
            else:
                result = _emptied(git, plan, moved)
            results.append(result)
        else:
            results.append(PatchResult(i, patch.file, PatchOutcome.PENDING))
    return results, kept


def _emptied(git: Git, plan: PortPlan, moved: _Moved) -> PatchResult:
    """A replay that changed nothing: dropped on evidence, else EMPTIED."""
    patch = moved.patch
    note = "resolved to no change" if moved.resolved else None
    drop = None
    recorded = _recorded(git, plan, patch)
    if recorded:
        drop = Drop(DropMethod.ANCESTOR, recorded, history.subject_of(git, recorded))
    elif history.reverse_applies(git, plan.new.commit, patch.path, plan.subdir):
        touching = history.commits_touching(
            git, plan.old.commit, plan.new.commit, moved.old_paths, 1
        )
        if touching:
            commit, _, subject = touching[0].partition(" ")
            drop = Drop(DropMethod.REVERSE_APPLY, commit, subject)
    if drop:
        outcome = PatchOutcome.DROPPED_UPSTREAM
        return PatchResult(patch.index, patch.file, outcome, drop, moved.resolved, note=note)
    related = (
        None
        if moved.resolved
        else history.related_commit(
            git, plan.old.commit, plan.new.commit, plan.subdir, moved.old, moved.old_paths
        )
    )
    upstream = (
        f"and upstream {related.commit[:12]} {related.subject!r} {related.how}, " if related else ""
    )
    why = note or (
        f"its change is already in the tree it was moved onto, {upstream}but neither patch-id "
        "nor a reverse-apply proves the change is upstream's: check it"
    )
    return PatchResult(
        patch.index,
        patch.file,
        PatchOutcome.EMPTIED,
        conflict=moved.resolved,
        note=why,
        related=related,
    )


def _applied(git: Git, plan: PortPlan, moved: _Moved) -> tuple[PatchResult, bytes]:
    """A replay that changed the tree: kept, with how much it moved."""
    patch = moved.patch
    prefix = f"{plan.subdir}/"
    outside = [p for p in moved.new_paths if not p.startswith(prefix)]
    if outside:
        raise LifecycleError(
            f"{patch.file} now changes {', '.join(outside)}, outside {prefix} (upstream moved "
            "it): the build applies patches inside the package dir only; port it by hand"
        )
    unchanged = export.same_position(moved.old, moved.new)
    note = None
    recorded = _recorded(git, plan, patch)
    if recorded:
        note = (
            f"the recorded upstream_commit {recorded[:12]} is in {plan.new.tag}, yet the patch "
            "still changes the tree: kept (a hint is not evidence); check drop_when"
        )
    renames = _renames(git, plan, moved.old_paths, moved.new_paths)
    if moved.resolved:
        outcome = PatchOutcome.RESOLVED
    elif renames:
        outcome = PatchOutcome.RENAMED
    elif export.same_hunks(moved.old, moved.new):
        outcome = PatchOutcome.CLEAN
    else:
        outcome = PatchOutcome.CLEAN_3WAY
    result = PatchResult(
        patch.index,
        patch.file,
        outcome,
        conflict=moved.resolved,
        renames=renames,
        unchanged=unchanged,
        note=note,
    )
    # A patch whose change did not move keeps its bytes, whatever tool first wrote them; one
    # that moved keeps its author and message, and says it was ported.
    original = patch.path.read_bytes()
    if unchanged:
        return result, original
    trailer = f"Ported-From: {plan.old_label} -> {plan.new_label} ({outcome.value})"
    return result, patchfile.with_port(original, moved.new, trailer)


def _recorded(git: Git, plan: PortPlan, patch: SeriesPatch) -> str | None:
    if not patch.upstream_commit:
        return None
    return history.recorded_commit_in(git, patch.upstream_commit, plan.old.commit, plan.new.commit)


def _renames(
    git: Git, plan: PortPlan, old_paths: list[str], new_paths: list[str]
) -> tuple[Rename, ...]:
    gone = [p for p in old_paths if p not in new_paths]
    if not gone:
        return ()
    moved = history.renames(git, plan.old.commit, plan.new.commit, gone)
    prefix = f"{plan.subdir}/"
    return tuple(
        Rename(old.removeprefix(prefix), new.removeprefix(prefix))
        for old, new in sorted(moved.items())
        if new in new_paths
    )


def _with_hint(git: Git, plan: PortPlan, patch: SeriesPatch, conflict: Conflict) -> Conflict:
    found = history.conflict_hint(git, plan.old.commit, plan.new.commit, plan.subdir, conflict)
    said = [found] if found else []
    recorded = _recorded(git, plan, patch)
    if recorded:
        said.append(f"the recorded upstream_commit {recorded[:12]} is in {plan.new.tag}")
    if patch.drop_when:
        said.append(f"drop_when: {patch.drop_when}")
    return Conflict(_in_package(conflict, plan).files, " | ".join(said) or None)


def _in_package(conflict: Conflict, plan: PortPlan) -> Conflict:
    """The conflict with its paths relative to the package dir, as patches name them."""
    prefix = f"{plan.subdir}/"
    files = tuple(ConflictedFile(f.path.removeprefix(prefix), f.kind) for f in conflict.files)
    return Conflict(files, conflict.hint)
