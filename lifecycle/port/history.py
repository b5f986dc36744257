"""What upstream history says about a patch: patch-ids, ancestry, reverse-apply, renames.

Each function answers one question with git and returns evidence (commit ids), so a report can
say which method fired. None of them decides a drop alone: `classify` does, by the rules there.

The hints name what upstream did where a patch stopped or came out empty, never a reason to
drop. A conflict's hint names, per file, the upstream commit that deleted it (and the file
that replaced it: a rename git finds at a low threshold, else what that commit added), added
it, or changed it. An EMPTIED patch names the upstream commit that wrote the lines it adds
(`git blame` over the lines of the new tree that equal them, where they occur once), else the
newest one that changed its files.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path

from lifecycle.port.git import Git
from lifecycle.port.outcome import Conflict, ConflictKind, RelatedCommit

# Both sides of a patch-id comparison are printed with exactly these options. `--binary`:
# without it every change to a binary file prints the same "Binary files differ" line, and two
# different binary changes would share a patch-id.
_PATCH_ID_DIFF = ("-p", "--binary", "--no-color", "--no-ext-diff", "--no-textconv", "-M")


def patch_ids(git: Git, revisions: list[str], paths: list[str] | None = None) -> dict[str, str]:
    """commit → stable patch-id for the non-merge commits of `revisions` (limited to commits
    touching `paths`, each still hashed over its whole diff, like `git cherry`)."""
    limit = ["--full-diff", "--", *paths] if paths else []
    log = git.out("log", *_PATCH_ID_DIFF, "--no-merges", "--format=commit %H", *revisions, *limit)
    if not log.strip():
        return {}
    ids = git.out("patch-id", "--stable", input=log)
    return {commit: pid for pid, commit in (line.split() for line in ids.splitlines())}


def recorded_commit_in(git: Git, recorded: str, old_commit: str, new_commit: str) -> str | None:
    """The recorded upstream commit's full id if the new release has it and the old did not."""
    commit = git.commit_of(recorded)
    if commit is None:
        return None
    in_new = git.run("merge-base", "--is-ancestor", commit, new_commit, check=False).rc == 0
    in_old = git.run("merge-base", "--is-ancestor", commit, old_commit, check=False).rc == 0
    return commit if in_new and not in_old else None


def reverse_applies(git: Git, tree: str, patch: Path, directory: str) -> bool:
    """Whether `patch` reverse-applies with no fuzz to `tree`, i.e. its change is already there.

    Checked in a throwaway index, so neither the worktree nor the real index is touched."""
    with tempfile.TemporaryDirectory(prefix="lifecycle-port-") as temp:
        indexed = git.with_env(GIT_INDEX_FILE=str(Path(temp) / "index"))
        indexed.run("read-tree", tree)
        check = indexed.run(
            "apply",
            "--cached",
            "--check",
            "--reverse",
            f"--directory={directory}",
            "--",
            str(patch),
            check=False,
        )
        return check.rc == 0


def commits_touching(git: Git, old: str, new: str, paths: list[str], limit: int) -> list[str]:
    """Up to `limit` `<commit> <subject>` lines, newest first, of upstream commits between the
    tags that changed `paths`."""
    if not paths:
        return []
    out = git.out("log", f"-{limit}", "--format=%H %s", f"{old}..{new}", "--", *paths)
    return out.splitlines()


def subject_of(git: Git, commit: str) -> str:
    """A commit's subject line."""
    return git.out("log", "-1", "--format=%s", commit).strip()


def renames(git: Git, old: str, new: str, paths: list[str]) -> dict[str, str]:
    """old path → new path for the `paths` upstream renamed between the two commits."""
    if not paths:
        return {}
    renamed = _name_status(git, "-M", "--diff-filter=R", old, new)
    return {source: target for _, source, target in renamed if source in paths}


def last_change(git: Git, old: str, new: str, path: str, kind: str) -> tuple[str, str] | None:
    """(commit, subject) of the newest upstream commit between the tags that added (`A`) or
    deleted (`D`) `path`."""
    out = git.out(
        "log", "-1", f"--diff-filter={kind}", "--format=%H %s", f"{old}..{new}", "--", path
    )
    commit, _, subject = out.strip().partition(" ")
    return (commit, subject) if commit else None


def successors(git: Git, commit: str, path: str, under: str) -> list[tuple[str, int]]:
    """Where `commit` moved the `path` it deleted: (new path, % alike) for a rename git finds
    at a low threshold (20 %), else every file it added under `under` (% alike 0)."""
    changes = _name_status(git, "--find-renames=20%", f"{commit}^", commit)
    renamed = [(new, int(st[1:] or 0)) for st, old, new in changes if st[0] in "RC" and old == path]
    return renamed or [(new, 0) for st, new, _ in changes if st == "A" and new.startswith(under)]


def _name_status(git: Git, *args: str) -> list[tuple[str, str, str]]:
    """(status, path, new path: a rename's or copy's, else "") for each file `git diff ARGS`
    changes."""
    fields = git.out("diff", "--name-status", "-z", *args).split("\0")
    changes, at = [], 0
    while at < len(fields) - 1:
        status, path = fields[at], fields[at + 1]
        moved = status.startswith(("R", "C"))
        changes.append((status, path, fields[at + 2] if moved else ""))
        at += 3 if moved else 2
    return changes


def blame(git: Git, old: str, new: str, path: str, lines: list[int]) -> list[tuple[str, str]]:
    """(commit, subject) of the upstream commit between the tags that last wrote each of
    `lines` (1-based) of `path` at `new`; lines older than `old` are left out."""
    if not lines:
        return []
    ranges = [arg for number in lines for arg in ("-L", f"{number},{number}")]
    out = git.out("blame", "--line-porcelain", *ranges, f"{old}..{new}", "--", path)
    found: list[tuple[str, str]] = []
    commit = subject = ""
    boundary = False
    for line in out.splitlines():
        if line.startswith("\t"):
            if not boundary:
                found.append((commit, subject))
            commit, subject, boundary = "", "", False
        elif not commit:
            commit = line.split(" ", 1)[0]
        elif line.startswith("summary "):
            subject = line.removeprefix("summary ")
        elif line == "boundary":
            boundary = True
    return found


_FILE = re.compile(r"^\+\+\+ b/(.+)$")


def conflict_hint(git: Git, old: str, new: str, subdir: str, conflict: Conflict) -> str | None:
    """What upstream did to each conflicted file (repository paths), in one sentence."""
    prefix = f"{subdir}/"
    parts, changed = [], []
    for conflicted in conflict.files:
        path = conflicted.path
        name = path.removeprefix(prefix)
        kind = conflicted.kind
        deleted = kind is ConflictKind.MODIFY_DELETE and last_change(git, old, new, path, "D")
        added = kind is ConflictKind.ADD_ADD and last_change(git, old, new, path, "A")
        if deleted:
            commit, subject = deleted
            after = successors(git, commit, path, prefix)
            became = (" or " if after and after[0][1] else ", ").join(
                f"{p.removeprefix(prefix)}, {alike} % alike" if alike else p.removeprefix(prefix)
                for p, alike in after[:3]
            )
            lead = "it became" if after and after[0][1] else "that commit added"
            parts.append(
                f"upstream deleted {name} in {commit[:12]} {subject!r}"
                + (f" ({lead} {became})" if became else "")
            )
        elif added:
            parts.append(f"upstream added {name} in {added[0][:12]} {added[1]!r}")
        else:
            changed.append(path)
    touching = commits_touching(git, old, new, changed, 3)
    if touching:
        named = "; ".join(f"{c[:12]} {s!r}" for c, _, s in (t.partition(" ") for t in touching))
        parts.append(f"upstream changed these files in {named}")
    if not parts:
        return None
    return (
        "; ".join(parts) + ": if that change supersedes this patch, resolve by keeping "
        "upstream's side (the patch then drops out)"
    )


def related_commit(
    git: Git, old: str, new: str, subdir: str, diff: bytes, paths: list[str]
) -> RelatedCommit | None:
    """The upstream commit that most likely made an EMPTIED patch's change (a hint)."""
    votes: Counter[tuple[str, str]] = Counter()
    for name, added in _added_lines(diff).items():
        path = f"{subdir}/{name}"
        shown = git.run("cat-file", "blob", f"{new}:{path}", check=False)
        if shown.rc != 0:
            continue
        where: dict[str, list[int]] = {}
        for number, line in enumerate(shown.out.split("\n"), start=1):
            where.setdefault(line, []).append(number)
        once = sorted({where[line][0] for line in added if len(where.get(line, [])) == 1})
        votes.update(blame(git, old, new, path, once))
    if votes:
        (commit, subject), _ = votes.most_common(1)[0]
        return RelatedCommit(commit, subject, "wrote the lines the patch adds")
    touching = commits_touching(git, old, new, paths, 1)
    if touching:
        commit, _, subject = touching[0].partition(" ")
        return RelatedCommit(commit, subject, "changed the files the patch changes")
    return None


def _added_lines(diff: bytes) -> dict[str, list[str]]:
    """file → the non-blank lines the patch adds to it."""
    found: dict[str, list[str]] = {}
    current = None
    for raw in diff.decode("utf-8", "surrogateescape").splitlines():
        header = _FILE.match(raw)
        if header:
            current = header.group(1)
        elif current and raw.startswith("+") and raw[1:].strip():
            found.setdefault(current, []).append(raw[1:])
    return found
