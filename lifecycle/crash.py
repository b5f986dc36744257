"""Where an unexpected error's traceback goes: a file, redacted, never the terminal.

A traceback on a release engineer's terminal is noise at best and, at worst, carries a
credential out of a frame's locals or an exception message. The CLI prints one line naming
the file written here; `--debug` prints the traceback instead.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from lifecycle.home import Home
from lifecycle.redact import is_sensitive_key, redact

# Values in the CLI's own environment that are secrets whatever the text around them says.
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN")


# The names of the secrets this process was handed by name (a profile's `secrets`, any a boot
# on this host was passed): whatever their names look like, their values are masked in every
# line it prints and every traceback it writes, as the well-known ones are.
_HANDED: set[str] = set()


def handed_secrets(names: Iterable[str]) -> None:
    """Mask these variables' values from now on, whatever their names (known_secrets)."""
    _HANDED.update(names)


def known_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The credentials this process holds in its environment, by name: the well-known ones,
    those it was handed by name, and every variable whose name says it is one (`*_TOKEN`,
    `*_SECRET*`, `*_PASSWORD`, …)."""
    return {
        name: value
        for name, value in environ.items()
        if value and (name in SECRET_ENV or name in _HANDED or is_sensitive_key(name))
    }


def write_traceback(exc: BaseException, home: Home, environ: Mapping[str, str]) -> Path:
    """Write `exc`'s traceback, redacted, under the home's `crashes/` (else the temp dir)."""
    text = "".join(traceback.format_exception(exc))
    body = redact(text, known_secrets(environ)).encode()
    name = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}.txt"
    for directory in (home.crashes, Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / (name if directory.name == "crashes" else f"lifecycle-crash-{name}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(body)
            return path
        except OSError:
            continue
    raise OSError("no writable directory for the traceback")
