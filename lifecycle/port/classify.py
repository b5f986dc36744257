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

BLOCKED_BY is proven too. In a `--keep-going` survey a patch that conflicts has been tried
without every earlier conflicting patch (they were skipped). It is BLOCKED_BY an earlier one
only if forcing that one in makes it apply: the earlier patch is merged onto the tree the later
one failed on, each of its conflicts settled in the patch's favour (`git merge-file --theirs`;
a file it deletes, deleted; one it adds or keeps, its version), and the later patch is
test-merged onto that tree. Otherwise it is a CONFLICT of its own. Nothing touches the
worktree: every merge is `git merge-tree --write-tree` of commits made for the purpose
(`commit-tree`) and the forced tree is built in a scratch index. Only earlier patches that
share a file with the later one are tried, nearest first: forcing in one that does not cannot
change the merge.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lifecycle.errors import LifecycleError
from lifecycle.port import export, history
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
            # if forcing that one in makes this one apply (see above); those that share no
            # file with it cannot, and are not tried.
            mine = set(old_paths.get(replayed.old[i], []))
            earlier = [
                (plan.patches[j].file, replayed.old[j])
                for j, theirs in reversed(blockers.items())
                if mine & theirs
            ]
            blocker = _blocker(git, replayed.old[i], stopped[i].head, earlier)
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
    return result, export.with_port(original, moved.new, trailer)


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


def _blocker(git: Git, commit: str, head: str, earlier: list[tuple[str, str]]) -> str | None:
    """The first of `earlier` ((name, old-series commit), nearest first) that, forced in on
    `head`, lets the old-series `commit` apply; None if none does."""
    for name, other in earlier:
        forced = _forced(git, head, other)
        if forced is not None and _merge(git, f"{commit}^", forced, commit)[0] == 0:
            return name
    return None


def _merge(git: Git, base: str, ours: str, theirs: str) -> tuple[int, list[str]]:
    """A cherry-pick's 3-way merge, `theirs`' change since `base` onto `ours` (tree-ishes):
    (0 clean | 1 conflicts | other: git could not, the merged tree and its conflict entries).

    `merge-tree` takes the merge base from history, so the three trees are given one: two
    commits made on a root commit of `base`."""
    root = _commit(git, base)
    left, right = _commit(git, ours, root), _commit(git, theirs, root)
    done = git.run("merge-tree", "--write-tree", "-z", left, right, check=False)
    fields = done.out.split("\0")
    entries = fields[1 : fields.index("", 1)] if "" in fields[1:] else []
    return done.rc, [fields[0], *entries]


def _commit(git: Git, tree: str, parent: str | None = None) -> str:
    parents = ["-p", parent] if parent else []
    return git.out("commit-tree", f"{tree}^{{tree}}", *parents, input="lifecycle port\n").strip()


def _forced(git: Git, head: str, commit: str) -> str | None:
    """`head`'s tree with `commit`'s change (since its parent) forced in; None if a conflict
    cannot be settled in its favour (a rename or directory conflict)."""
    rc, merged = _merge(git, f"{commit}^", head, commit)
    if rc == 0:
        return merged[0]
    if rc != 1:
        return None
    stages: dict[str, dict[int, tuple[str, str]]] = {}
    for entry in merged[1:]:
        info, path = entry.split("\t", 1)
        mode, blob, stage = info.split()
        stages.setdefault(path, {})[int(stage)] = (mode, blob)
    settled = []
    for path, present in stages.items():
        if 3 not in present:
            if 1 not in present:
                return None
            settled.append(f"0 {'0' * 40}\t{path}")  # the patch deletes it
            continue
        mode, blob = present[3]
        if 2 in present:
            blob = _theirs(git, present.get(1, ("", "")), present[2], present[3])
        settled.append(f"{mode} {blob}\t{path}")
    with tempfile.TemporaryDirectory(prefix="lifecycle-port-force-") as temp:
        indexed = git.with_env(GIT_INDEX_FILE=str(Path(temp) / "index"))
        indexed.run("read-tree", merged[0])
        indexed.run("update-index", "--index-info", input="".join(f"{s}\n" for s in settled))
        return indexed.out("write-tree").strip()


def _theirs(git: Git, base: tuple[str, str], ours: tuple[str, str], theirs: tuple[str, str]) -> str:
    """The blob of a 3-way file merge whose conflicting hunks take `theirs`' side (`theirs`
    whole when git cannot merge the file, a binary one)."""
    with tempfile.TemporaryDirectory(prefix="lifecycle-port-force-") as temp:
        # unpack-file writes each blob, byte for byte, to a file in the current directory.
        there = git.with_env(GIT_DIR=str((git.cwd / ".git").resolve())).at(Path(temp))
        files = [
            str(Path(temp) / there.out("unpack-file", blob).strip()) if blob else _empty(temp)
            for _, blob in (ours, base, theirs)
        ]
        merged = there.run("merge-file", "--theirs", "--quiet", *files, check=False)
        if merged.rc >= 128:
            return theirs[1]
        return there.out("hash-object", "-w", "--no-filters", files[0]).strip()


def _empty(directory: str) -> str:
    path = Path(directory) / "empty"
    path.write_bytes(b"")
    return str(path)
