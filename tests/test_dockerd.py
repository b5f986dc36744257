"""What the docker SDK raises when dockerd is not there or refuses is caught by name
(lifecycle.dockerd.sdk_errors), and said in one line, not a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

from lifecycle.dockerd import DockerUnavailable, connect, sdk_errors
from lifecycle.teardown.containers import ALREADY_GONE, ImageDecision, remove_image
from lifecycle.teardown.survey import Services, current_mounts


def test_a_socket_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    where = f"unix://{tmp_path}/no-docker.sock"
    with pytest.raises(DockerUnavailable, match=f"cannot reach the Docker engine at {where}: "):
        connect({"DOCKER_HOST": where, "LIFECYCLE_DOCKER_CONNECT_TIMEOUT": "2"})


def test_teardown_asks_a_gone_dockerd_and_says_why(tmp_path: Path) -> None:
    # A client made while dockerd was there, whose socket has gone since: requests' error.
    gone = docker.DockerClient(base_url=f"unix://{tmp_path}/gone.sock", version="1.41")
    with pytest.raises(sdk_errors()):
        gone.containers.list()
    mounts, problem = current_mounts(Services(docker=gone, s3=None, host_env={}))
    assert mounts == {} and problem is not None and "No such file or directory" in problem


@pytest.mark.docker
def test_an_image_that_does_not_exist_is_already_gone_not_removed_here() -> None:
    client = connect(os.environ)
    try:
        missing = ImageDecision("sha256:" + "0" * 64, ("lifecycle-test/none:gone",), "x", True, "")
        assert remove_image(client, missing) == ALREADY_GONE  # not this run's removal
        with pytest.raises(sdk_errors()) as caught:
            client.images.get("lifecycle-test/none:gone")
        assert isinstance(caught.value, docker.errors.NotFound)
    finally:
        client.close()
