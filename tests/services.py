"""Fixtures for the real services integration tests use: a Docker engine and an S3 server.

`.ci/with-services` starts both and exports the S3 settings. A missing service fails the test under
CI (a pipeline that silently skips its integration tests proves nothing) and skips it elsewhere.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import boto3
import docker
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from docker.errors import DockerException

# Labels every test image, so leftovers of an interrupted run can be found with a label filter.
TEST_LABEL = "lifecycle-test"

_HELLO_C = """\
#include <unistd.h>
static const char msg[] = MESSAGE;
int main(void) { return write(1, msg, sizeof msg - 1) == sizeof msg - 1 ? 0 : 1; }
"""


def _under_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def _unavailable(service: str, reason: str) -> NoReturn:
    """Fail under CI, skip elsewhere."""
    message = f"{service} unavailable ({reason}); run the tests under .ci/with-services"
    if _under_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A docker SDK client for the engine in the environment (DOCKER_HOST or the local socket)."""
    try:
        client = docker.from_env()
        client.ping()
    # requests' connection errors are OSErrors; from_env wraps them, ping may not.
    except (DockerException, OSError) as exc:
        _unavailable("Docker engine", str(exc))
    yield client
    client.close()


# boto3 ships no type information (mypy-boto3-s3 is not a test dependency), hence Any.
@pytest.fixture(scope="session")
def s3_client() -> Any:
    """A boto3 S3 client for the server `.ci/with-services` started; never real AWS by accident."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not os.environ.get("LIFECYCLE_TEST_S3") or not endpoint:
        _unavailable("S3", "LIFECYCLE_TEST_S3 or AWS_ENDPOINT_URL not set")
    # Path-style: bucket-name host names do not resolve for 127.0.0.1. Few retries: a dead local
    # server should fail the session in seconds, not after boto3's back-off.
    config = Config(s3={"addressing_style": "path"}, connect_timeout=5, retries={"max_attempts": 2})
    client = boto3.client("s3", endpoint_url=endpoint, config=config)
    try:
        client.list_buckets()
    except (BotoCoreError, ClientError) as exc:
        _unavailable("S3", f"ListBuckets on {endpoint}: {exc}")
    return client


@pytest.fixture
def s3_bucket(s3_client: Any) -> Iterator[str]:
    """A fresh, uniquely named bucket, emptied (every version) and deleted afterwards."""
    name = f"lifecycle-test-{secrets.token_hex(6)}"
    s3_client.create_bucket(Bucket=name)
    yield name
    # Versions and delete markers too: a bucket that ever had versioning on keeps them.
    for page in s3_client.get_paginator("list_object_versions").paginate(Bucket=name):
        keys = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        if keys:
            s3_client.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
    s3_client.delete_bucket(Bucket=name)


@dataclass(frozen=True)
class ScratchImage:
    """A test image built FROM scratch whose only program prints `stdout` and exits 0."""

    tag: str
    stdout: str


def build_scratch_image(client: Any, context: Path) -> ScratchImage:
    """Build a tiny image in `context` (an empty dir): no base image to pull, works offline."""
    token = secrets.token_hex(6)
    tag = f"lifecycle-test/smoke:{token}"
    # The random token in the output proves the container ran this build, not a cached image.
    stdout = f"hello from {token}\n"
    source = context / "hello.c"
    source.write_text(_HELLO_C.replace("MESSAGE", f'"hello from {token}\\n"'))
    # -static: FROM scratch has no libc to link against at run time.
    compiled = subprocess.run(
        ["gcc", "-static", "-Os", "-s", "-o", str(context / "hello"), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if compiled.returncode != 0:
        pytest.fail(f"gcc -static failed:\n{compiled.stderr}", pytrace=False)
    (context / "Dockerfile").write_text('FROM scratch\nCOPY hello /hello\nENTRYPOINT ["/hello"]\n')
    client.images.build(
        path=str(context),
        tag=tag,
        labels={TEST_LABEL: "smoke"},
        network_mode="none",
        rm=True,
        forcerm=True,
    )
    return ScratchImage(tag=tag, stdout=stdout)


@pytest.fixture
def scratch_image(docker_client: Any, tmp_path: Path) -> Iterator[ScratchImage]:
    """A freshly built scratch image, removed (with any container left on it) afterwards."""
    context = tmp_path / "scratch-image"
    context.mkdir()
    image = build_scratch_image(docker_client, context)
    yield image
    docker_client.images.remove(image.tag, force=True)
