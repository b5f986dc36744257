"""git for a port: one runner per repository, through `lifecycle.proc`, with its settings pinned.

The repositories a port creates (the mirror, the scratch clone) run without the user's or the
system's git config: a `diff.algorithm`, `merge.conflictStyle` or `core.autocrlf` set in
`~/.gitconfig` would otherwise change what a port computes and exports. The user's own
repository (where the port branch goes) keeps its config, for identity and object format.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from lifecycle import proc
from lifecycle.proc import Completed

# Internal commits get a fixed identity and date, so the same port makes the same commit ids
# (and so the same range-diff) on every machine.
SCRATCH_IDENTITY = {
    "GIT_AUTHOR_NAME": "lifecycle port",
    "GIT_AUTHOR_EMAIL": "port@lifecycle.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "lifecycle port",
    "GIT_COMMITTER_EMAIL": "port@lifecycle.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}

# English messages (conflict kinds are read from them), no prompts, no pager.
_ALWAYS = {"LC_ALL": "C", "LANGUAGE": "", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat"}
_NEUTRAL = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **_ALWAYS}

# Settings the port's own repositories run with, whatever git's defaults become.
_PINNED_CONFIG = (
    "core.quotePath=true",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.abbrev=12",
    "core.logAllRefUpdates=false",
    "diff.renames=true",
    "merge.renames=true",
    "merge.conflictStyle=zdiff3",
    "rerere.enabled=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "commit.gpgSign=false",
    "user.useConfigOnly=false",
    # The scratch checkout is sparse and empty on purpose (replay.make_scratch): without this,
    # git lstat()s every skipped file of the tree at every step, looking for stray copies.
    "sparse.expectFilesOutsideOfPatterns=true",
)


@dataclass(frozen=True)
class Git:
    """Runs `git` in `cwd`; `env` is laid over the environment of every command."""

    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)
    config: tuple[str, ...] = ()

    @classmethod
    def scratch(cls, cwd: Path) -> Git:
        """A runner for a repository the port owns: neutral config, pinned settings, fixed
        identity."""
        return cls(cwd, {**_NEUTRAL, **SCRATCH_IDENTITY}, _PINNED_CONFIG)

    @classmethod
    def user(cls, cwd: Path) -> Git:
        """A runner for the user's repository: their config, English messages."""
        return cls(cwd, dict(_ALWAYS))

    def at(self, cwd: Path) -> Git:
        """The same settings in another directory."""
        return replace(self, cwd=cwd)

    def with_env(self, **env: str) -> Git:
        """The same runner with more environment (GIT_INDEX_FILE, GIT_EDITOR, ...)."""
        return replace(self, env={**self.env, **env})

    def run(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        silence: float | None = None,
    ) -> Completed:
        """`git ARGS`; with `check`, a failure raises CommandFailed with git's output; with
        `silence`, killed after that many seconds without output (`proc.run`)."""
        config = [part for item in self.config for part in ("-c", item)]
        argv = ["git", *config, *args]
        return proc.run(argv, self.cwd, check=check, env=self.env, input=input, silence=silence)

    def out(self, *args: str, input: str | None = None) -> str:
        """The stdout of `git ARGS`, which must succeed."""
        return self.run(*args, input=input).out

    def commit_of(self, rev: str) -> str | None:
        """The full id of the commit `rev` names, or None."""
        done = self.run("rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False)
        return done.out.strip() if done.rc == 0 else None
