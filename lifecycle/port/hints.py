"""What upstream did where a patch stopped or came out empty: named, never a reason to drop.

A conflict's hint names, per file, the upstream commit that deleted it (and the file that
replaced it: a rename git finds at a low threshold, else what that commit added), added it,
or changed it. An EMPTIED patch names the upstream commit that wrote the lines it adds
(`git blame` over the lines of the new tree that equal them, where they occur once), else
the newest one that changed its files.
"""

from __future__ import annotations

import re
from collections import Counter

from lifecycle.port import history
from lifecycle.port.git import Git
from lifecycle.port.outcome import Conflict, ConflictKind, RelatedCommit

_FILE = re.compile(r"^\+\+\+ b/(.+)$")


def conflict_hint(git: Git, old: str, new: str, subdir: str, conflict: Conflict) -> str | None:
    """What upstream did to each conflicted file (repository paths), in one sentence."""
    prefix = f"{subdir}/"
    parts, changed = [], []
    for conflicted in conflict.files:
        path = conflicted.path
        name = path.removeprefix(prefix)
        kind = conflicted.kind
        deleted = kind is ConflictKind.MODIFY_DELETE and history.last_change(
            git, old, new, path, "D"
        )
        added = kind is ConflictKind.ADD_ADD and history.last_change(git, old, new, path, "A")
        if deleted:
            commit, subject = deleted
            after = history.successors(git, commit, path, prefix)
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
    touching = history.commits_touching(git, old, new, changed, 3)
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
        votes.update(history.blame(git, old, new, path, once))
    if votes:
        (commit, subject), _ = votes.most_common(1)[0]
        return RelatedCommit(commit, subject, "wrote the lines the patch adds")
    touching = history.commits_touching(git, old, new, paths, 1)
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
