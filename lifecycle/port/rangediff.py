"""The old series against the new, as `git range-diff` shows them, patches that left named.

A patch that came out empty (EMPTIED, or resolved to no change) is an empty commit in the
replay; given to range-diff as it is, it shows as a new commit of the new series beside the
old one shown as gone. So the new series is given without its empty commits: when there are
any, the commits after the first are re-made (`commit-tree`, same trees and messages, the
scratch repository's fixed identity) on a chain without them. Every patch shown as gone
(`<`) then gets its outcome after its name, e.g. `(DROPPED_UPSTREAM)`.
"""

from __future__ import annotations

import re

from lifecycle.port.git import Git

EMPTY_SERIES = "(the new series is empty: every patch left it, for the reasons above)\n"
_GONE = re.compile(r"^(\s*\d+:\s+[0-9a-f]+ < -:\s+-+ )(.+)$", re.MULTILINE)


def range_diff(git: Git, old_base: str, old_tip: str, new_base: str, new_tip: str) -> str:
    """`git range-diff` of the two series, the new one without its empty commits."""
    tip = without_empty(git, new_base, new_tip)
    if tip == new_base:
        return EMPTY_SERIES
    return git.out("range-diff", "--no-color", f"{old_base}..{old_tip}", f"{new_base}..{tip}")


def without_empty(git: Git, base: str, tip: str) -> str:
    """The tip of a chain on `base` holding `base..tip`'s non-empty commits, in order."""
    # One listing, `base` included as the boundary (`-`) for the tree the first commit follows.
    listed = git.out("log", "--boundary", "--reverse", "--format=%m %H %T", f"{base}..{tip}")
    rows = [line.split() for line in listed.splitlines()]
    previous = next((tree for mark, _, tree in rows if mark == "-"), None)
    if previous is None:
        return tip  # nothing between them
    parent, remade = base, False
    for _, commit, tree in (row for row in rows if row[0] != "-"):
        if tree == previous:
            remade = True  # empty: every commit after it needs a new parent
            continue
        if remade:
            message = git.out("log", "-1", "--format=%B", commit)
            parent = git.out("commit-tree", tree, "-p", parent, input=message).strip()
        else:
            parent = commit
        previous = tree
    return parent


def annotate(text: str, outcomes: dict[str, str]) -> str:
    """Each patch shown as gone gets its outcome after its name (the commit's subject)."""

    def named(match: re.Match[str]) -> str:
        outcome = outcomes.get(match.group(2))
        return f"{match.group(0)} ({outcome})" if outcome else match.group(0)

    return _GONE.sub(named, text)
