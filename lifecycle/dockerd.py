"""Connect to the Docker engine (imported lazily: `lifecycle --help` never loads the SDK), within
time limits read from the environment (`seconds_from`; docs/time-limits.md lists them): an
engine that accepts connections and never answers costs seconds, not the SDK's minutes."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lifecycle.errors import EnvironmentFailure, LifecycleError
from lifecycle.table import visible

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
    # let through unwrapped; requests wraps urllib3's and the socket's, but a stream the SDK
    # reads itself (a push's progress) lets urllib3's through.
    from docker.errors import DockerException
    from requests.exceptions import RequestException
    from urllib3.exceptions import HTTPError

    return (DockerException, RequestException, HTTPError)


def dockerd_said(exc: BaseException) -> str:
    """What dockerd said of a call it refused (its explanation, else the SDK's error), as one
    line: its words are outside text, and often echo what it was sent (a reference, a path), so
    a newline in them would start a line of stderr that passes for lifecycle's own."""
    return visible(str(getattr(exc, "explanation", None) or exc))


def transport_errors() -> tuple[type[Exception], ...]:
    """What the docker SDK raises when dockerd stopped answering or the connection to it
    broke mid-command: the environment, whatever the call (dockerd's refusals are not)."""
    from requests import exceptions as http
    from urllib3.exceptions import HTTPError

    return (http.ConnectionError, http.Timeout, HTTPError)


def stopped_answering(exc: BaseException, environ: Mapping[str, str]) -> str | None:
    """One line when `exc` is dockerd no longer answering a command it answered at first
    contact (`transport_errors`); None for anything else, and when the SDK was never loaded."""
    if "docker" not in sys.modules or not isinstance(exc, transport_errors()):
        return None
    _, later = timeouts(environ)
    why = " ".join(str(exc).split())[:200]
    return (
        f"the Docker engine at {where_docker(environ)} stopped answering: {why} (each call"
        f" waits at most {later:g} s, LIFECYCLE_DOCKER_TIMEOUT)"
    )


def where_docker(environ: Mapping[str, str]) -> str:
    """The endpoint the SDK talks to, as the docker CLI would."""
    return environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(environ: Mapping[str, str]) -> Any:
    """A docker SDK client as the docker CLI would make it (DOCKER_HOST, DOCKER_TLS_VERIFY,
    DOCKER_CERT_PATH), checked with a ping; one line naming the endpoint when it fails."""
    import docker  # the SDK costs ~0.3 s to import; only verbs that talk to dockerd pay it
    from docker.constants import MINIMUM_DOCKER_API_VERSION

    first, later = timeouts(environ)
    where = where_docker(environ)
    try:
        # Made with any version the SDK accepts (no call yet), then given dockerd's own.
        oldest = MINIMUM_DOCKER_API_VERSION
        client = docker.from_env(environment=dict(environ), timeout=first, version=oldest)
        client.api._version = _api_version(client)  # the SDK has no setter for it
    except sdk_errors() as exc:
        why = " ".join(str(exc).split())
        if "timed out" in why.lower():
            why = f"no answer within {first:g} s (LIFECYCLE_DOCKER_CONNECT_TIMEOUT)"
        raise DockerUnavailable(f"cannot reach the Docker engine at {where}: {why}") from None
    client.api.timeout = later
    return client


def _api_version(client: Any) -> str:
    """The API version dockerd speaks, from the header of its ping, as the docker CLI reads it;
    the ping is also the first contact's check. (The SDK's own way, GET /version, waits on
    containerd's versions too: ~6 ms, a fifth of what a boot asks dockerd before the engine
    starts.) A server whose ping names none is asked /version."""
    # A requests call of the SDK's session: the SDK's timeout is only on the SDK's own calls.
    answer = client.api.head(f"{client.api.base_url}/_ping", timeout=client.api.timeout)
    answer.raise_for_status()
    named = answer.headers.get("Api-Version")
    return str(named or client.api.version(api_version=False)["ApiVersion"])


AS_ROOT_TIMEOUT_S = 3600  # a chown or removal of tens of thousands of files: seconds to minutes


def as_root(
    client: Any, image_id: str, argv: Sequence[str], dirs: Mapping[str, Path], task: str
) -> str | None:
    """Run `argv` to its end as root in a container of `image_id` (the engine image that wrote
    the files), with only `dirs` (container path -> host dir) mounted and no network; None
    when it exited 0, else why not. What lifecycle's own user may not do to an engine's files
    (one running as root wrote them), dockerd, which ran the engine, can."""
    from docker.errors import ImageNotFound
    from docker.types import Mount

    mounts = [Mount(to, os.path.realpath(host), type="bind") for to, host in dirs.items()]
    try:
        container = client.containers.create(
            image_id,
            list(argv),
            entrypoint=[],  # the engine's own would start the engine
            user="0:0",
            network_mode="none",
            mounts=mounts,
            labels={"lifecycle.task": task},
        )
    except ImageNotFound:
        return f"its engine image {image_id[:19]} is no longer on this Docker engine"
    except sdk_errors() as exc:
        return f"dockerd could not run a container to {task}: {dockerd_said(exc)}"
    try:
        container.start()
        code = int(container.wait(timeout=AS_ROOT_TIMEOUT_S)["StatusCode"])
        # The program's own words: a newline in them starts no line of lifecycle's.
        said = visible(container.logs(tail=3).decode(errors="replace").strip()) if code else ""
    except sdk_errors() as exc:
        return f"dockerd could not {task}: {dockerd_said(exc)}"
    finally:
        with contextlib.suppress(*sdk_errors()):  # stopped and labelled: harmless if it stays
            container.remove(force=True)
    return f"`{argv[0]}` to {task} exited {code} in a container: {said}" if code else None


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
