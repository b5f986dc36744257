"""Replay, don't fuzz: the old series as commits on the old tag, then moved by git's 3-way merge.

Paths: a patch is written relative to the engine's package dir (it is applied with
`patch -p1` inside `engine.package_dir`), and that directory's basename is the subdirectory
of the upstream tree the package comes from: `/usr/.../dist-packages/vllm` → `vllm/`,
`.../demollm` → `demollm/`. So `a/serve.py` here is `demollm/serve.py` upstream; `git am
--directory` adds the prefix on the way in, and the export takes it off again.

Step 1, `git am` on the old tag, applies with no fuzz (exact context, like the build): if a
patch fails there, the series itself is broken, and the error names it. Step 2 cherry-picks
the commits onto the new tag in one `git cherry-pick` (merge-ort: 3-way, rename-aware), which
stops at a conflict and leaves the worktree to resolve in, like git.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from lifecycle.errors import AnswerNo, LifecycleError
from lifecycle.port.git import Git
from lifecycle.port.outcome import Conflict, ConflictedFile, ConflictKind

TRAILER = "Lifecycle-Patch"
# The mbox line of a mail made here: the zero commit (a commit id it would name exists on no
# one else's machine).
ZERO_MBOX = b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
_CONFLICT = re.compile(r"^CONFLICT \(([^)]+)\): (.*)$", re.MULTILINE)
_BINARY = re.compile(r"Cannot merge binary files: (.+?) \(", re.MULTILINE)
_MARKERS = ("<<<<<<< ", ">>>>>>> ", "||||||| ")
_PATHS = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)


@dataclass(frozen=True)
class SeriesPatch:
    """One patch to replay: its position in the series, manifest path and file on disk."""

    index: int
    file: str  # as the manifest names it
    path: Path
    # From the manifest, both only explain a drop; the replay alone decides one.
    upstream_commit: str | None = None  # the upstream commit said to land this change
    drop_when: str | None = None  # prose: when the patch may go


@dataclass(frozen=True)
class Stop:
    """The cherry-pick stopped on patch `index`, with HEAD at `head` before it."""

    index: int
    conflict: Conflict
    head: str


def make_scratch(mirror: Path, dest: Path) -> Git:
    """A repository borrowing the mirror's objects (git alternates: nothing is copied), with no
    refs of its own (the port names every commit by its id), and an empty sparse checkout.

    Sparse: a checkout of vLLM is thousands of files the replay never reads. git writes a file
    into the worktree only when it must (`git am` materializes what it patches, a conflict is
    written out); the merge itself works on trees. A port that stops for a person calls
    `sparse-checkout disable` first, so the conflict is resolved in an ordinary worktree.
    """
    git = Git.scratch(dest)
    Git.scratch(dest.parent).run("init", "--quiet", "--initial-branch=port", str(dest))
    (dest / ".git" / "objects" / "info" / "alternates").write_text(
        f"{(mirror / 'objects').resolve()}\n"
    )
    # Editor leftovers of a resolution must not become part of the patch (`add -A` on continue).
    (dest / ".git" / "info").mkdir(exist_ok=True)
    (dest / ".git" / "info" / "exclude").write_text("*.orig\n*.rej\n*~\n")
    (dest / ".git" / "info" / "sparse-checkout").write_text("/.lifecycle-port-nothing\n")
    git.run("config", "core.sparseCheckout", "true")
    return git


def series_key(old_commit: str, subdir: str, patches: list[SeriesPatch]) -> str:
    """What the old series' commits are a function of; they are kept in the mirror under it.

    The commits themselves are deterministic (fixed identity and dates), so the cache only
    saves `git am`: a port finds exactly the commits it would have made.
    """
    digest = hashlib.sha256(f"lifecycle-port-series-v1\0{old_commit}\0{subdir}\0".encode())
    for patch in patches:
        content = patch.path.read_bytes()
        digest.update(f"{patch.index}\0{patch.file}\0{len(content)}\0".encode() + content)
    return digest.hexdigest()


def apply_series(git: Git, old_commit: str, subdir: str, patches: list[SeriesPatch]) -> list[str]:
    """Commit each patch on the old release with no fuzz; the commits, in order."""
    git.run("checkout", "--quiet", "--detach", old_commit)
    if git.run("cat-file", "-e", f"{old_commit}:{subdir}", check=False).rc != 0:
        raise LifecycleError(
            f"the upstream tree has no {subdir}/ directory: the basename of engine.package_dir "
            "names the package's directory in the upstream repository"
        )
    if not patches:
        return []
    mbox = git.cwd / ".git" / "lifecycle-series.mbox"
    mbox.write_bytes(b"".join(_message(p) for p in patches))
    done = git.run(
        "am",
        "--quiet",
        "--keep-cr",
        "--patch-format=mboxrd",
        "--whitespace=nowarn",
        f"--directory={subdir}",
        str(mbox),
        check=False,
    )
    mbox.unlink()
    if done.rc != 0:
        failed = _am_failed_patch(git, patches)
        git.run("am", "--abort", check=False)
        _refuse_repository_paths(failed, subdir)
        output = "\n".join(f"  {line}" for line in (done.err or done.out).strip().splitlines())
        raise LifecycleError(
            f"{failed.file} does not apply (fuzz 0) to the old release: the series is broken "
            f"before any port; fix the patch first\n{output}"
        )
    commits = git.out("rev-list", "--reverse", f"{old_commit}..HEAD").split()
    if len(commits) != len(patches):
        raise LifecycleError(f"git am made {len(commits)} commits for {len(patches)} patches")
    return commits


def cherry_pick(
    git: Git, commits: list[str], by_commit: dict[str, int], *, keep_going: bool
) -> list[Stop]:
    """Move `commits` onto HEAD; the stops (every one with `keep_going`, else the first)."""
    if not commits:
        return []
    done = git.run(
        "cherry-pick", "--keep-redundant-commits", "--allow-empty", *commits, check=False
    )
    return follow(git, done.out + done.err, done.rc, by_commit, keep_going=keep_going)


def follow(
    git: Git, output: str, rc: int, by_commit: dict[str, int], *, keep_going: bool
) -> list[Stop]:
    """After a cherry-pick command: record where it stopped; with `keep_going` skip and go on."""
    stops: list[Stop] = []
    while rc != 0:
        stopped = git.commit_of("CHERRY_PICK_HEAD")
        if stopped is None or stopped not in by_commit:
            raise LifecycleError(f"git cherry-pick stopped without a conflict:\n{output.strip()}")
        head = git.out("rev-parse", "HEAD").strip()
        stops.append(Stop(by_commit[stopped], read_conflict(git, output), head))
        if not keep_going:
            break
        done = git.run("cherry-pick", "--skip", check=False)
        output, rc = done.out + done.err, done.rc
    return stops


def restart_at(git: Git, stop: Stop, commits: list[str], by_commit: dict[str, int]) -> Stop:
    """Put the worktree back at the first conflict after a --keep-going survey."""
    git.run("reset", "--quiet", "--hard", stop.head)
    rest = [c for c in commits if by_commit[c] >= stop.index]
    stops = cherry_pick(git, rest, by_commit, keep_going=False)
    if not stops or stops[0].index != stop.index:
        raise LifecycleError("replaying to the first conflict did not stop where the survey did")
    return stops[0]


def resume(git: Git, by_commit: dict[str, int]) -> list[Stop]:
    """Take the worktree as the resolution of the stop it is at and go on; the next stop."""
    left = markers_left(git)
    if left:
        raise AnswerNo("\n".join(["conflict markers are still in the worktree:", *left]))
    git.run("add", "--all")
    picking = git.commit_of("CHERRY_PICK_HEAD")
    if picking and git.run("diff", "--cached", "--quiet", "HEAD", check=False).rc == 0:
        # Resolved to "no change": git will not commit an empty pick on --continue.
        git.run("commit", "--quiet", "--allow-empty", "--no-verify", "-C", picking)
    if not (git.cwd / ".git" / "sequencer").is_dir() and not git.commit_of("CHERRY_PICK_HEAD"):
        return []  # nothing left to pick (or the person finished it in the worktree)
    editor = git.with_env(GIT_EDITOR="true")
    done = editor.run("cherry-pick", "--continue", check=False)
    return follow(git, done.out + done.err, done.rc, by_commit, keep_going=False)


def read_conflict(git: Git, output: str) -> Conflict:
    """The unmerged files and their kinds, from the index stages and git's messages (`output`,
    "" for a stop found in the worktree: then a binary file is told by its staged contents)."""
    stages: dict[str, set[int]] = {}
    blobs: dict[str, list[str]] = {}
    for line in git.out("ls-files", "--unmerged", "-z").split("\0"):
        if line:
            info, path = line.split("\t", 1)
            _, blob, stage = info.split()
            stages.setdefault(path, set()).add(int(stage))
            blobs.setdefault(path, []).append(blob)
    binary = set(_BINARY.findall(output))
    if not output:
        binary = {path for path, ids in blobs.items() if any(_is_binary(git, b) for b in ids)}
    renamed = {m.group(2) for m in _CONFLICT.finditer(output) if "rename" in m.group(1)}
    files = []
    for path, present in sorted(stages.items()):
        files.append(ConflictedFile(path, _kind(path, present, binary, renamed)))
    for label, message in _CONFLICT.findall(output):
        if "rename" in label and not files:
            files.append(ConflictedFile(message.split(" ", 1)[0], ConflictKind.RENAME))
    return Conflict(tuple(files))


def _is_binary(git: Git, blob: str) -> bool:
    # git's own test (the one that made it refuse to merge the file): a NUL in the first 8000 bytes
    content = git.out("cat-file", "blob", blob).encode("utf-8", "surrogateescape")
    return b"\0" in content[:8000]


def _kind(path: str, stages: set[int], binary: set[str], renamed: set[str]) -> ConflictKind:
    if path in binary:
        return ConflictKind.BINARY
    if any(path in message for message in renamed):
        return ConflictKind.RENAME
    if stages == {2, 3}:
        return ConflictKind.ADD_ADD
    if stages in ({1, 2}, {1, 3}):
        return ConflictKind.MODIFY_DELETE
    if len(stages) == 1:
        return ConflictKind.FILE_DIRECTORY
    return ConflictKind.CONTENT


def markers_left(git: Git) -> list[str]:
    """`path:line: marker` for the first conflict marker of each file `git add --all` would
    stage: any file, not only the stop's (git may have gone on to another patch's conflict)."""
    changed = git.out("diff", "--name-only", "-z", "HEAD").split("\0")
    untracked = git.out("ls-files", "--others", "--exclude-standard", "-z").split("\0")
    left = []
    for name in sorted(set(filter(None, changed + untracked))):
        path = git.cwd / name
        if path.is_symlink() or not path.is_file():
            continue
        content = path.read_bytes()
        if b"\0" in content[:8000]:
            continue  # binary, by git's own test: git writes no markers into one
        for number, line in enumerate(content.decode("utf-8", "replace").splitlines(), start=1):
            if line.startswith(_MARKERS):
                left.append(f"{path}:{number}: {line.rstrip()}")
                break
    return left


def _message(patch: SeriesPatch) -> bytes:
    # The whole file goes below the `---`, so git apply gets it all and skips whatever is
    # above its first diff (a mail's own headers, message and diffstat): the scratch commits
    # are named by the series position, and the file's message is kept by the export.
    # mboxrd: a body line that looks like a message boundary gets one more '>', and git am
    # (--patch-format=mboxrd) takes it off again; the patch reaches git apply byte for byte.
    body = patch.path.read_bytes()
    if body and not body.endswith(b"\n"):
        body += b"\n"
    escaped = re.sub(rb"(?m)^(>*From )", rb">\1", body)
    header = (
        "From: lifecycle port <port@lifecycle.invalid>\n"
        + "Date: Sat, 1 Jan 2000 00:00:00 +0000\n"
        + f"Subject: [PATCH] {patch.file}\n\n{TRAILER}: {patch.index}\n---\n"
    )
    return ZERO_MBOX + header.encode() + escaped + b"\n"


def _refuse_repository_paths(patch: SeriesPatch, subdir: str) -> None:
    """Say so when a patch that failed names its files from the repository's top."""
    paths = _PATHS.findall(patch.path.read_bytes().decode("utf-8", "surrogateescape"))
    prefix = f"{subdir}/"
    if paths and all(path.startswith(prefix) for path in paths):
        first = paths[0].removeprefix(prefix)
        raise LifecycleError(
            f"{patch.file} does not apply to the old release: its paths start with {prefix} "
            f"(the upstream repository's layout), but patch paths are relative to "
            f"engine.package_dir, whose basename is {subdir}: write a/{first}, not "
            f"a/{prefix}{first} (e.g. `git diff --relative={prefix}`)"
        )


def _am_failed_patch(git: Git, patches: list[SeriesPatch]) -> SeriesPatch:
    next_file = git.cwd / ".git" / "rebase-apply" / "next"
    number = int(next_file.read_text()) if next_file.is_file() else 1
    return patches[min(max(number, 1), len(patches)) - 1]
