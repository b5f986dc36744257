"""The one way lifecycle runs a subprocess: (rc, out, err); errors show command and output."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
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


def run(cmd: Sequence[str], cwd: Path | None = None, *, check: bool = True) -> Completed:
    """Run `cmd`; with `check`, a non-zero exit raises CommandFailed naming it and its output."""
    proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)
    done = Completed(proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        output = (proc.stderr or proc.stdout).strip()
        raise CommandFailed(f"{' '.join(cmd)} exited {proc.returncode}: {output}")
    return done
