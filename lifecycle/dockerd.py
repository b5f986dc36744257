"""Connect to the Docker engine (imported lazily: `lifecycle --help` never loads the SDK)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lifecycle.errors import LifecycleError


class DockerUnavailable(LifecycleError):
    """No Docker engine answers where DOCKER_HOST (or the default socket) points."""

    exit_code = 1


def connect(environ: Mapping[str, str]) -> Any:
    """A docker SDK client for DOCKER_HOST (default: the local socket), checked with a ping."""
    import docker  # the SDK costs ~0.3 s to import; only verbs that talk to dockerd pay it

    where = environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.DockerClient(base_url=where, timeout=600)
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types for "not there"
        raise DockerUnavailable(f"cannot reach the Docker engine at {where}: {exc}") from None
    return client
