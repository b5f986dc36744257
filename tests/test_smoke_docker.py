"""Smoke test: the Docker engine, reached as lifecycle reaches it, builds and runs an image
offline, as build and boot will."""

from __future__ import annotations

import os

import pytest

from lifecycle.dockerd import connect, timeouts
from tests.services import ScratchImage


@pytest.mark.docker
def test_scratch_image_runs_without_network(scratch_image: ScratchImage) -> None:
    client = connect(os.environ)
    try:
        assert client.api.timeout == timeouts(os.environ)[1]  # every later call is bounded
        container = client.containers.run(scratch_image.tag, detach=True, network_mode="none")
        try:
            result = container.wait(timeout=60)
            stdout = container.logs(stdout=True, stderr=False).decode()
        finally:
            container.remove(force=True)
    finally:
        client.close()
    assert result["StatusCode"] == 0
    assert stdout == scratch_image.stdout
