"""Commit the port onto `port/<version>` without touching the user's checkout, index or branch.

Everything goes through a temporary index file (GIT_INDEX_FILE): read the base commit's tree,
replace one directory, write the tree, `commit-tree`, then `update-ref` creating the branch
(it must not exist yet: the old value given to update-ref is the null id). The work tree, the
real index and HEAD are never read for writing; blobs are stored with `--no-filters`, so the
repository's attributes cannot rewrite the patch bytes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from lifecycle.errors import LifecycleError
from lifecycle.port.git import SCRATCH_IDENTITY, Git

# The scratch commits' identity, but not their fixed date: the branch commit is made now.
_FALLBACK_IDENTITY = {k: v for k, v in SCRATCH_IDENTITY.items() if not k.endswith("_DATE")}


@dataclass(frozen=True)
class Repository:
    """The git repository holding manifests/: its top level and the commit HEAD names."""

    root: Path
    head: str | None  # None in a repository with no commit yet


def find_repository(directory: Path) -> Repository | None:
    """The repository `directory` is in, or None."""
    git = Git.user(directory)
    top = git.run("rev-parse", "--show-toplevel", check=False)
    if top.rc != 0:
        return None
    root = Path(top.out.strip())
    return Repository(root, Git.user(root).commit_of("HEAD"))


def in_repository(repo: Repository, path: Path) -> str | None:
    """`path` as a path inside the repository, or None when it is outside."""
    resolved, root = path.resolve(), repo.root.resolve()
    return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else None


def head_entries(repo: Repository, paths: list[Path]) -> dict[str, str]:
    """Repository path → object id at HEAD, for those of `paths` HEAD has (files or trees)."""
    names = [name for name in (in_repository(repo, p) for p in paths) if name is not None]
    if repo.head is None or not names:
        return {}
    listed = Git.user(repo.root).out("ls-tree", "-z", repo.head, "--", *names)
    entries = {}
    for entry in listed.split("\0"):
        if entry:
            info, name = entry.split("\t", 1)
            entries[name] = info.split()[2]
    return entries


def differs_from(repo: Repository, committed: dict[str, str], files: list[Path]) -> list[str]:
    """Which of `files` (as repository paths, sorted) HEAD (`committed`, from head_entries)
    lacks or holds other bytes of. Bytes as they are on disk (`--no-filters`): what the port
    reads is what is compared."""
    inside: dict[str, Path] = {}
    outside = []
    for file in files:
        name = in_repository(repo, file)
        if name is None:
            outside.append(str(file.resolve()))
        else:
            inside[name] = file.resolve()
    names = sorted(inside)
    if not names:
        return sorted(outside)
    paths = "".join(f"{inside[name]}\n" for name in names)
    git = Git.user(repo.root)
    blobs = git.out("hash-object", "--no-filters", "--stdin-paths", input=paths).split()
    changed = [n for n, blob in zip(names, blobs, strict=True) if committed.get(n) != blob]
    return sorted([*changed, *outside])


def commit_files(
    repo: Repository,
    branch: str,
    base: str | None,
    directory: str,
    files: dict[str, bytes],
    message: str,
) -> str:
    """Commit `base`'s tree with `directory` replaced by `files` (paths inside the repository)
    onto the new branch `branch`; the new commit's id."""
    git = Git.user(repo.root)
    with tempfile.TemporaryDirectory(prefix="lifecycle-port-branch-") as temp:
        indexed = git.with_env(GIT_INDEX_FILE=str(Path(temp) / "index"))
        indexed.run("read-tree", *([base] if base else ["--empty"]))
        indexed.run("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", directory)
        staged = Path(temp) / "files"
        paths = []
        for number, content in enumerate(files.values()):
            path = staged / str(number)
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(content)
            paths.append(str(path))
        blobs = indexed.out(
            "hash-object", "-w", "--no-filters", "--stdin-paths", input="\n".join(paths) + "\n"
        ).split()
        entries = "".join(
            f"100644 {blob}\t{name}\n" for name, blob in zip(files, blobs, strict=True)
        )
        indexed.run("update-index", "--add", "--index-info", input=entries)
        tree = indexed.out("write-tree").strip()
    parents = ["-p", base] if base else []
    made = git.run("commit-tree", "--no-gpg-sign", tree, *parents, input=message, check=False)
    if made.rc != 0:  # most likely no user.name/user.email here: commit as the tool
        made = git.with_env(**_FALLBACK_IDENTITY).run(
            "commit-tree", "--no-gpg-sign", tree, *parents, input=message
        )
    commit = made.out.strip()
    updated = git.run(
        "update-ref",
        "-m",
        "lifecycle port",
        f"refs/heads/{branch}",
        commit,
        "0" * len(commit),
        check=False,
    )
    if updated.rc != 0:
        raise LifecycleError(f"could not create branch {branch}: {updated.err.strip()}")
    return commit
