"""What the docker SDK raises when dockerd is not there or refuses is caught by name
(lifecycle.dockerd.sdk_errors), and said in one line, not a traceback."""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import docker
import pytest
import requests

from lifecycle.dockerd import DockerUnavailable, connect, sdk_errors
from lifecycle.teardown.containers import ALREADY_GONE, ImageDecision, remove_image
from lifecycle.teardown.survey import Services, current_mounts
from tests.silent_servers import serving


class _Dockerd(BaseHTTPRequestHandler):
    """A dockerd's first-contact answers: its ping (naming `version`, or no version when None),
    and /version; or every request answered `status` when that is set. Each request kept."""

    version: ClassVar[str | None] = "1.43"
    status: ClassVar[int] = 200
    asked: ClassVar[list[str]] = []

    def do_HEAD(self) -> None:
        self.asked.append(f"HEAD {self.path}")
        self.send_response(self.status if self.path == "/_ping" else 404)
        if self.version and self.status == 200:
            self.send_header("Api-Version", self.version)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.asked.append(f"GET {self.path}")
        body = json.dumps({"ApiVersion": "1.41", "Version": "20.10"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _dockerd(version: str | None, status: int = 200) -> type[_Dockerd]:
    return type("Dockerd", (_Dockerd,), {"version": version, "status": status, "asked": []})


def test_the_api_version_is_the_one_dockerds_ping_names() -> None:
    # Its first contact is the ping alone: the SDK's own way asks /version (and dockerd waits
    # on containerd's answer to it), ~6 ms of every boot.
    handler = _dockerd("1.43")
    with serving(handler) as endpoint:
        client = connect({"DOCKER_HOST": endpoint.replace("http://", "tcp://")})
    assert client.api.api_version == "1.43"
    assert handler.asked == ["HEAD /_ping"]


def test_a_ping_naming_no_version_asks_version() -> None:
    handler = _dockerd(None)
    with serving(handler) as endpoint:
        client = connect({"DOCKER_HOST": endpoint.replace("http://", "tcp://")})
    assert client.api.api_version == "1.41"
    assert handler.asked == ["HEAD /_ping", "GET /version"]


def test_a_ping_refused_is_one_line() -> None:
    with serving(_dockerd("1.43", status=500)) as endpoint:
        where = endpoint.replace("http://", "tcp://")
        with pytest.raises(DockerUnavailable, match=f"Docker engine at {where}: 500 Server Error"):
            connect({"DOCKER_HOST": where})


@pytest.mark.docker
def test_a_real_dockerd_is_spoken_to_in_its_own_version(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    send = requests.Session.send

    def kept(session: requests.Session, request: Any, **kwargs: Any) -> Any:
        asked.append(f"{request.method} {request.path_url}")
        return send(session, request, **kwargs)

    monkeypatch.setattr(requests.Session, "send", kept)
    client = connect(os.environ)
    try:
        assert asked == ["HEAD /_ping"]
        assert client.api.api_version == client.version()["ApiVersion"]
        assert client.containers.list(sparse=True) is not None  # spoken to in that version
        assert asked[-1].startswith(f"GET /v{client.api.api_version}/containers/json")
    finally:
        client.close()


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
        assert remove_image(client, missing, set()) == ALREADY_GONE  # not this run's removal
        with pytest.raises(sdk_errors()) as caught:
            client.images.get("lifecycle-test/none:gone")
        assert isinstance(caught.value, docker.errors.NotFound)
    finally:
        client.close()
