"""The one way lifecycle runs a subprocess: (rc, out, err); errors show command and output."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lifecycle.errors import LifecycleError


@dataclass(frozen=True)
class Completed:
    """What a finished command returned."""

    rc: int
    out: str
    err: str


class CommandFailed(LifecycleError):
    """A command lifecycle relies on exited non-zero."""

    exit_code = 1


def run(
    cmd: Sequence[str],
    cwd: Path | None = None,
    *,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> Completed:
    """Run `cmd`; with `check`, a non-zero exit raises CommandFailed naming it and its output.

    `env` is laid over the inherited environment; `input` is written to the command's stdin.
    Output that is not valid UTF-8 round-trips through `surrogateescape`, so bytes a command
    printed (a diff of a Latin-1 file) can be fed to the next one as `input` unchanged.
    """
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
        check=False,
        env={**os.environ, **env} if env is not None else None,
        input=input,
    )
    done = Completed(proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        output = (proc.stderr or proc.stdout).strip()
        raise CommandFailed(f"{' '.join(cmd)} exited {proc.returncode}: {output}")
    return done
