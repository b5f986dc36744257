"""The demo engine's upstream: a real git repo with releases v0.1.0 and v0.2.0.

The first release is stored as its tree (`upstream/0.1.0/`), each later one as a patch on the
release before (`upstream/0.2.0.patch`), so every file is kept once and a release reads as
what changed. Author, committer and dates are fixed, so commit ids are the same on every
machine.

To change a later release, edit its tree and store it again as its patch:

    python3 -m lifecycle.demo.upstream 0.2.0 DIR   # DIR: the release's whole tree, edited

(`git archive v0.2.0` of a demo upstream repo gives the tree to start from.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lifecycle import proc

SOURCES = Path(__file__).resolve().parent / "upstream"
RELEASES = ("0.1.0", "0.2.0")
_DATES = {"0.1.0": "2026-09-01T12:00:00+00:00", "0.2.0": "2026-10-01T12:00:00+00:00"}
_IDENTITY = {"name": "Demo Upstream", "email": "upstream@demollm.invalid"}
_MADE_FROM = "lifecycle-sources-sha256"  # in the bare repo's dir, beside HEAD


def git(args: list[str], git_dir: Path, *, env: dict[str, str] | None = None) -> str:
    """Run git on `git_dir` without user or system config; its stdout (errors name the command)."""
    isolated = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **(env or {})}
    return proc.run(["git", f"--git-dir={git_dir}", *args], env=isolated).out


def _release_files(tree: Path) -> list[str]:
    """The files of one release tree, without tool caches (`__pycache__`, `.mypy_cache`, ...)."""
    files = (path.relative_to(tree) for path in tree.rglob("*") if path.is_file())
    return sorted(
        str(path)
        for path in files
        if not any(part.startswith((".", "__pycache__")) for part in path.parts)
    )


def _commit_release(git_dir: Path, version: str) -> None:
    first = SOURCES / RELEASES[0]
    date = _DATES[version]
    env = {
        "GIT_AUTHOR_NAME": _IDENTITY["name"],
        "GIT_AUTHOR_EMAIL": _IDENTITY["email"],
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": _IDENTITY["name"],
        "GIT_COMMITTER_EMAIL": _IDENTITY["email"],
        "GIT_COMMITTER_DATE": date,
    }
    # The first release's tree is the work tree: nothing is copied, nothing written into it.
    work = ["--work-tree", str(first)]
    if version == RELEASES[0]:
        git([*work, "read-tree", "--empty"], git_dir)
        git([*work, "add", "--", *_release_files(first)], git_dir)
    else:  # the index holds the release before; its patch moves the index alone on
        git([*work, "apply", "--cached", "--", str(SOURCES / f"{version}.patch")], git_dir)
    git([*work, "commit", "--quiet", "--no-verify", "-m", f"Release {version}"], git_dir, env=env)
    git(["tag", "-a", f"v{version}", "-m", f"demollm {version}"], git_dir, env=env)


def sources_digest() -> str:
    """sha256 over the release sources (0.1.0's files, the later patches): a repo made from
    other sources is stale."""
    digest = hashlib.sha256()
    first = SOURCES / RELEASES[0]
    for name in _release_files(first):
        digest.update(name.encode() + b"\0" + (first / name).read_bytes())
    for version in RELEASES[1:]:
        digest.update((SOURCES / f"{version}.patch").read_bytes())
    return digest.hexdigest()


def release_patch(version: str, tree: Path) -> str:
    """The patch that stores the release `version` whose whole tree is `tree`: the changes
    from the release before it (full index lines, as `git apply --cached` takes them), under
    the patch file's own first paragraph."""
    index = RELEASES.index(version)
    with tempfile.TemporaryDirectory(prefix="demo-upstream.") as repo_dir:
        repo = Path(repo_dir)
        git(["init", "--quiet", "--bare", "--initial-branch=main"], repo)
        for earlier in RELEASES[:index]:  # this release's own patch is the one being remade
            _commit_release(repo, earlier)
        git(["--work-tree", str(tree), "read-tree", "--empty"], repo)
        git(["--work-tree", str(tree), "add", "--", *_release_files(tree)], repo)
        after = git(["write-tree"], repo).strip()
        before = f"v{RELEASES[index - 1]}^{{tree}}"
        diff = git(["diff", "--full-index", "--no-renames", before, after], repo)
    header = (SOURCES / f"{version}.patch").read_text().split("\n\n", 1)[0]
    return f"{header}\n\n{diff}"


def has_releases(path: Path) -> bool:
    """Whether `path` is a git repo holding every release tag, made from today's sources."""
    if not (path / "HEAD").is_file():
        return False
    made_from = path / _MADE_FROM
    if not made_from.is_file() or made_from.read_text().strip() != sources_digest():
        return False
    tags = git(["tag", "--list", "v*"], path).split()
    return all(f"v{version}" in tags for version in RELEASES)


def ensure_upstream_repo(path: Path) -> Path:
    """A bare repo at `path` with one tagged commit per release, built once (atomically)."""
    if path.exists() and has_releases(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        git(["init", "--quiet", "--bare", "--initial-branch=main"], temp)
        for version in RELEASES:
            _commit_release(temp, version)
        (temp / _MADE_FROM).write_text(sources_digest() + "\n")
        if path.exists():  # an incomplete repo from an interrupted run
            shutil.rmtree(path)
        temp.rename(path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return path


if __name__ == "__main__":  # python3 -m lifecycle.demo.upstream VERSION TREE
    version, tree = sys.argv[1], Path(sys.argv[2])
    (SOURCES / f"{version}.patch").write_text(release_patch(version, tree))
