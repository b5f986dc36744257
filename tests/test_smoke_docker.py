"""Smoke test: the Docker engine builds and runs an image offline, as build and boot will."""

from __future__ import annotations

from typing import Any

import pytest

from tests.services import ScratchImage


@pytest.mark.docker
def test_scratch_image_runs_without_network(
    docker_client: Any, scratch_image: ScratchImage
) -> None:
    container = docker_client.containers.run(scratch_image.tag, detach=True, network_mode="none")
    try:
        result = container.wait(timeout=60)
        stdout = container.logs(stdout=True, stderr=False).decode()
    finally:
        container.remove(force=True)
    assert result["StatusCode"] == 0
    assert stdout == scratch_image.stdout
