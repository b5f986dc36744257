"""BLOCKED_BY, proven: a patch that failed only because an earlier one could not go in.

In a `--keep-going` survey a patch that conflicts has been tried without every earlier
conflicting patch (they were skipped). It is BLOCKED_BY an earlier one only if forcing that
one in makes it apply: the earlier patch is merged onto the tree the later one failed on,
each of its conflicts settled in the patch's favour (`git merge-file --theirs`; a file it
deletes, deleted; one it adds or keeps, its version), and the later patch is test-merged
onto that tree. Otherwise it is a CONFLICT of its own. Nothing touches the worktree: every
merge is `git merge-tree --write-tree` of commits made for the purpose (`commit-tree`) and
the forced tree is built in a scratch index. Only earlier patches that share a file with the
later one are tried, nearest first: forcing in one that does not cannot change the merge.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lifecycle.port.git import Git


def blocker(git: Git, commit: str, head: str, earlier: list[tuple[str, str]]) -> str | None:
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
