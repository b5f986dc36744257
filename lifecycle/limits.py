"""Time limits a user may set in the environment (LIFECYCLE_DOCKER_TIMEOUT, …)."""

from __future__ import annotations

from collections.abc import Mapping

from lifecycle.errors import LifecycleError


def seconds_from(environ: Mapping[str, str], name: str, default: float) -> float:
    """A time limit from the environment variable `name`, else `default`; nonsense is refused."""
    text = environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 86400:
        raise LifecycleError(f"{name}={text!r}: expected a number of seconds, e.g. 30")
    return value
