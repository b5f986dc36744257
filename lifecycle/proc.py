"""The one way lifecycle runs a subprocess: (rc, out, err); errors show command and output."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from lifecycle.errors import LifecycleError
from lifecycle.table import visible


@dataclass(frozen=True)
class Completed:
    """What a finished command returned."""

    rc: int
    out: str
    err: str
    silent: bool = False  # killed for saying nothing for `silence` seconds (run's argument)


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
    silence: float | None = None,
) -> Completed:
    """Run `cmd`; with `check`, a non-zero exit raises CommandFailed naming it and its output.

    `env` is laid over the inherited environment; `input` is written to the command's stdin.
    Output that is not valid UTF-8 round-trips through `surrogateescape`, so bytes a command
    printed (a diff of a Latin-1 file) can be fed to the next one as `input` unchanged.
    With `silence` (seconds), a command that writes nothing for that long is killed, with
    what it started, and comes back `silent` (never raised).
    """
    full_env = {**os.environ, **env} if env is not None else None
    if silence is not None:
        return _watched(list(cmd), cwd, full_env, silence)
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
        check=False,
        env=full_env,
        input=input,
    )
    done = Completed(proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        # The command's words (git's, quoting a ref, a path, a remote's message) and its
        # arguments are outside text: its lines are shown indented under lifecycle's, as a
        # hook's are, so none passes for a line of lifecycle's own.
        said = (proc.stderr or proc.stdout).strip().splitlines()
        lines = "".join(f"\n  {visible(line)}" for line in said)
        raise CommandFailed(f"{visible(' '.join(cmd))} exited {proc.returncode}:{lines}")
    return done


def _watched(
    cmd: list[str], cwd: Path | None, env: Mapping[str, str] | None, silence: float
) -> Completed:
    """`cmd` in a process group of its own, killed (the group: git's index-pack too) once
    neither stdout nor stderr has had a byte for `silence` seconds, or if we are interrupted."""
    process = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        process_group=0,
    )
    heard = [time.monotonic()]
    out: list[bytes] = []
    err: list[bytes] = []
    assert process.stdout is not None and process.stderr is not None
    readers = [
        threading.Thread(target=_drain, args=(pipe, into, heard), daemon=True)
        for pipe, into in ((process.stdout, out), (process.stderr, err))
    ]
    for reader in readers:
        reader.start()
    silent = False
    try:
        while process.poll() is None and not silent:
            quiet_for = time.monotonic() - heard[0]
            silent = quiet_for >= silence
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=min(1.0, max(0.01, silence - quiet_for)))
    finally:
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    for reader in readers:
        reader.join(timeout=5)  # killed, the group's pipes end at once
    text = (b"".join(out), b"".join(err))
    stdout, stderr = (part.decode("utf-8", "surrogateescape") for part in text)
    return Completed(process.returncode, stdout, stderr, silent)


def _drain(pipe: IO[bytes], into: list[bytes], heard: list[float]) -> None:
    with pipe:
        while chunk := os.read(pipe.fileno(), 1 << 16):  # what there is, as it comes
            into.append(chunk)
            heard[0] = time.monotonic()
