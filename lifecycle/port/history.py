"""What upstream history says about a patch: patch-ids, ancestry, reverse-apply, renames.

Each function answers one question with git and returns evidence (commit ids), so a report can
say which method fired. None of them decides a drop alone: `classify` does, by the rules there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lifecycle.port.git import Git

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
    out = git.out("diff", "-M", "--name-status", "-z", "--diff-filter=R", old, new)
    fields = out.split("\0")
    moved = {}
    for at in range(0, len(fields) - 2, 3):
        status, source, target = fields[at : at + 3]
        if status.startswith("R") and source in paths:
            moved[source] = target
    return moved


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
    out = git.out("diff", "--name-status", "-z", "--find-renames=20%", f"{commit}^", commit)
    fields = out.split("\0")
    renamed, added = [], []
    at = 0
    while at < len(fields) - 1:
        status = fields[at]
        if status.startswith(("R", "C")):
            source, target = fields[at + 1], fields[at + 2]
            if source == path:
                renamed.append((target, int(status[1:] or 0)))
            at += 3
            continue
        if status == "A" and fields[at + 1].startswith(under):
            added.append((fields[at + 1], 0))
        at += 2
    return renamed or added


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
