"""Connect to the Docker engine (imported lazily: `lifecycle --help` never loads the SDK).

Time limits, so that an engine that accepts connections and never answers costs seconds, not
the SDK's default minutes: the first contact (version and ping) must answer within
LIFECYCLE_DOCKER_CONNECT_TIMEOUT (default 15 s), every later API call within
LIFECYCLE_DOCKER_TIMEOUT (default 60 s). Streams whose silence is normal have none: a build's
output, a container's log followed to its end, waiting for a container to exit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lifecycle.errors import EnvironmentFailure
from lifecycle.limits import seconds_from

CONNECT_TIMEOUT_S = 15.0
API_TIMEOUT_S = 60.0


class DockerUnavailable(EnvironmentFailure):
    """No Docker engine answers where DOCKER_HOST (or the default socket) points."""


def timeouts(environ: Mapping[str, str]) -> tuple[float, float]:
    """(first contact, every later call) in seconds, from the environment or the defaults."""
    return (
        seconds_from(environ, "LIFECYCLE_DOCKER_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S),
        seconds_from(environ, "LIFECYCLE_DOCKER_TIMEOUT", API_TIMEOUT_S),
    )


def sdk_errors() -> tuple[type[Exception], ...]:
    """What the docker SDK raises when the engine is not there, does not answer or refuses."""
    # Its own errors (APIError, NotFound, TLSParameterError, and DockerException wrapping a
    # failed first contact), and requests' (ConnectionError, ReadTimeout...), which its calls
    # let through unwrapped; requests wraps urllib3's and the socket's.
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    return (DockerException, RequestException)


def connect(environ: Mapping[str, str]) -> Any:
    """A docker SDK client as the docker CLI would make it (DOCKER_HOST, DOCKER_TLS_VERIFY,
    DOCKER_CERT_PATH), checked with a ping; one line naming the endpoint when it fails."""
    import docker  # the SDK costs ~0.3 s to import; only verbs that talk to dockerd pay it

    first, later = timeouts(environ)
    where = environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(environment=dict(environ), timeout=first)
        client.ping()
    except sdk_errors() as exc:
        why = " ".join(str(exc).split())
        if "timed out" in why.lower():
            why = f"no answer within {first:g} s (LIFECYCLE_DOCKER_CONNECT_TIMEOUT)"
        raise DockerUnavailable(f"cannot reach the Docker engine at {where}: {why}") from None
    client.api.timeout = later
    return client
